package miglayout

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/gpushare/gpushare/devicefn"
)

// Node is one node's MIG-enabled GPUs, by parent model.
type Node struct {
	ID     string  `json:"id"`
	Name   string  `json:"name"`
	Models []Model `json:"models"`
}

// Model is a node's MIG-enabled GPUs of one model.
type Model struct {
	Model string `json:"model"`
	// ParentSlices are the compute slices of each GPU.
	ParentSlices int `json:"parent_slices"`
	// Profiles the GPUs offer, as the plugin published them; empty for an
	// older plugin (the standard table is used then).
	Profiles []devicefn.MIGProfile `json:"profiles,omitempty"`
	GPUs     []GPU                 `json:"gpus"`
}

// GPU is one MIG-enabled GPU and its instances.
type GPU struct {
	Index int    `json:"index"`
	UUID  string `json:"uuid"`
	// Mode is how its instances reach Nomad: devicefn.MIGWhole or
	// devicefn.MIGShared.
	Mode         string     `json:"mode"`
	SharesPerGPU int        `json:"shares_per_gpu"`
	Instances    []Instance `json:"instances"`
}

// Instance is one MIG instance of a GPU.
type Instance struct {
	UUID    string `json:"uuid"`
	Profile string `json:"profile"`
	Slices  int    `json:"slices"`
	// Used is what allocations hold of it: shares of a shared instance,
	// its slices for a whole instance held; for display only.
	Used int `json:"used,omitempty"`
}

// Busy reports whether an allocation holds part of the GPU.
func (g GPU) Busy() bool {
	return slices.ContainsFunc(g.Instances, func(i Instance) bool { return i.Used > 0 })
}

// Demand is one kind of request, and how many allocations make it.
type Demand struct {
	// Shares of one GPU a fractional request asks for; requests of a GPU's
	// shares_per_gpu or more are not fractional and never count there.
	Shares int `json:"shares,omitempty"`
	// Profile, when set, is the MIG profile a request of a whole instance
	// asks for (nvidia/gpushare-mig/<profile>); Shares is then unused.
	Profile string `json:"profile,omitempty"`
	// Models the request allows; empty allows any.
	Models []string `json:"models,omitempty"`
	// Weight is its allocations (or instances).
	Weight float64 `json:"weight"`
}

// appliesTo reports whether the request may run on GPUs of model: it names
// no model, the model, or a shared instance group of the model.
func (d Demand) appliesTo(model string) bool {
	if len(d.Models) == 0 {
		return true
	}
	return slices.ContainsFunc(d.Models, func(m string) bool {
		return m == model || strings.HasPrefix(m, model+devicefn.MIGGroupInfix)
	})
}

// Options tune when a change is worth recommending.
type Options struct {
	// MinRelative is the least saving, as a fraction of the current
	// expected fragmentation, worth a change.
	MinRelative float64
	// MinShares is the least saving, in shares per GPU of the model,
	// worth a change.
	MinShares float64
}

// DefaultOptions recommend a change that saves a tenth of the current
// fragmentation and two shares per GPU (at 100 shares per GPU: 2%).
var DefaultOptions = Options{MinRelative: 0.10, MinShares: 2}

// Amount is a fragmentation in shares of the parents and in compute slices.
type Amount struct {
	Shares float64 `json:"shares"`
	Slices float64 `json:"slices"`
}

// Size is one request size of the demand counted for a model, and its
// allocations: aggregate, it names no job.
type Size struct {
	Shares  int     `json:"shares,omitempty"`
	Profile string  `json:"profile,omitempty"`
	Weight  float64 `json:"weight"`
}

