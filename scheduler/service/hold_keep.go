package service

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/hashicorp/nomad/api"
)

// A staged decision keeps its shares. Between the pass that registers a
// group's holds and the one that pins it (hold_stage.go) the group is
// still gated, its holds' allocations are kept out of the model (their
// shares are the group's) and no pin holds anything for it: a group
// ahead in the queue could be decided onto the held shares (Nomad could
// never place it there) or onto those of the group's first allocation,
// and the group itself, decided again, could be given other shares, its
// holds let go and new ones registered. So each pass, before the step,
// keepStaged holds in the snapshot, for each group waiting for its
// holds, every share of the placement its holds were registered for,
// exactly as a pinned group's shares are held while its allocations are
// missing (model.State.HoldStaged), and the group is not decided again:
// it is pinned as decided, its pin written back byte for byte (writePin),
// so that its holds, registered once, stage it. The decision is let go —
// its holds stopped (holdStale) and the group decided again in the same
// pass — only when it no longer stands: its job's request changed, a
// pinned node is gone or may no longer be used for the group, a pinned
// GPU is unhealthy, another allocation holds a pinned share, or the
// group is not to be placed any more; and when Nomad does not place the
// holds within holdPlaced (stage).
//
// What a group waits with is read from Nomad: its holds carry the
// placement they stage (metaHoldPlacement, whose sha256 is the signed
// metaHoldPin), so a scheduler that restarts while a group waits reads
// the decision back from its holds (adoptHolds) and comes to the same
// answer.

// keepStaged keeps the staged decisions of a pass (above) that read
// built, jobs and groups: it returns the groups left to decide and the
// pins of those kept, which leave groups. The caller does not hold the
// model's lock; the model is not written meanwhile (a pass's read).
func (st *stager) keepStaged(built *model.Built, jobs map[decide.Key]*api.Job, groups []decide.Group) ([]decide.Group, []decide.Action) {
	if st.nomad == nil {
		return groups, nil
	}
	st.c.mu.Lock()
	defer st.c.mu.Unlock()
	st.adoptHolds(built.Snapshot)
	if len(st.waiting) == 0 {
		return groups, nil
	}
	at := make(map[decide.Key]int, len(groups))
	for i, g := range groups {
		at[g.Key] = i
	}
	kept := map[decide.Key]bool{}
	var pins []decide.Action
	for _, key := range slices.SortedFunc(maps.Keys(st.waiting), decide.Key.Compare) {
		w := st.waiting[key]
		i, ok := at[key]
		rec, why := &pin.Record{}, "the group is no longer to be placed"
		if ok {
			rec, why = st.stagedStands(built, jobs[key], groups[i], w)
		}
		if why != "" {
			delete(st.waiting, key) // its holds are let go (holdStale)
			log := st.log.Info
			if !ok { // pinned meanwhile (by another replica), backing off, or its job gone
				log = st.log.Debug
			}
			log("a staged decision no longer stands: its holds are let go and the group is decided again",
				"group", key.String(), "holds", len(w.holds), "reason", why)
			continue
		}
		w.kept = true
		st.waiting[key] = w
		kept[key] = true
		pins = append(pins, stagedAction(built.Snapshot, groups[i], rec, w.why))
	}
	if len(kept) > 0 {
		groups = slices.DeleteFunc(slices.Clone(groups), func(g decide.Group) bool { return kept[g.Key] })
	}
	return groups, pins
}

// stagedStands checks that the decision w's holds were registered for
// still stands for group g of job, and then holds its shares in the
// pass's snapshot (built); else it says why not. The caller holds the
// model's lock.
func (st *stager) stagedStands(built *model.Built, job *api.Job, g decide.Group, w holdWait) (*pin.Record, string) {
	rec := &pin.Record{}
	if job == nil || json.Unmarshal([]byte(w.placement), rec) != nil {
		return nil, "its placement cannot be read"
	}
	if !rec.ForRequest(job, g.Key.Group) || rec.Incarnation != 0 && rec.Incarnation != pin.Incarnation(job) {
		return nil, "its job changed what the placement was decided on"
	}
	for _, n := range rec.Nodes {
		switch u := g.Req.Unstaged; {
		case u != nil && (u.Nodes == nil || u.Nodes[n]):
			return nil, fmt.Sprintf("it is not staged on node %s now: %s", n, u.Why)
		case g.Req.Allowed != nil && !slices.Contains(g.Req.Allowed, n):
			return nil, fmt.Sprintf("the job's rules no longer allow node %s", n)
		case slices.Contains(g.Req.Avoid, n):
			return nil, fmt.Sprintf("node %s is avoided (Nomad refused or lost the group there)", n)
		}
	}
	if err := st.c.state.HoldStaged(built, job, g.Key.Group, rec, st.profile); err != nil {
		return nil, err.Error()
	}
	return rec, ""
}

