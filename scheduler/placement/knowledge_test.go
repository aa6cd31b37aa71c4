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
