package service

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gpushare/gpushare/devicefn/topologies"
	"github.com/gpushare/gpushare/scheduler/config"
	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/gpushare/gpushare/scheduler/queue"
	"github.com/gpushare/gpushare/scheduler/sim"
	"github.com/gpushare/gpushare/scheduler/sim/gavel"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// TestOneLoopTwoExecutors drives one scenario through both executors of
// decide.Step — the scheduling service against a fake Nomad, and the
// Gavel simulator's gpushare policy — and asserts they are given the same
// actions: six jobs arrive together on an empty DGX-1 (a 4-GPU, a 2-GPU
// and two 1-GPU jobs start, each 1-GPU job on an idle GPU of its own; an
// 8-GPU job waits and holds the node; a long 1-GPU job may not pair on the
// held node). GPUs are compared by their index on the node, since the
// simulator's servers have GPU UUIDs of their own.
func TestOneLoopTwoExecutors(t *testing.T) {
	const small, large = "ResNet-18 (batch size 32)", "ResNet-50 (batch size 64)"
	jobs := []gavel.Job{
		{Type: large, Steps: 40000, Scale: 4},
		{Type: large, Steps: 20000, Scale: 2},
		{Type: small, Steps: 30000, Scale: 1},
		{Type: small, Steps: 60000, Scale: 1},
		{Type: large, Steps: 90000, Scale: 8},
		{Type: small, Steps: 900000, Scale: 1},
	}
	thr, err := gavel.Embedded().Throughputs()
	must.NoError(t, err)

	// the simulator
	var simActions []decide.Action
	dgx1Cluster := gavel.Cluster{Name: "dgx1:1", Nodes: 1, GPUsPerNode: 8, Topology: topologies.DGX1V100}
	_, _, err = gavel.Simulate("gpushare", jobs, dgx1Cluster, thr, gavel.Options{OnStep: func(now float64, as []decide.Action) {
		if now == 0 {
			simActions = as
		}
	}})
	must.NoError(t, err)
	simNode, err := sim.NodeFromSpec(sim.NodeSpec{ID: "node-000", CPU: 1 << 40, MemoryMiB: 1 << 40, GPUs: 8, Model: "V100", Topology: topologies.DGX1V100})
	must.NoError(t, err)

	// the service, with the same jobs declared as a user would
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	now := time.Unix(1000, 0)
	for i, j := range jobs {
		per := min(j.Scale, 8)
		shares := uint64(50)
		if j.Scale > 1 {
			shares = uint64(per * 100)
		}
		job := gated(fmt.Sprintf("job-%06d", i), shares)
		job.SubmitTime = ptr(now.UnixNano())
		iso, err := thr.Isolated(j.Type, j.Scale, true)
		must.NoError(t, err)
		job.Meta[pin.MetaProfile] = j.Type
		job.Meta[pin.MetaClass] = "production"
		job.Meta[pin.MetaMaxSlowdown] = fmt.Sprint(gavel.DefaultMaxSlowdown)
		job.Meta[pin.MetaExpected] = queue.Seconds(j.Steps / iso).String()
		res := job.TaskGroups[0].Tasks[0].Resources
		res.CPU, res.MemoryMB = ptr(0), ptr(0)
		f.put(job)
	}
	cfg := config.Default()
	cfg.IdleGPUFirst = true
	s, err := newService(cfg, hclog.NewNullLogger(), f, func() time.Time { return now })
	must.NoError(t, err)
	var svcActions []decide.Action
	s.loop.onStep = func(as []decide.Action) { svcActions = as }
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	svcNode, err := model.NodeOf(f.nodes[0])
	must.NoError(t, err)

	gpuIndex := func(uuids []string, gpus []string) []int {
		var out []int
		for _, g := range gpus {
			out = append(out, slices.Index(uuids, g))
		}
		slices.Sort(out)
		return out
	}
	var simUUIDs, svcUUIDs []string
	for _, g := range simNode.GPUs {
		simUUIDs = append(simUUIDs, g.UUID)
	}
	for _, g := range svcNode.GPUs {
		svcUUIDs = append(svcUUIDs, g.UUID)
	}
	norm := func(as []decide.Action, uuids []string) []string {
		var out []string
		for _, a := range as {
			line := fmt.Sprintf("%s %s position %d/%d", a.Kind, a.Group.Job, a.Position, a.Of)
			if a.Decision != nil {
				for _, p := range a.Decision.Placements {
					line += fmt.Sprintf(" gpus %v shares %d", gpuIndex(uuids, p.GPUs), len(p.Shares))
				}
			}
			if a.Refusal != nil {
				line += " refused: " + a.Refusal.Code
			}
			if a.Hold != nil {
				line += fmt.Sprintf(" holds %d node(s)", len(a.Hold))
			}
			out = append(out, line)
		}
		return out
	}
	got, want := norm(svcActions, svcUUIDs), norm(simActions, simUUIDs)
	t.Logf("actions:\n%s", joinLines(want))
	must.Eq(t, want, got)
	must.SliceContainsFunc(t, got, "reserve job-000004 position 0/0 holds 1 node(s)", func(a, b string) bool { return a == b })
}

func joinLines(ls []string) string {
	out := ""
	for _, l := range ls {
		out += "  " + l + "\n"
	}
	return out
}