// Recommendation is the layout recommended for a node's GPUs of one model.
type Recommendation struct {
	NodeID string `json:"node_id"`
	Node   string `json:"node"`
	Model  string `json:"model"`
	// Mode is the instances' mode: "whole", "shared", or "mixed".
	Mode string `json:"mode"`
	// GPUs of the model on the node, and how many have an instance in use.
	GPUs int `json:"gpus"`
	Busy int `json:"busy"`
	// Current is the GPUs' layout; nil when their layouts differ, each
	// then in CurrentByGPU.
	Current      []string    `json:"current"`
	CurrentByGPU []GPULayout `json:"current_by_gpu,omitempty"`
	// Recommended is the layout recommended; Change says whether it
	// differs from the current one (when it does not, it is the current).
	Recommended []string `json:"recommended,omitempty"`
	Change      bool     `json:"change"`
	// Fragmentation is the expected fragmentation, over the node's GPUs
	// of the model, of the current layout and of the recommended one.
	Fragmentation struct {
		Current     Amount `json:"current"`
		Recommended Amount `json:"recommended"`
	} `json:"fragmentation"`
	Saving Amount `json:"saving"`
	// Config is the plugin's mig block that makes the layout
	// ("" without a change).
	Config string `json:"config,omitempty"`
	// Note says why nothing changes, or what the rule assumed.
	Note string `json:"note,omitempty"`
	// Demand is the request sizes counted for the model.
	Demand []Size `json:"demand,omitempty"`
}

// GPULayout is one GPU's current layout.
type GPULayout struct {
	Index  int      `json:"index"`
	UUID   string   `json:"uuid"`
	Layout []string `json:"layout"`
	Busy   bool     `json:"busy,omitempty"`
}

// Recommend returns a recommendation per node and model, in node order.
func Recommend(nodes []Node, demand []Demand, opts Options) []Recommendation {
	var out []Recommendation
	for _, n := range nodes {
		for _, m := range n.Models {
			if len(m.GPUs) == 0 || m.ParentSlices < 1 {
				continue
			}
			r := recommend(m, demand, opts)
			r.NodeID, r.Node = n.ID, n.Name
			out = append(out, r)
		}
	}
	return out
}

func recommend(m Model, demand []Demand, opts Options) Recommendation {
	r := Recommendation{Model: m.Model, GPUs: len(m.GPUs)}
	var present []string
	current := make([]Layout, len(m.GPUs))
	modes := map[string]bool{}
	for _, g := range m.GPUs {
		modes[g.Mode] = true
		if g.Busy() {
			r.Busy++
		}
		for _, inst := range g.Instances {
			present = append(present, inst.Profile)
		}
	}
	parent := NewParent(m.ParentSlices, m.Profiles, present)
	for i, g := range m.GPUs {
		for _, inst := range g.Instances {
			p, ok := parent.profile(inst.Profile)
			if !ok { // a profile the table misses: its slices, no memory known
				p = Profile{Name: inst.Profile, Slices: inst.Slices}
			}
			current[i] = append(current[i], p)
		}
		current[i] = canonical(current[i])
	}
	r.Mode = "mixed"
	if len(modes) == 1 {
		for mode := range modes {
			r.Mode = mode
		}
	}
	r.Current = current[0].Names()
	for _, l := range current[1:] {
		if !sameLayout(l, current[0]) {
			r.Current = nil
			for i, c := range current {
				g := m.GPUs[i]
				r.CurrentByGPU = append(r.CurrentByGPU, GPULayout{Index: g.Index, UUID: g.UUID, Layout: c.Names(), Busy: g.Busy()})
			}
			break
		}
	}
	sizes := make([][]size, len(m.GPUs))
	some := false
	for i, g := range m.GPUs {
		var shown []Size
		sizes[i], shown = sizesFor(m.Model, &parent, g.SharesPerGPU, demand)
		if r.Demand == nil {
			r.Demand = shown
		}
		some = some || len(sizes[i]) > 0
	}
	if !some {
		r.Note = "no fractional demand for this model: the layout is left as it is"
		return r
	}
	eval := func(l func(i int) Layout) Amount {
		var a Amount
		for i, g := range m.GPUs {
			if len(sizes[i]) == 0 {
				continue
			}
			f := fragmentation(l(i), g.Mode, m.ParentSlices, g.SharesPerGPU, sizes[i])
			a.Shares += f
			a.Slices += f * float64(m.ParentSlices) / float64(g.SharesPerGPU)
		}
		return a
	}
	cur := eval(func(i int) Layout { return current[i] })
	r.Fragmentation.Current = round(cur)
	layouts, cut := parent.Layouts()
	var best Layout
	var bestF Amount
	for _, l := range layouts {
		f := eval(func(int) Layout { return l })
		if best == nil || better(f.Shares, l, bestF.Shares, best) {
			best, bestF = l, f
		}
	}
	var notes []string // what the search assumed, after why nothing changes
	if cut {
		notes = append(notes, fmt.Sprintf("only the first %d layouts were compared", MaxLayouts))
	}
	if parent.Derived {
		notes = append(notes, "the plugin published no MIG profiles for this model: the standard table was assumed")
	}
	saving := cur.Shares - bestF.Shares
	keep := func(why string) Recommendation {
		r.Recommended = r.Current
		r.Fragmentation.Recommended = r.Fragmentation.Current
		r.Note = strings.Join(append([]string{why}, notes...), "; ")
		return r
	}
	switch {
	case best == nil:
		return keep("no valid layout of its profiles")
	case r.Current != nil && sameLayout(best, current[0]):
		return keep("the current layout is the best for this demand")
	case saving <= eps*float64(len(m.GPUs)):
		return keep("no layout does better than the current one")
	case saving < opts.MinRelative*cur.Shares || saving < opts.MinShares*float64(len(m.GPUs)):
		return keep(fmt.Sprintf("the best layout, %s, would save only %.1f shares of %.1f: kept as it is",
			best, saving, cur.Shares))
	}
	r.Change = true
	r.Recommended = best.Names()
	r.Fragmentation.Recommended = round(bestF)
	r.Saving = round(Amount{Shares: saving, Slices: cur.Slices - bestF.Slices})
	r.Config = Config(m.Model, r.Recommended)
	r.Note = strings.Join(notes, "; ")
	return r
}

