package miglayout

import (
	"slices"
	"strconv"
	"strings"

	"github.com/gpushare/gpushare/devicefn"
)

// MaxLayouts bounds the layouts enumerated per parent.
const MaxLayouts = 4096

// Layout is a GPU's instances, by profile, largest first.
type Layout []Profile

// Names are the profiles of the layout, as a mig block lists them.
func (l Layout) Names() []string {
	out := make([]string, len(l))
	for i, p := range l {
		out[i] = p.Name
	}
	return out
}

// slices returns the compute and memory slices the layout takes.
func (l Layout) slices() (int, int) {
	c, m := 0, 0
	for _, p := range l {
		c += p.Slices
		m += p.MemSlices
	}
	return c, m
}

// Valid reports whether the parent can hold the layout: only profiles it
// offers, compute and memory slices within the parent's, and a place for
// every instance (placeable).
func (p *Parent) Valid(l Layout) bool {
	for _, q := range l {
		if _, ok := p.profile(q.Name); !ok {
			return false
		}
	}
	c, m := l.slices()
	return len(l) > 0 && c <= p.Slices && m <= p.MemSlices && p.placeable(l)
}

// placeable reports whether the instances of l can be put side by side on
// the GPU by the placement rule of A100, H100 and A30 GPUs: an instance of
// m memory slices and g compute slices starts at a multiple of m, ends
// within the memory slices and its compute slices within the GPU's (on an
// A100: 1g at 0..6, 2g at 0, 2, 4, 3g at 0 or 4, 4g and 7g at 0), and no
// two overlap. So 4g+3g fits (4g at 0, 3g at 4) but 3g+3g+1g does not.
// The plugin creates instances through NVML, which checks NVIDIA's own
// placements before it destroys anything.
func (p *Parent) placeable(l Layout) bool {
	if p.MemSlices >= 64 {
		return true // no such GPU; the slice sums decide
	}
	order := canonical(l)
	slices.SortStableFunc(order, func(a, b Profile) int { return b.MemSlices - a.MemSlices })
	var place func(i int, used uint64) bool
	place = func(i int, used uint64) bool {
		if i == len(order) {
			return true
		}
		q := order[i]
		m := max(q.MemSlices, 1)
		for s := 0; s+m <= p.MemSlices && s+q.Slices <= p.Slices; s += m {
			span := (uint64(1)<<m - 1) << s
			if used&span == 0 && place(i+1, used|span) {
				return true
			}
		}
		return false
	}
	return place(0, 0)
}

// Layouts enumerates the valid layouts of recommendable profiles, at most
// MaxLayouts of them; the bool says whether the enumeration was cut.
func (p *Parent) Layouts() ([]Layout, bool) {
	var cands []Profile
	for _, q := range p.Profiles {
		if q.recommendable() && q.Slices <= p.Slices && q.MemSlices <= p.MemSlices {
			cands = append(cands, q)
		}
	}
	var out []Layout
	cut := false
	var cur Layout
	var walk func(from, c, m int)
	walk = func(from, c, m int) {
		if len(cur) > 0 {
			if len(out) >= MaxLayouts {
				cut = true
				return
			}
			out = append(out, slices.Clone(cur))
		}
		for i := from; i < len(cands); i++ {
			q := cands[i]
			if c+q.Slices > p.Slices || m+q.MemSlices > p.MemSlices {
				continue
			}
			cur = append(cur, q)
			if p.placeable(cur) { // a layout that cannot be placed has no placeable superset
				walk(i, c+q.Slices, m+q.MemSlices)
			}
			cur = cur[:len(cur)-1]
			if cut {
				return
			}
		}
	}
	walk(0, 0, 0)
	return out, cut
}

// String writes the layout for a person: "1g.5gb ×7" when one profile
// repeats, else "3g.20gb+2g.10gb+1g.5gb+1g.5gb".
func (l Layout) String() string { return Format(l.Names()) }

// Format writes profile names as Layout.String does.
func Format(names []string) string {
	if len(names) == 0 {
		return "no instance"
	}
	if len(names) > 1 && !slices.ContainsFunc(names, func(n string) bool { return n != names[0] }) {
		return names[0] + " ×" + strconv.Itoa(len(names))
	}
	return strings.Join(names, "+")
}

// canonical orders a layout largest first.
func canonical(l Layout) Layout {
	l = slices.Clone(l)
	slices.SortFunc(l, compareProfiles)
	return l
}

func sameLayout(a, b Layout) bool {
	return slices.Equal(canonical(a).Names(), canonical(b).Names())
}

// size is one request size of the demand, on one GPU: Shares of the GPU,
// or (Profile set) a whole instance of that profile, of Shares shares.
type size struct {
	shares  float64 // the request's shares of the parent
	profile string  // whole-mode: only an instance of this profile holds it
	slices  int     // the profile's slices, when profile is set
	weight  float64 // normalised over the GPU's demand
}

// fragmentation is the expected shares of a GPU of spg shares and parent
// slices that the demand cannot use under layout l in the given mode.
func fragmentation(l Layout, mode string, parentSlices, spg int, demand []size) float64 {
	total := 0.0
	for _, d := range demand {
		used := 0.0
		for _, inst := range l {
			used += use(inst, mode, parentSlices, spg, d)
		}
		total += d.weight * (float64(spg) - used)
	}
	return total
}

// use is the shares of one instance that requests of size d put to use.
func use(inst Profile, mode string, parentSlices, spg int, d size) float64 {
	if mode == devicefn.MIGShared {
		c := devicefn.MIGShares(inst.Slices, parentSlices, spg)
		r := d.shares
		if d.profile != "" {
			r = float64(devicefn.MIGShares(d.slices, parentSlices, spg))
		}
		if r <= 0 {
			return 0
		}
		n := int(float64(c) / r)
		return float64(n) * r
	}
	// whole instances: one request each
	if d.profile != "" {
		if inst.Name == d.profile {
			return float64(inst.Slices*spg) / float64(parentSlices)
		}
		return 0
	}
	if float64(inst.Slices*spg) >= d.shares*float64(parentSlices) {
		return d.shares
	}
	return 0
}
