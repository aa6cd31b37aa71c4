package service

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/interference"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/hashicorp/nomad/api"
)

// pools pins parameterized parents (pin, full, below). It keeps nothing
// of its own: the loop builds it from what it holds (loop.pools). Its
// caller holds the model's lock, or reads the model in a pass (reading.go).
type pools struct {
	state   *model.State
	profile *interference.Model
	policy  string // the placement policy's name
	// allowed are the nodes a group's own rules allow
	// (ruleMirror.feasibleNodes).
	allowed func(snap *placement.Snapshot, job *api.Job, group string, out *collected) (nodeSet, error)
}

// pools is the loop's pools.
func (s *loop) pools() pools {
	return pools{state: s.state, profile: s.profile, policy: s.policy.Name(), allowed: s.mirror.feasibleNodes}
}

// pin is the pin of a parameterized parent (lifecycle.Pool): a pool of
// GPUs on the nodes its job's rules allow (placement.Snapshot.Pool), into
// which Nomad places each child dispatched from it, since Nomad refuses
// every registration of a dispatched job. It is written like any pin
// (sendPins) but without a decision of the step: the pool holds no
// capacity, so there is nothing for the step to weigh it against. grow:
// the parent is pinned and its pool is full (lifecycle.Group.PoolFull);
// the new pool keeps what the pinned one names where it still has room
// (grown). It returns why the parent is not pinned when it is not.
func (p pools) pin(built *model.Built, job *api.Job, key decide.Key, grow bool, out *collected) (decide.Action, string) {
	req, d, why := p.fresh(built, job, key, out)
	if why != "" {
		return decide.Action{}, why
	}
	if rec, ok := p.state.Record(job, key.Group); ok && grow {
		grown(built.Snapshot, rec, req, d)
	}
	return decide.Action{Kind: decide.Pin, Group: key, Decision: d}, ""
}

// fresh is the pool the parent would be pinned to now, with the request
// it is for, or why there is none.
func (p pools) fresh(built *model.Built, job *api.Job, key decide.Key, out *collected) (*placement.Request, *placement.Decision, string) {
	ns, err := p.allowed(built.Snapshot, job, key.Group, out)
	if err != nil || ns.none != "" {
		return nil, nil, cmp.Or(ns.none, fmt.Sprint(err))
	}
	req, err := p.state.Request(job, key.Group, p.profile)
	if err != nil {
		return nil, nil, err.Error()
	}
	req.Allowed, req.Models = ns.allowed, ns.narrow(req.Models)
	d := built.Snapshot.Pool(&req, p.policy)
	if d.Refusal != nil {
		return nil, nil, "no pool of GPUs for its dispatched children: " + d.Refusal.Message
	}
	return &req, d, ""
}

// full reports whether a pinned parent's pool (rec) has no room left
// for another child on any of its nodes while the nodes its job's rules
// allow now have room it does not name: a node added since it was
// pinned, or another GPU of one of its nodes once its pool GPU is full
// (lifecycle.Group.PoolFull). Children wait in Nomad for room inside the
// pool they were dispatched with, and the pool was chosen once, when the
// parent was pinned: without this it never followed the cluster.
func (p pools) full(built *model.Built, job *api.Job, key decide.Key, rec *pin.Record, out *collected) bool {
	req, err := p.state.Request(job, key.Group, p.profile)
	if err != nil {
		return false
	}
	for _, id := range rec.Nodes {
		if n, ok := built.Snapshot.Node(id); ok && poolRoom(n, poolGPUs(n, rec), &req) {
			return false // Nomad places the next child there
		}
	}
	fresh, d, why := p.fresh(built, job, key, out)
	return why == "" && grown(built.Snapshot, rec, fresh, d)
}

// grown merges into d, a fresh pool for a parent, the pool rec it is
// pinned to: on each node of d, the GPUs rec names there while they still
// have room for a child, or while d's have none either; d's GPUs
// otherwise, and on the nodes rec does not name. It reports whether d so
// adds room for a child that rec has none for. On one node the pool still
// names the shares of one allocation's GPUs, never more (Nomad would give
// a child shares of two GPUs, which Reserve refuses). Children already
// dispatched keep the pool they were dispatched with: each is a copy of
// its parent, made when it was dispatched.
func grown(snap *placement.Snapshot, rec *pin.Record, req *placement.Request, d *placement.Decision) bool {
	adds := false
	for i := range d.Placements {
		p := &d.Placements[i]
		n, ok := snap.Node(p.Node)
		if !ok {
			continue
		}
		old := poolGPUs(n, rec)
		switch {
		case len(old) > 0 && (poolRoom(n, old, req) || !poolRoom(n, p.GPUs, req)):
			if !slices.Equal(old, p.GPUs) {
				p.GPUs, p.Shares = old, poolShares(rec, old)
				p.Cell, p.Reason = "", fmt.Sprintf("pool for dispatched children: the GPUs it named on node %s, kept", p.Node)
			}
		case poolRoom(n, p.GPUs, req):
			adds = true
		}
	}
	return adds
}

// poolGPUs are the GPUs of node n a pool names, in the node's order.
func poolGPUs(n *placement.Node, rec *pin.Record) []string {
	var out []string
	for i := range n.GPUs {
		if slices.Contains(rec.GPUs, n.GPUs[i].UUID) {
			out = append(out, n.GPUs[i].UUID)
		}
	}
	return out
}

// poolShares are the shares rec names on the given GPUs.
func poolShares(rec *pin.Record, gpus []string) []string {
	var out []string
	for _, sh := range rec.Shares {
		if slices.Contains(gpus, model.GPUOf(sh)) {
			out = append(out, sh)
		}
	}
	return out
}

// poolRoom reports whether the given GPUs of node n (a pool's on that
// node) can take one more child of r now: a fraction fits the free
// shares of one of them, a child of k whole GPUs needs k of them idle.
func poolRoom(n *placement.Node, gpus []string, r *placement.Request) bool {
	idle, k := 0, 0
	for i := range n.GPUs {
		g := &n.GPUs[i]
		if g.Down || !slices.Contains(gpus, g.UUID) {
			continue
		}
		if r.Shares < g.Shares {
			if g.Free() >= r.Shares {
				return true
			}
			continue
		}
		k = r.Shares / g.Shares
		if g.Whole() {
			idle++
		}
	}
	return k > 0 && idle >= k
}