const eps = 1e-9

// better orders layouts: less fragmentation, then more instances, then
// fewer compute slices, then fewer memory slices, then by name.
func better(f float64, l Layout, bf float64, b Layout) bool {
	if math.Abs(f-bf) > eps {
		return f < bf
	}
	if len(l) != len(b) {
		return len(l) > len(b)
	}
	lc, lm := l.slices()
	bc, bm := b.slices()
	if lc != bc {
		return lc < bc
	}
	if lm != bm {
		return lm < bm
	}
	return strings.Join(l.Names(), ",") < strings.Join(b.Names(), ",")
}

// sizesFor turns the demand into the request sizes counted on a GPU of the
// model with spg shares, normalised, and the aggregate shown.
func sizesFor(model string, parent *Parent, spg int, demand []Demand) ([]size, []Size) {
	type key struct {
		shares  int
		profile string
	}
	agg := map[key]float64{}
	var keys []key
	total := 0.0
	for _, d := range demand {
		if d.Weight <= 0 || !d.appliesTo(model) {
			continue
		}
		k := key{profile: d.Profile}
		if d.Profile != "" {
			if _, ok := parent.profile(d.Profile); !ok {
				continue
			}
		} else {
			if d.Shares < 1 || d.Shares >= spg {
				continue
			}
			k.shares = d.Shares
		}
		if _, ok := agg[k]; !ok {
			keys = append(keys, k)
		}
		agg[k] += d.Weight
		total += d.Weight
	}
	slices.SortFunc(keys, func(a, b key) int {
		if a.shares != b.shares {
			return a.shares - b.shares
		}
		return strings.Compare(a.profile, b.profile)
	})
	var out []size
	var shown []Size
	for _, k := range keys {
		s := size{shares: float64(k.shares), profile: k.profile, weight: agg[k] / total}
		if k.profile != "" {
			p, _ := parent.profile(k.profile)
			s.slices = p.Slices
			s.shares = float64(p.Slices*spg) / float64(parent.Slices)
		}
		out = append(out, s)
		shown = append(shown, Size{Shares: k.shares, Profile: k.profile, Weight: agg[k]})
	}
	return out, shown
}

func round(a Amount) Amount {
	r := func(x float64) float64 { return math.Round(x*100) / 100 }
	return Amount{Shares: r(a.Shares), Slices: r(a.Slices)}
}

// Config is the plugin's mig block line that makes model's GPUs the layout.
func Config(model string, names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	return "mig { " + strconv.Quote(model) + " = [" + strings.Join(q, ", ") + "] }"
}