// stagedAction is the pin of a kept staged decision: rec, node by node
// (writePin writes the placement back as it was; stage finds its holds
// registered).
func stagedAction(snap *placement.Snapshot, g decide.Group, rec *pin.Record, why string) decide.Action {
	d := &placement.Decision{Request: g.Req.ID, Policy: rec.Policy}
	for _, nodeID := range rec.Nodes {
		p := placement.Placement{AllocID: fmt.Sprintf("%s[%d]", g.Req.ID, len(d.Placements)), Node: nodeID, Cell: rec.Cell,
			Reason: cmp.Or(why, "as decided when its holds were registered")}
		if n, ok := snap.Node(nodeID); ok {
			for _, gpu := range n.GPUs {
				if slices.Contains(rec.GPUs, gpu.UUID) {
					p.GPUs = append(p.GPUs, gpu.UUID)
				}
			}
		}
		for _, sh := range rec.Shares {
			if slices.Contains(p.GPUs, model.GPUOf(sh)) {
				p.Shares = append(p.Shares, sh)
			}
		}
		d.Placements = append(d.Placements, p)
	}
	return decide.Action{Kind: decide.Pin, Group: g.Key, Decision: d, Reason: "staged: pinned as decided when its holds were registered"}
}

// placementDigest is pinDigest of a placement meta.
func placementDigest(placement string) string {
	sum := sha256.Sum256([]byte(placement))
	return hex.EncodeToString(sum[:8])
}

// adoptHolds reads back from the hold book the staged decisions of the
// groups not pinned yet that this scheduler does not know (it restarted,
// or another replica registered them): the newest signed holds of each
// such group that carry the placement they stage and were registered
// after the job's current version (nothing registered the job since: not
// its pin, not a new version), when they hold all but one allocation's
// worth of it on each of its nodes. The caller holds the model's lock.
func (st *stager) adoptHolds(snap *placement.Snapshot) {
	type found struct {
		holds []*api.Job
		at    uint64
	}
	byKey := map[decide.Key]map[string]*found{}
	for _, j := range st.c.holds {
		key, ok := decide.ParseKey(j.Meta[metaHoldFor])
		if !ok || !st.holdSigned(key, j) {
			continue
		}
		if _, known := st.waiting[key]; known {
			continue
		}
		digest, p := j.Meta[metaHoldPin], j.Meta[metaHoldPlacement]
		job := st.c.state.Jobs[model.JobKey(key.Namespace, key.Job)]
		if p == "" || placementDigest(p) != digest || job == nil || ptrUint(j.JobModifyIndex) < ptrUint(job.JobModifyIndex) {
			// not a decision waiting for its holds: an older scheduler's
			// hold, or the job was registered since (its pin, or a new
			// version, which is decided again)
			continue
		}
		if byKey[key] == nil {
			byKey[key] = map[string]*found{}
		}
		f := byKey[key][digest]
		if f == nil {
			f = &found{}
			byKey[key][digest] = f
		}
		f.holds = append(f.holds, j)
		f.at = max(f.at, ptrUint(j.ModifyIndex))
	}
	now := st.now()
	for key, byDigest := range byKey {
		// the newest decision's; an older one's holds are let go (holdStale)
		digest := slices.MaxFunc(slices.Collect(maps.Keys(byDigest)), func(a, b string) int {
			if c := cmp.Compare(byDigest[a].at, byDigest[b].at); c != 0 {
				return c
			}
			return strings.Compare(a, b)
		})
		holds := byDigest[digest].holds
		slices.SortFunc(holds, func(a, b *api.Job) int { return strings.Compare(*a.ID, *b.ID) })
		p := holds[0].Meta[metaHoldPlacement]
		if !wholeStaging(snap, p, holds) {
			continue
		}
		w := holdWait{digest: digest, since: now, placement: p, holds: holds, why: "as decided (read back from its holds)"}
		for _, h := range holds {
			if h.SubmitTime != nil {
				w.since = minTime(w.since, time.Unix(0, *h.SubmitTime))
			}
			w.nodes = append(w.nodes, h.Meta[metaHoldNode])
		}
		w.nodes = slices.Compact(slices.Sorted(slices.Values(w.nodes)))
		if st.waiting == nil {
			st.waiting = map[decide.Key]holdWait{}
		}
		st.waiting[key] = w
		st.log.Info("read back from Nomad a group waiting for its holds: it is pinned as decided once Nomad places them", "group", key.String(), "holds", len(holds))
	}
}

// wholeStaging reports whether holds stage all of placement p: on each of
// its nodes, the pinned shares no hold holds are one allocation's worth
// at most (a scheduler stopped while it registered them left some out).
func wholeStaging(snap *placement.Snapshot, p string, holds []*api.Job) bool {
	rec := &pin.Record{}
	if json.Unmarshal([]byte(p), rec) != nil || rec.Count == 0 {
		return false
	}
	per := len(rec.Shares) / rec.Count
	held := map[string]bool{}
	for _, h := range holds {
		for _, sh := range heldShares(h) {
			held[sh] = true
		}
	}
	free := map[string]int{} // node -> pinned shares not held
	for _, nodeID := range rec.Nodes {
		n, ok := snap.Node(nodeID)
		if !ok {
			return false // the decision does not stand: its holds are let go
		}
		for _, g := range n.GPUs {
			for _, sh := range rec.Shares {
				if model.GPUOf(sh) == g.UUID && !held[sh] {
					free[nodeID]++
				}
			}
		}
	}
	for _, n := range free {
		if n > per {
			return false
		}
	}
	return true
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
