package webui

import (
	"fmt"
	"html/template"
	"slices"
	"time"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/scheduler/gpuhistory"
	"github.com/gpushare/gpushare/scheduler/gpumap"
)

// overviewPage is what the overview template reads: the Overview and the
// map drawn as bars.
type overviewPage struct {
	Overview
	Nodes   []nodeView
	Summary summary
}

type summary struct {
	Nodes, GPUs, Used, Shares, Unhealthy int
}

type nodeView struct {
	gpumap.Node
	Href         string // Nomad's UI, or ""
	Used, Shares int
	GPUs         []gpuView
}

type gpuView struct {
	gpumap.GPU
	// Live says its latest stats; Spark draws its utilisation.
	Live  string
	Spark template.HTML
	// Pending, before the GPU's first sample, says when utilisation
	// appears.
	Pending   string
	Segments  []segment
	Users     []userView
	Instances []instanceView
}

// instanceView is one MIG instance under its GPU: a bar of its shares when
// it is shared further (Shares > 0), else its slices, whole.
type instanceView struct {
	gpumap.Instance
	Segments []segment
	Users    []userView
}

// segment is one stretch of a GPU's bar: one allocation's shares in its
// job's colour, another namespace's shares, or the free ones.
type segment struct {
	Style template.CSS // width and colour: computed from numbers only
	Title string
	Label string
	Href  string
	Kind  string // "job", "other" or "free"
}

type userView struct {
	gpumap.Usage
	// Spark draws the job's utilisation.
	Spark                 template.HTML
	Swatch                template.CSS
	Href, NomadJob, Alloc string
}

func summarize(m *gpumap.Map) summary {
	var s summary
	if m == nil {
		return s
	}
	for _, n := range m.Nodes {
		s.Nodes++
		for _, g := range n.GPUs {
			s.GPUs++
			if n.Sharing != devicefn.SharingMIG { // a MIG GPU counts slices, not shares
				s.Used += g.Used
				s.Shares += g.Shares
			}
			if !g.Healthy {
				s.Unhealthy++
			}
		}
	}
	return s
}

func colour(namespace, job string) template.CSS {
	return template.CSS(fmt.Sprintf("background:hsl(%d 58%% 40%%)", hue(namespace, job)))
}

func nodeViews(m *gpumap.Map, links Links, h History, now time.Time) []nodeView {
	if m == nil {
		return nil
	}
	out := make([]nodeView, 0, len(m.Nodes))
	for _, n := range m.Nodes {
		nv := nodeView{Node: n, Href: links.NomadNode(n.ID)}
		for _, g := range n.GPUs {
			nv.Used += g.Used
			nv.Shares += g.Shares
			gv := gpuView{GPU: g, Segments: segments(g, links), Users: users(g, links, h, now),
				Live: statsLine(g.Stats), Spark: sparkline(h.GPUs[g.UUID], now, h.Span, "GPU utilisation")}
			if gv.Live == "" && gv.Spark == "" {
				gv.Pending = firstSampleHint(h.Interval)
			}
			for _, inst := range g.MIG {
				as := gpumap.GPU{Shares: inst.Shares, Used: inst.Used, Users: inst.Users}
				gv.Instances = append(gv.Instances, instanceView{Instance: inst, Segments: segments(as, links), Users: users(as, links, h, now)})
			}
			nv.GPUs = append(nv.GPUs, gv)
		}
		out = append(out, nv)
	}
	return out
}

// segments draws a GPU's bar: its users' shares in order, then the free
// shares. A GPU whose users hold more than its shares (it should not
// happen) is drawn full.
func segments(g gpumap.GPU, links Links) []segment {
	if g.Shares <= 0 {
		return nil
	}
	width := func(n int) float64 { return 100 * float64(n) / float64(g.Shares) }
	var out []segment
	left := g.Shares
	users := slices.Clone(g.Users)
	// anonymous shares last, so that the reader's jobs line up on the left
	slices.SortStableFunc(users, func(a, b gpumap.Usage) int {
		switch {
		case a.Other == b.Other:
			return 0
		case a.Other:
			return 1
		}
		return -1
	})
	for _, u := range users {
		n := min(u.Shares, left)
		if n <= 0 {
			break
		}
		left -= n
		w := width(n)
		if u.Other {
			out = append(out, segment{Kind: "other", Style: template.CSS(fmt.Sprintf("width:%.3f%%", w)),
				Title: fmt.Sprintf("%d shares used by another namespace", u.Shares)})
			continue
		}
		seg := segment{Kind: "job", Href: links.Job(u.Namespace, u.Job),
			Style: template.CSS(fmt.Sprintf("width:%.3f%%;", w)) + colour(u.Namespace, u.Job),
			Title: fmt.Sprintf("%s/%s/%s: %d shares (allocation %s)", u.Namespace, u.Job, u.Group, u.Shares, short(u.AllocID))}
		if w >= 12 {
			seg.Label = u.Job
		}
		out = append(out, seg)
	}
	if left > 0 {
		out = append(out, segment{Kind: "free", Style: template.CSS(fmt.Sprintf("width:%.3f%%", width(left))),
			Title: fmt.Sprintf("%d shares free", left)})
	}
	return out
}

func users(g gpumap.GPU, links Links, h History, now time.Time) []userView {
	out := make([]userView, 0, len(g.Users))
	for _, u := range g.Users {
		v := userView{Usage: u}
		if !u.Other {
			v.Swatch = colour(u.Namespace, u.Job)
			v.Href = links.Job(u.Namespace, u.Job)
			v.NomadJob = links.NomadJob(u.Namespace, u.Job)
			v.Alloc = links.NomadAlloc(u.AllocID)
			v.Spark = sparkline(h.Jobs[gpuhistory.JobKey{Namespace: u.Namespace, Job: u.Job}], now, h.Span, "job's GPU utilisation")
		}
		out = append(out, v)
	}
	return out
}
