package service

import (
	"cmp"
	"slices"
	"strings"

	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/gpushare/gpushare/scheduler/webui"
	"github.com/hashicorp/nomad/api"
)

// A job's page and its family: a child dispatched from a parameterized
// job carries its parent's pin (the pool Nomad places every child in), so
// its status's placement is the whole pool; its page says so and shows
// where its own allocations run instead. A periodic or parameterized
// parent's page lists its children (Nomad's jobs whose ParentID it is),
// each with its state and a link to its page.

// maxUIChildren is how many children a parent's page lists, newest first.
const maxUIChildren = 20

// jobFamily is what the page shows of a job's family, and, for a
// dispatched child, where each group's live allocations run (by group).
type jobFamily struct {
	webui.Family
	own map[string][]webui.AllocPlace
}

// uiFamily fills page's family, and each group's own allocations when the
// job is a dispatched child.
func (s *httpAPI) uiFamily(page *webui.Job) {
	f := s.view.family(page.Namespace, page.ID)
	page.Family = f.Family
	for i := range page.Groups {
		page.Groups[i].Own = f.own[page.Groups[i].Name]
	}
}

// family is job ns/id's parent and children, from the model.
func (v *apiView) family(ns, id string) jobFamily {
	v.c.mu.Lock()
	defer v.c.mu.Unlock()
	var f jobFamily
	job := v.c.state.Jobs[model.JobKey(ns, id)]
	if job == nil {
		return f
	}
	f.Parent = parentOf(v.c.state.Jobs, job)
	if parent, ok := model.DispatchedFrom(job); ok {
		f.Parent, f.Dispatched = parent, true
		f.own = map[string][]webui.AllocPlace{}
		for _, tg := range job.TaskGroups {
			// every allocation, ended or not: a child's run is short, and
			// where an ended one ran is still worth seeing; live ones first
			allocs := slices.Clone(v.c.state.AllAllocs(ns, id, *tg.Name))
			slices.SortStableFunc(allocs, func(a, b *api.Allocation) int {
				switch la, lb := model.Live(a), model.Live(b); {
				case la && !lb:
					return -1
				case lb && !la:
					return 1
				}
				return cmp.Compare(b.CreateIndex, a.CreateIndex)
			})
			for _, a := range allocs {
				f.own[*tg.Name] = append(f.own[*tg.Name], placeOf(v.c.state, a))
			}
		}
	}
	switch {
	case job.IsPeriodic():
		f.Kind = "periodic"
	case job.IsParameterized():
		f.Kind = "parameterized"
	}
	if f.Kind != "" {
		f.Children, f.ChildCount = childrenOf(v.c.state, v.answers, model.KeyOf(job, "").Namespace, id)
	}
	return f
}

// placeOf is where allocation a runs, or ran: its node's name (from st)
// and the shares it holds on each GPU. The caller holds the model's lock.
func placeOf(st *model.State, a *api.Allocation) webui.AllocPlace {
	p := webui.AllocPlace{ID: a.ID, Node: a.NodeID, Status: a.ClientStatus}
	if n := st.Nodes[a.NodeID]; n != nil && n.Name != "" {
		p.Node = n.Name
	} else if len(p.Node) > 8 {
		p.Node = p.Node[:8]
	}
	shares := slices.Sorted(slices.Values(model.Shares(a)))
	for _, sh := range shares {
		gpu := model.GPUOf(sh)
		if gpu == "" {
			continue
		}
		if n := len(p.GPUs); n > 0 && p.GPUs[n-1].UUID == gpu {
			p.GPUs[n-1].Shares++
		} else {
			p.GPUs = append(p.GPUs, webui.GPUShares{UUID: gpu, Shares: 1})
		}
	}
	return p
}

// childrenOf lists the children of job ns/parent st holds, newest first,
// at most maxUIChildren, and how many there are, each with why it waits
// (the last pass's answers). The caller holds the model's lock.
func childrenOf(st *model.State, last lastAnswers, ns, parent string) ([]webui.Child, int) {
	var kids []*api.Job
	for _, j := range st.Jobs {
		if j.ID != nil && model.KeyOf(j, "").Namespace == ns && parentOf(st.Jobs, j) == parent {
			kids = append(kids, j)
		}
	}
	slices.SortFunc(kids, func(a, b *api.Job) int {
		if c := cmp.Compare(deref(b.SubmitTime), deref(a.SubmitTime)); c != 0 {
			return c
		}
		return strings.Compare(*b.ID, *a.ID) // periodic-<unix>, dispatch-<unix>-...: newest first
	})
	total := len(kids)
	kids = kids[:min(total, maxUIChildren)]
	out := make([]webui.Child, 0, len(kids))
	for _, j := range kids {
		c := webui.Child{ID: *j.ID, Status: deref(j.Status)}
		for _, tg := range j.TaskGroups {
			for _, a := range st.AllAllocs(ns, *j.ID, *tg.Name) {
				switch a.ClientStatus {
				case api.AllocClientStatusRunning:
					c.Running++
				case api.AllocClientStatusPending:
					c.Pending++
				case api.AllocClientStatusComplete:
					c.Complete++
				case api.AllocClientStatusFailed, api.AllocClientStatusLost:
					c.Failed++
				}
			}
			if why := last.waits(model.KeyOf(j, *tg.Name)); why != "" && c.Waits == "" {
				c.Waits = why
			}
		}
		out = append(out, c)
	}
	return out, total
}

// deref is *p, or the zero value for nil.
func deref[T any](p *T) T {
	if p == nil {
		var zero T
		return zero
	}
	return *p
}
