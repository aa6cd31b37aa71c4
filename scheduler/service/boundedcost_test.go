package service

import (
	"testing"
	"time"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/scheduler/config"
	"github.com/gpushare/gpushare/scheduler/interference"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/hashicorp/go-hclog"
	"github.com/shoenig/test/must"
)

// introspection { bounded_cost = true } reaches both halves of the rule:
// the step weighs a pairing's cost bounded by one introspection window,
// and the placement policy checks a production bound at the prediction.
// A production pair whose predicted slowdown fits the bound but whose
// uncertainty does not is refused without it and placed with it.
func TestBoundedCostReachesTheStepAndThePolicy(t *testing.T) {
	m := interference.Default()
	hog, ok := m.Lookup("ResNet-50 (batch size 16)")
	must.True(t, ok)
	tr, ok := m.Lookup("Transformer (batch size 32)")
	must.True(t, ok)
	pred := m.Predict([]interference.Profile{hog, tr})
	for _, on := range []bool{false, true} {
		cfg := config.Default()
		cfg.Introspection.BoundedCost = &on
		cfg.ProductionMaxSlowdown = 1 - min(pred[0], pred[1]) + 0.05 // within it at the prediction, not one uncertainty below
		must.NoError(t, cfg.Validate())
		s, err := newService(cfg, hclog.NewNullLogger(), &fakeNomad{}, func() time.Time { return time.Unix(1000, 0) })
		must.NoError(t, err)

		snap := placement.NewSnapshot()
		n, err := placement.NodeFromSpec(placement.NodeSpec{ID: "n", GPUs: 1, CPU: 64000, MemoryMiB: 65536})
		must.NoError(t, err)
		must.NoError(t, snap.AddNode(n))
		uuid := n.GPUs[0].UUID
		must.NoError(t, snap.AddAlloc(placement.Alloc{ID: "hog", Node: "n", Class: placement.ClassProduction,
			Shares: devicefn.ShareIDs(uuid, 50), Profile: hog}))
		d := s.loop.policy.Decide(snap, placement.Request{ID: "tr", Count: 1, Shares: 50, Class: placement.ClassProduction, Profile: tr})
		must.Eq(t, on, d.Placed(), must.Sprintf("bounded_cost = %t: %v", on, d.Refusal))

		want := time.Duration(0)
		if on {
			want = cfg.IntrospectionWindow()
		}
		must.Eq(t, want, stepConfig(cfg).ObserveWithin)
	}
}
