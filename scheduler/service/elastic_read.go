package service

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/interference"
	"github.com/gpushare/gpushare/scheduler/lifecycle"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/hashicorp/nomad/api"
)

// The loop's side of elastic groups (elastic.go): what a pass reads of the
// groups that opted in, during its read of the model (readModel), and the
// call that hands them, with what the step did, to the elastic type once
// the pass's pins are sent.

// elasticScan reads the groups that opted in from the model. It keeps
// nothing of its own: the loop builds it from what it holds where a pass
// reads the model (readElastic).
type elasticScan struct {
	state   *model.State
	profile *interference.Model
	// allowed are the nodes a group's own rules allow
	// (ruleMirror.feasibleNodes), others the nodes the job's other groups
	// are pinned to (moves.pinnedNodesOfOthers)
	allowed func(snap *placement.Snapshot, job *api.Job, group string, out *collected) (nodeSet, error)
	others  func(job *api.Job, group string) []string
}

// readElastic lists the groups that opted in to elastic resizing
// (gpushare.elastic), as the pass's read of the model finds them. The
// caller is the pass's read of the model (readModel).
func (s *loop) readElastic(built *model.Built) []elasticGroup {
	if s.elastic == nil {
		return nil
	}
	scan := elasticScan{state: s.state, profile: s.profile, allowed: s.mirror.feasibleNodes, others: s.moves.pinnedNodesOfOthers}
	return scan.read(built, s.passStages())
}

// read lists the groups that opted in: their scaling block, count,
// stage (in stages, the pass's), live allocations and, for those that
// run every allocation, their request on the nodes their rules allow.
func (e elasticScan) read(built *model.Built, stages map[decide.Key]lifecycle.Result) []elasticGroup {
	var out []elasticGroup
	for _, job := range e.state.Jobs {
		for _, tg := range job.TaskGroups {
			if job.Meta[MetaElastic] == "" && tg.Meta[MetaElastic] == "" {
				continue
			}
			v := pin.Meta(job, tg)[MetaElastic]
			on, known := optIn(v)
			if known && !on {
				continue
			}
			out = append(out, e.groupOf(built, job, tg, v, known, stages))
		}
	}
	slices.SortFunc(out, func(a, b elasticGroup) int { return decide.Key.Compare(a.key, b.key) })
	return out
}

// passStages are the stages the pass's collect found (collect_cache.go).
func (s *loop) passStages() map[decide.Key]lifecycle.Result {
	if c := s.collectCache(); !c.full {
		return c.stages
	}
	return s.answers.allStages()
}

// groupOf reads one group that opted in.
func (e elasticScan) groupOf(built *model.Built, job *api.Job, tg *api.TaskGroup, v string, known bool, stages map[decide.Key]lifecycle.Result) elasticGroup {
	name := *tg.Name
	g := elasticGroup{key: model.KeyOf(job, name), count: pin.Count(tg)}
	if job.JobModifyIndex != nil {
		g.jobIndex = *job.JobModifyIndex
	}
	sc := tg.Scaling
	if sc != nil {
		if sc.Min != nil {
			g.min = int(*sc.Min)
		}
		if sc.Max != nil {
			g.max = int(*sc.Max)
		}
	}
	stage, staged := stages[g.key]
	switch {
	case !known:
		g.unmanaged = fmt.Sprintf("%s = %q is not a value gpushare knows: write \"true\" (or \"false\")", MetaElastic, v)
	case sc == nil:
		g.unmanaged = fmt.Sprintf("%s is set, but the group has no scaling block: add one with min and max (and no policy) for gpushare to grow and shrink it", MetaElastic)
	case len(sc.Policy) > 0:
		g.unmanaged = "left to the Nomad Autoscaler: its scaling block has a policy (gpushare resizes only groups whose scaling block has none)"
	case sc.Enabled != nil && !*sc.Enabled:
		g.unmanaged = "its scaling block is disabled (enabled = false): gpushare does not resize it"
	case g.max <= 0:
		g.unmanaged = "its scaling block sets no max: gpushare does not know how far it may grow"
	case !pin.Wants(tg):
		g.unmanaged = "it asks for no nvidia/gpushare device: gpushare does not place it, nor resize it"
	case job.Stop != nil && *job.Stop || model.Template(job):
		g.unmanaged = "the job is stopped, or a template whose children are jobs of their own: nothing to resize"
	case !staged || !slices.Contains([]lifecycle.State{lifecycle.Running, lifecycle.PinnedUnplaced, lifecycle.Scaling}, stage.State):
		g.unmanaged = "resized only once gpushare placed it and while it runs"
		if staged {
			g.unmanaged += fmt.Sprintf(" (it is %s)", stage.State)
		}
	}
	if g.unmanaged != "" {
		return g
	}
	g.running = stage.State == lifecycle.Running
	g.unplaced = !g.running
	g.allocs = indexed(e.state.GroupAllocs(g.key.Namespace, g.key.Job, name))
	if g.running {
		g.req, g.reqErr = e.request(built, job, name)
	}
	return g
}

