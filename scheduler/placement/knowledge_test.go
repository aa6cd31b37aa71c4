package placement

import (
	"testing"

	"github.com/gpushare/gpushare/scheduler/interference"
	"github.com/shoenig/test/must"
)

// With a Knowledge predictor a production pair is admitted only when its
// predicted slowdown plus the uncertainty fits the bound; good observations
// of the pair on this GPU model admit it; a pair marked incompatible there
// is never admitted again.
func TestUncertaintyObservationsAndIncompatiblePairs(t *testing.T) {
	m, pr := gavel(t, "ResNet-18 (batch size 16)", "LM (batch size 10)")
	hog, lm := pr[0], pr[1]
	s := cluster(t, NodeSpec{ID: "n", GPUs: 1})
	must.NoError(t, s.AddAlloc(Alloc{ID: "hog", Node: "n", Class: ClassProduction, Shares: shareRange("GPU-n-0", 0, 50), Profile: hog}))
	req := Request{ID: "lm", Count: 1, Shares: 50, Class: ClassProduction, Profile: lm}
	pred := m.Predict([]interference.Profile{hog, lm})
	req.MaxSlowdown = 1 - min(pred[0], pred[1]) + 0.1 // the model alone admits it

	must.True(t, policy(t, PolicyGpushare, Options{Model: m}).Decide(s, req).Placed())

	k := interference.NewKnowledge(m, 0.2)
	p := policy(t, PolicyGpushare, Options{Model: m, Predictor: k})
	d := p.Decide(s, req)
	must.False(t, d.Placed(), must.Sprint("the prediction plus its uncertainty exceeds the bound"))
	must.Eq(t, RefusedInterference, d.Refusal.Code)

	gpu, _ := s.Node("n")
	model := gpu.GPUs[0].Model
	for range 15 {
		k.Observe(model, hog, lm, 0.97)
		k.Observe(model, lm, hog, 0.97)
	}
	must.True(t, p.Decide(s, req).Placed(), must.Sprint("observed on this GPU model: the engine's caches follow the predictor"))
	// Nothing observed on another GPU model: still refused there.
	other := cluster(t, NodeSpec{ID: "n", GPUs: 1, Model: "another-gpu"})
	must.NoError(t, other.AddAlloc(Alloc{ID: "hog", Node: "n", Class: ClassProduction, Shares: shareRange("GPU-n-0", 0, 50), Profile: hog}))
	must.False(t, p.Decide(other, req).Placed())

	k.MarkIncompatible(model, lm, hog)
	d = p.Decide(s, req)
	must.False(t, d.Placed())
	// Not a production bound: an incompatible pair is not paired at all.
	req.Class = ClassOpportunistic
	must.False(t, p.Decide(s, req).Placed())
}

// Under BoundOnPrediction (introspection undoes a pairing seen breaking a
// bound) a production pair is admitted when its predicted slowdown fits
// the bound, however uncertain the prediction: the pair above that the
// uncertainty kept off. A bound the prediction itself breaks, the job's or
// its partner's, still refuses, and so does a pair marked incompatible.
func TestBoundOnPredictionLeavesTheUncertaintyToIntrospection(t *testing.T) {
	m, pr := gavel(t, "ResNet-50 (batch size 16)", "Transformer (batch size 32)")
	hog, lm := pr[0], pr[1]
	pred := m.Predict([]interference.Profile{hog, lm})
	t.Logf("predicted %.3f (hog) and %.3f (lm)", pred[0], pred[1])
	must.Between(t, 0.2, pred[0], 0.9) // the pairing slows both, so the bounds below are within 0..1
	must.Between(t, 0.2, pred[1], 0.9)
	s := cluster(t, NodeSpec{ID: "n", GPUs: 1})
	must.NoError(t, s.AddAlloc(Alloc{ID: "hog", Node: "n", Class: ClassProduction, MaxSlowdown: 1 - pred[0] + 0.1,
		Shares: shareRange("GPU-n-0", 0, 50), Profile: hog}))
	slowest := 1 - pred[1]
	req := Request{ID: "lm", Count: 1, Shares: 50, Class: ClassProduction, Profile: lm, MaxSlowdown: slowest + 0.1}

	k := interference.NewKnowledge(m, 0.2)
	must.False(t, policy(t, PolicyGpushare, Options{Model: m, Predictor: k}).Decide(s, req).Placed())
	p := policy(t, PolicyGpushare, Options{Model: m, Predictor: k, BoundOnPrediction: true})
	d := p.Decide(s, req)
	must.True(t, d.Placed(), must.Sprint("the prediction fits the bound"))
	must.Greater(t, 0, d.Placements[0].PredictedErr, must.Sprint("the uncertainty still travels with the placement"))

	tight := req
	tight.MaxSlowdown = slowest - 0.05
	must.False(t, p.Decide(s, tight).Placed(), must.Sprint("the prediction itself breaks the job's bound"))

	mate := cluster(t, NodeSpec{ID: "n", GPUs: 1})
	must.NoError(t, mate.AddAlloc(Alloc{ID: "hog", Node: "n", Class: ClassProduction, MaxSlowdown: 1 - pred[0] - 0.05,
		Shares: shareRange("GPU-n-0", 0, 50), Profile: hog}))
	must.False(t, p.Decide(mate, req).Placed(), must.Sprint("the prediction breaks the partner's bound"))

	gpu, _ := s.Node("n")
	k.MarkIncompatible(gpu.GPUs[0].Model, lm, hog)
	must.False(t, p.Decide(s, req).Placed())
}
