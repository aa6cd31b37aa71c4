package model

import (
	"fmt"
	"slices"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/scheduler/interference"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/hashicorp/nomad/api"
)

// HoldStaged holds in b's snapshot, for group of job, the shares of rec:
// a placement decided for the group and not yet written into its job,
// whose registration waits for Nomad to place the hold jobs that stage it
// (the service's hold_stage.go; those jobs are kept out of the model).
// They are held exactly as a pinned group's are while its allocations are
// missing (holdJob), until the next Snapshot, so no other group is
// decided onto them. It returns why the placement no longer stands —
// a pinned node is gone from the snapshot (down, ineligible, draining),
// a pinned GPU is unhealthy, another allocation holds a pinned share —
// and then holds nothing.
func (s *State) HoldStaged(b *Built, job *api.Job, group string, rec *pin.Record, profiles *interference.Model) error {
	snap := b.Snapshot
	tg := pin.Group(job, group)
	if tg == nil {
		return fmt.Errorf("job %s has no group %s", *job.ID, group)
	}
	r, err := s.Request(job, group, profiles)
	if err != nil {
		return err
	}
	key := KeyOf(job, group)
	live, missing := s.Missing(job, tg)
	own := map[string]bool{} // the group's live allocations keep theirs (a new version's pin may name them)
	replaced := 0
	for _, a := range live {
		for _, sh := range Shares(a) {
			own[sh] = true
		}
		if !Current(a, job) {
			replaced++
		}
	}
	replaced = min(replaced, pin.Count(tg)-missing)
	onNode := map[string]string{} // GPU -> its pinned node
	for _, id := range rec.Nodes {
		n, ok := snap.Node(id)
		if !ok {
			return fmt.Errorf("node %s takes no new work or is gone", id)
		}
		for _, g := range n.GPUs {
			onNode[g.UUID] = id
			if g.Down && slices.Contains(rec.GPUs, g.UUID) {
				return fmt.Errorf("GPU %s on node %s is unhealthy", g.UUID, id)
			}
		}
	}
	for _, sh := range rec.Shares {
		sid, err := devicefn.ParseShareID(sh)
		if err != nil || onNode[sid.UUID] == "" {
			return fmt.Errorf("share %s is on none of its nodes", sh)
		}
		if snap.InUse(sh) && !own[sh] {
			return fmt.Errorf("another allocation holds share %s", sh)
		}
	}
	for _, a := range holds(key, rec, snap.InUse, r, missing, replaced, snap) {
		a.VC, a.Class = Attribution(s, job, group)
		if err := snap.AddAlloc(a); err != nil {
			// CPU or memory taken: the shares are held all the same
			b.Problems = append(b.Problems, fmt.Sprintf("staged hold for %s: %v", r.ID, err))
			a.Res = placement.Resources{}
			if err := snap.AddAlloc(a); err != nil {
				b.Problems = append(b.Problems, fmt.Sprintf("staged hold for %s: %v", r.ID, err))
				continue
			}
		}
		b.HeldFor[a.ID] = key
	}
	return nil
}
