package service

import (
	"cmp"
	"fmt"

	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/hashicorp/nomad/api"
)

// pool is the pin of a parameterized parent (lifecycle.Pool): a pool of
// GPUs on the nodes its job's rules allow (placement.Snapshot.Pool), into
// which Nomad places each child dispatched from it, since Nomad refuses
// every registration of a dispatched job. It is written like any pin
// (sendPins) but without a decision of the step: the pool holds no
// capacity, so there is nothing for the step to weigh it against. It
// returns why the parent is not pinned when it is not. The caller holds
// s.mu.
func (s *loop) pool(built *model.Built, job *api.Job, key decide.Key, out *collected) (decide.Action, string) {
	ns, err := s.feasibleNodes(built.Snapshot, job, key.Group, out)
	if err != nil || ns.none != "" {
		return decide.Action{}, cmp.Or(ns.none, fmt.Sprint(err))
	}
	req, err := s.state.Request(job, key.Group, s.profile)
	if err != nil {
		return decide.Action{}, err.Error()
	}
	req.Allowed, req.Models = ns.allowed, ns.narrow(req.Models)
	d := built.Snapshot.Pool(&req, s.policy.Name())
	if d.Refusal != nil {
		return decide.Action{}, "no pool of GPUs for its dispatched children: " + d.Refusal.Message
	}
	return decide.Action{Kind: decide.Pin, Group: key, Decision: d}, ""
}
