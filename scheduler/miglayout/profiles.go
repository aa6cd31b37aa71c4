package miglayout

import (
	"cmp"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/gpushare/gpushare/devicefn"
)

// Profile is a GPU instance profile as the layout search sees it.
type Profile struct {
	Name string `json:"name"`
	// Slices are its compute slices, MemSlices its memory slices.
	Slices    int `json:"slices"`
	MemSlices int `json:"memory_slices"`
}

// recommendable reports whether a layout may list the profile: not a
// compute-instance profile ("1c.3g.20gb") nor one with media extensions
// ("1g.5gb+me", one per GPU at most).
func (p Profile) recommendable() bool {
	return !strings.Contains(p.Name, "+") && !strings.Contains(p.Name, "c.")
}

// Parent is what the GPUs of one model offer.
type Parent struct {
	// Slices and MemSlices are the compute and memory slices of the GPU.
	Slices    int `json:"slices"`
	MemSlices int `json:"memory_slices"`
	// Profiles it offers, largest first.
	Profiles []Profile `json:"profiles"`
	// Derived is set when the profiles are the standard table, not what
	// the plugin published (an older plugin publishes none).
	Derived bool `json:"derived,omitempty"`
}

// profile returns the named profile.
func (p *Parent) profile(name string) (Profile, bool) {
	for _, q := range p.Profiles {
		if q.Name == name {
			return q, true
		}
	}
	return Profile{}, false
}

// NewParent builds a parent of the given compute slices from the profiles
// the plugin published; with none, from the standard table of its slice
// count and the profile names present on its GPUs.
func NewParent(slices int, published []devicefn.MIGProfile, present []string) Parent {
	if len(published) > 0 {
		return fromPublished(slices, published)
	}
	return derived(slices, present)
}

// fromPublished gives each published profile its memory slices: its memory
// over the smallest one-slice profile's, rounded.
func fromPublished(slices int, ps []devicefn.MIGProfile) Parent {
	var unit uint64
	for _, p := range ps {
		if p.Slices == 1 && p.MemoryMiB > 0 && (unit == 0 || p.MemoryMiB < unit) {
			unit = p.MemoryMiB
		}
	}
	if unit == 0 { // no one-slice profile: the smallest memory is one slice
		for _, p := range ps {
			if p.MemoryMiB > 0 && (unit == 0 || p.MemoryMiB < unit) {
				unit = p.MemoryMiB
			}
		}
	}
	out := Parent{Slices: slices}
	for _, p := range ps {
		if p.Slices < 1 || p.Slices > slices {
			continue
		}
		ms := p.Slices
		if unit > 0 {
			ms = max(1, int(math.Round(float64(p.MemoryMiB)/float64(unit))))
		}
		out.Profiles = append(out.Profiles, Profile{Name: p.Name, Slices: p.Slices, MemSlices: ms})
		out.MemSlices = max(out.MemSlices, ms)
	}
	out.sort()
	return out
}

// standard are the memory slices of each profile size of the usual parents:
// A100, H100, H200, B200 (7 compute slices, 8 memory slices), A30 (4, 4).
var standard = map[int]struct {
	mem   map[int]int // compute slices -> memory slices
	total int
}{
	7: {mem: map[int]int{1: 1, 2: 2, 3: 4, 4: 4, 7: 8}, total: 8},
	4: {mem: map[int]int{1: 1, 2: 2, 4: 4}, total: 4},
}

// derived builds the standard table of a parent of the given slices, the
// memory of a memory slice read from the largest profile name present
// ("3g.20gb": 20 GB over 4 slices). Present names that the table does not
// name are kept. A parent of another slice count offers the present
// profiles only, a memory slice per compute slice.
func derived(slices int, present []string) Parent {
	out := Parent{Slices: slices, Derived: true}
	std, ok := standard[slices]
	var unit float64 // GB per memory slice
	best := 0
	for _, name := range present {
		g, gb, ok2 := parseName(name)
		if !ok2 || g > slices {
			continue
		}
		ms := g
		if ok && std.mem[g] > 0 {
			ms = std.mem[g]
		}
		if g > best {
			best, unit = g, gb/float64(ms)
		}
	}
	seen := map[string]bool{}
	if ok && unit > 0 {
		for _, g := range slices2(std.mem) {
			ms := std.mem[g]
			name := strconv.Itoa(g) + "g." + strconv.Itoa(int(math.Round(float64(ms)*unit))) + "gb"
			out.Profiles = append(out.Profiles, Profile{Name: name, Slices: g, MemSlices: ms})
			seen[name] = true
		}
		out.MemSlices = std.total
	} else {
		out.MemSlices = slices
	}
	for _, name := range present {
		g, gb, ok2 := parseName(name)
		if !ok2 || g > slices || seen[name] {
			continue
		}
		seen[name] = true
		ms := g
		if unit > 0 {
			ms = max(1, int(math.Round(gb/unit)))
		}
		out.Profiles = append(out.Profiles, Profile{Name: name, Slices: g, MemSlices: min(ms, out.MemSlices)})
	}
	out.sort()
	return out
}

func slices2(m map[int]int) []int {
	out := make([]int, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// parseName reads "<g>g.<mem>gb" (with "+me" or a "<c>c." prefix allowed):
// the GPU instance's compute slices and memory in GB.
func parseName(name string) (int, float64, bool) {
	if i := strings.Index(name, "c."); i >= 0 {
		name = name[i+2:]
	}
	name, _, _ = strings.Cut(name, "+")
	gs, mem, ok := strings.Cut(name, "g.")
	if !ok {
		return 0, 0, false
	}
	mem, ok = strings.CutSuffix(mem, "gb")
	g, err1 := strconv.Atoi(gs)
	gb, err2 := strconv.ParseFloat(mem, 64)
	if !ok || err1 != nil || err2 != nil || g < 1 || gb <= 0 {
		return 0, 0, false
	}
	return g, gb, true
}

// sort orders profiles largest first: compute slices, memory, name.
func (p *Parent) sort() { slices.SortFunc(p.Profiles, compareProfiles) }

func compareProfiles(a, b Profile) int {
	return cmp.Or(cmp.Compare(b.Slices, a.Slices), cmp.Compare(b.MemSlices, a.MemSlices), strings.Compare(a.Name, b.Name))
}