// indexed lists a group's live allocations by their index in the group
// (the N of their name "job.group[N]"; by creation when a name has none),
// lowest first.
func indexed(allocs []*api.Allocation) []indexedAlloc {
	out := make([]indexedAlloc, 0, len(allocs))
	named := true
	for _, a := range allocs {
		ia := indexedAlloc{id: a.ID, node: a.NodeID, index: allocIndex(a.Name), create: a.CreateIndex, shares: model.Shares(a)}
		named = named && ia.index >= 0
		out = append(out, ia)
	}
	if !named {
		slices.SortStableFunc(out, func(a, b indexedAlloc) int { return cmp.Compare(a.create, b.create) })
		for i := range out {
			out[i].index = i
		}
	}
	slices.SortStableFunc(out, func(a, b indexedAlloc) int {
		return cmp.Or(cmp.Compare(a.index, b.index), cmp.Compare(a.create, b.create))
	})
	return out
}

// request is a group's request on the nodes its rules allow, as collect
// makes it for a group to decide (prepare), or why there is none.
func (e elasticScan) request(built *model.Built, job *api.Job, name string) (r placement.Request, why string) {
	ns, err := e.allowed(built.Snapshot, job, name, &collected{seen: map[string]nodeSet{}})
	if err != nil || ns.none != "" {
		return r, cmp.Or(ns.none, fmt.Sprint(err))
	}
	req, err := e.state.Request(job, name, e.profile)
	if err != nil {
		return r, err.Error()
	}
	if ns.apart {
		req.Avoid = e.others(job, name)
	}
	req.Allowed, req.DistinctNodes, req.Limits = ns.allowed, ns.distinct, ns.limits
	req.Models = ns.narrow(req.Models)
	return req, ""
}

// resizeElastic hands the elastic groups the pass read, with the groups
// its step left waiting and whether it placed anything, to the elastic
// type, which resizes them (elastic.go). The snapshot is the pass's, as
// read.
func (s *loop) resizeElastic(ctx context.Context, r passRead, actions []decide.Action) {
	if s.elastic == nil || len(r.elastic) == 0 && s.elastic.idle() {
		return
	}
	p := resizePass{now: s.now(), snap: r.built.Snapshot, pol: s.policy, groups: r.elastic, reasons: map[decide.Key]string{}, placing: len(r.inPlace) > 0}
	byKey := make(map[decide.Key]int, len(r.groups))
	for i, g := range r.groups {
		byKey[g.Key] = i
	}
	for _, a := range actions {
		switch a.Kind {
		case decide.Wait:
			if i, ok := byKey[a.Group]; ok {
				p.waits = append(p.waits, r.groups[i])
				p.reasons[a.Group] = a.Reason
			}
		case decide.Pin, decide.Repin, decide.Preempt, decide.Unpair:
			p.placing = true
		}
	}
	s.elastic.resize(ctx, p)
}

// Nomad's scale API, as the Nomad Autoscaler calls it.

var _ elasticNomad = nomadClient{}

func (n nomadClient) Scale(ctx context.Context, namespace, jobID, group string, count int, index uint64, message string, meta map[string]any) error {
	ctx, cancel := n.bound(ctx)
	defer cancel()
	c := int64(count)
	req := &api.ScalingRequest{Count: &c, Target: map[string]string{"Job": jobID, "Group": group}, Message: message, Meta: meta, JobModifyIndex: index}
	_, _, err := n.c.Jobs().ScaleWithRequest(jobID, req, (&api.WriteOptions{Namespace: namespace}).WithContext(ctx))
	if err != nil && isConflict(err) {
		return errors.Join(ErrConflict, err)
	}
	return err
}

func (n nomadClient) ScaleEvents(ctx context.Context, namespace, jobID string) (map[string][]*api.ScalingEvent, error) {
	ctx, cancel := n.bound(ctx)
	defer cancel()
	var st *api.JobScaleStatusResponse
	err := retried(ctx, func() (err error) {
		st, _, err = n.c.Jobs().ScaleStatus(jobID, q(ctx, namespace))
		return err
	})
	if err != nil {
		return nil, err
	}
	out := map[string][]*api.ScalingEvent{}
	for g, ts := range st.TaskGroups {
		for i := range ts.Events {
			out[g] = append(out[g], &ts.Events[i])
		}
	}
	return out, nil
}
