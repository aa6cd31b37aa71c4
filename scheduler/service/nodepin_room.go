package service

import (
	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/model"
)

// nodePinRoom reports whether the nodes of a node pin have room, on
// healthy GPUs, for a group's missing allocations of shares each. The
// model calls a pinned group short (model.Built.Short) when fewer of the
// shares its record names are free than its missing allocations need;
// but under a node pin the record names the GPUs the policy expected, and
// Nomad takes any GPU with room on a pinned node (the first in the node's
// cell order, which the pin's cell-rank affinities give it; the
// lowest-indexed on a node without ranks: pin/node.go), so another
// allocation on the recorded shares leaves the pin short only
// when the nodes themselves lack room. The shares the snapshot holds for
// the group itself count as its own. Pinned again without need, a batch
// group would run again what ended: a new version, and Nomad ignores a
// batch job's terminal allocations of an older one.
func nodePinRoom(built *model.Built, key decide.Key, nodes []string, shares, missing int) bool {
	if missing <= 0 {
		return true
	}
	if shares <= 0 {
		return false
	}
	own := map[string]int{} // shares held for the group, by GPU
	for _, a := range built.Snapshot.Allocs() {
		if built.HeldFor[a.ID] != key {
			continue
		}
		for _, sh := range a.Shares {
			if id, err := devicefn.ParseShareID(sh); err == nil {
				own[id.UUID]++
			}
		}
	}
	fit := 0
	for _, id := range nodes {
		n, ok := built.Snapshot.Node(id)
		if !ok {
			continue
		}
		whole, per := 0, 0 // GPUs wholly free for the group; their shares each
		for i := range n.GPUs {
			g := &n.GPUs[i]
			if g.Down || g.MIG() {
				continue
			}
			free := g.Free() + own[g.UUID]
			if shares <= g.Shares {
				fit += free / shares // a fraction or one GPU: on one GPU
			} else if free >= g.Shares {
				whole, per = whole+1, g.Shares
			}
		}
		if whole > 0 { // several whole GPUs of one node each
			fit += whole / ((shares + per - 1) / per)
		}
	}
	return fit >= missing
}
