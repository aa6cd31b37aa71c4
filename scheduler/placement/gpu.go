package placement

import "math/bits"

// GPU is one GPU of a node as the snapshot tracks it (read-only; see
// Snapshot.SetHealth).
type GPU struct {
	UUID  string
	Model string
	NUMA  int
	// Shares is shares_per_gpu of its group: a share is 1/Shares of a GPU
	// (of the parent GPU for a MIG instance), so a request's size means
	// the same on every GPU of the group.
	Shares int
	// Cap is the shares the GPU offers: Shares for a whole GPU, a shared
	// MIG instance's own (fewer but for a 7g instance; see MIG).
	Cap  int
	free int // next to Shares, Cap and Down: the fields eval reads
	// Down is set for an unhealthy GPU: nothing new is placed on it.
	Down bool
	ts   int  // time-sliced allocations on it (timeslice.go)
	inst bool // a shared MIG instance (mig != nil)
	// mig is what is known of a shared MIG instance; nil for a whole GPU
	// (kept out of line: the eval loop reads GPUs by the thousand).
	mig    *migOf
	group  int      // index into Node.groups
	local  int      // index within its group
	used   []uint64 // indices Cap..Shares-1 are set for good
	allocs []*allocRec
}

// migOf is a shared MIG instance's parent GPU and profile.
type migOf struct{ parent, profile string }

// Parent is the UUID of the GPU a shared MIG instance is part of; "" for a
// whole GPU.
func (g *GPU) Parent() string {
	if g.mig == nil {
		return ""
	}
	return g.mig.parent
}

// Profile is a shared MIG instance's MIG profile; "" for a whole GPU.
func (g *GPU) Profile() string {
	if g.mig == nil {
		return ""
	}
	return g.mig.profile
}

// Free returns the number of free shares of the GPU.
func (g *GPU) Free() int { return g.free }

// Whole reports whether the GPU can serve a whole-GPU request: every share
// is free and it is no MIG instance (an instance never serves one, even a
// 7g instance that offers every share of its parent).
func (g *GPU) Whole() bool { return g.free == g.Shares && !g.inst }

// MIG reports whether the GPU is a shared MIG instance.
func (g *GPU) MIG() bool { return g.inst }

// Idle reports whether no share of the GPU is in use.
func (g *GPU) Idle() bool { return g.free == g.Cap }

// milliCap is the GPU's capacity in thousandths of a (parent) GPU.
func (g *GPU) milliCap() int { return g.Cap * 1000 / g.Shares }

func (g *GPU) isUsed(k int) bool { return g.used[k>>6]&(1<<(k&63)) != 0 }

func (g *GPU) setUsed(k int, v bool) {
	if v {
		g.used[k>>6] |= 1 << (k & 63)
	} else {
		g.used[k>>6] &^= 1 << (k & 63)
	}
}

// lowestFree returns the n lowest free share indices.
func (g *GPU) lowestFree(n int) []int {
	out := make([]int, 0, n)
	for w, word := range g.used {
		free := ^word
		for free != 0 && len(out) < n {
			b := bits.TrailingZeros64(free)
			k := w*64 + b
			if k >= g.Shares {
				return out
			}
			out = append(out, k)
			free &^= 1 << b
		}
		if len(out) == n {
			break
		}
	}
	return out
}
