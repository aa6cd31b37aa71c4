package interference

import (
	"math"
	"testing"

	"github.com/shoenig/test/must"
)

func predictOn(k *Knowledge, gpu string, jobs ...Profile) (out, unc []float64) {
	out, unc = make([]float64, len(jobs)), make([]float64, len(jobs))
	k.PredictOn(gpu, jobs, out, unc)
	return out, unc
}

// With nothing observed a prediction is the model's with the prior
// uncertainty; observations of the pair on one GPU model move it there and
// shrink its uncertainty, and nowhere else.
func TestKnowledgeLearnsPerGPUModel(t *testing.T) {
	m := Default()
	a, _ := m.Lookup("ResNet-50 (batch size 32)")
	b, _ := m.Lookup("Transformer (batch size 128)")
	c, _ := m.Lookup("A3C")
	k := NewKnowledge(m, m.Uncertainty)
	must.Greater(t, 0.05, k.Prior())
	model := m.Predict([]Profile{a, b})
	out, unc := predictOn(k, "V100", a, b)
	must.Eq(t, model, out)
	must.Eq(t, []float64{k.Prior(), k.Prior()}, unc)

	v := k.Version()
	for range 3 {
		k.Observe("V100", a, b, 0.3)
	}
	must.Greater(t, v, k.Version())
	out, unc = predictOn(k, "V100", a, b)
	must.Between(t, 0.3, out[0], model[0])
	// the pair's first observation is one sample of the model's error on
	// V100: it shifts the prior, and the rest weigh 1 : n against it
	bias, sd, seen := k.Belief("V100")
	must.Eq(t, 1, seen)
	must.InDelta(t, (0.3-model[0])/(1+PriorWeight), bias, 1e-12)
	must.InDelta(t, math.Sqrt((PriorWeight*k.Prior()*k.Prior()+(0.3-model[0])*(0.3-model[0]))/(1+PriorWeight)), sd, 1e-12)
	must.InDelta(t, (model[0]+bias+0.9)/4, out[0], 1e-12)
	must.InDelta(t, sd/2, unc[0], 1e-12)
	mean, n := k.Observed("V100", a, b)
	must.Eq(t, 3, n)
	must.Eq(t, 0.3, mean)

	// b was not observed with a: b's own estimate moves only by what was
	// learned of the model on V100.
	must.InDelta(t, model[1]+bias, out[1], 1e-12)
	must.Eq(t, sd, unc[1])
	// The job-level error carries to a's other partners on V100 ...
	withC := m.Predict([]Profile{a, c})
	out, unc = predictOn(k, "V100", a, c)
	must.Less(t, withC[0], out[0])
	must.InDelta(t, sd/2, unc[0], 1e-12)
	// ... and nothing carries to another GPU model.
	out, unc = predictOn(k, "H100", a, b)
	must.Eq(t, model, out)
	must.Eq(t, k.Prior(), unc[0])
}

// An unprofiled job has no prediction to be unsure of until it is seen;
// a GPU shared by three gets the model's prediction with the prior.
func TestKnowledgeUnprofiledAndTriples(t *testing.T) {
	m := Default()
	a, _ := m.Lookup("A3C")
	k := NewKnowledge(m, 0.2)
	out, unc := predictOn(k, "V100", Profile{}, a)
	must.Eq(t, 1.0, out[0])
	must.Eq(t, 0.0, unc[0])
	k.Observe("V100", Profile{}, a, 0.5)
	out, unc = predictOn(k, "V100", Profile{}, a)
	must.Eq(t, 0.75, out[0])
	must.Eq(t, 0.2/math.Sqrt2, unc[0])
	_, unc = predictOn(k, "V100", a, a, a)
	must.Eq(t, []float64{0.2, 0.2, 0.2}, unc)
	k.Observe("V100", a, a, math.NaN()) // ignored
	mean, n := k.Observed("V100", a, a)
	must.Eq(t, 0, n)
	must.Eq(t, 0.0, mean)
}

func TestKnowledgeIncompatibleIsUnorderedPerModel(t *testing.T) {
	k := NewKnowledge(Default(), 0.1)
	a, b := Profile{Name: "a", SM: 0.5}, Profile{SM: 0.2, MemBW: 0.3}
	must.False(t, k.Incompatible("V100", a, b))
	k.MarkIncompatible("V100", b, a)
	must.True(t, k.Incompatible("V100", a, b))
	must.True(t, k.Incompatible("V100", b, a))
	must.False(t, k.Incompatible("A100", a, b))
	must.False(t, Default().Incompatible("V100", a, b))
}

// What was observed of a job goes when it is forgotten, with every pair
// it is part of; the others' stay.
func TestKnowledgeForgetsGoneJobs(t *testing.T) {
	m := Default()
	a, b, c := Profile{Name: "a", SM: 0.5}, Profile{Name: "b", SM: 0.4}, Profile{ID: "c", SM: 0.3}
	k := NewKnowledge(m, m.Uncertainty)
	k.Observe("V100", a, b, 0.5)
	k.Observe("V100", b, c, 0.6)
	k.Observe("V100", c, b, 0.7)
	k.MarkIncompatible("V100", a, b)
	must.Eq(t, 7, k.Len()) // 3 pairs, 3 jobs, 1 bad pair
	v := k.Version()
	must.Eq(t, 0, k.Forget(func(string) bool { return false }))
	must.Eq(t, v, k.Version())
	must.Eq(t, 3, k.Forget(func(job string) bool { return job == "a" }))
	must.Greater(t, v, k.Version())
	must.False(t, k.Incompatible("V100", a, b))
	_, n := k.Observed("V100", b, c)
	must.Eq(t, 1, n)
	must.Eq(t, 3, k.Forget(func(job string) bool { return job == "c" }))
	must.Eq(t, 1, k.Len()) // b's own error, observed next to c
}

// The belief of the model on a GPU model is learned from the first
// observation of each pair there: where the model is 0.3 too optimistic,
// its mean error follows and an unobserved pair is predicted lower and
// less surely; where it is right, the uncertainty narrows below the
// prior. Repeated observations of one pair count once.
func TestKnowledgeBeliefPerGPUModel(t *testing.T) {
	m := Default()
	k := NewKnowledge(m, m.Uncertainty)
	names := m.Names()
	a, _ := m.Lookup(names[0])
	b, _ := m.Lookup(names[1])
	for i := 2; i < 14; i++ {
		p, _ := m.Lookup(names[i])
		pred := m.Predict([]Profile{a, p})
		for range 3 {
			k.Observe("K80", a, p, pred[0]-0.3)
			k.Observe("V100", a, p, pred[0])
		}
	}
	bias, sd, n := k.Belief("K80")
	must.Eq(t, 12, n)
	must.InDelta(t, -0.3*12/(12+PriorWeight), bias, 1e-9)
	must.Greater(t, m.Uncertainty, sd)
	vb, vsd, vn := k.Belief("V100")
	must.Eq(t, 12, vn)
	must.InDelta(t, 0, vb, 1e-9)
	must.InDelta(t, m.Uncertainty*math.Sqrt(PriorWeight/(12.0+PriorWeight)), vsd, 1e-9)
	// b never ran on either: its pairs move with the GPU model's belief.
	c, _ := m.Lookup(names[20])
	model := m.Predict([]Profile{b, c})
	out, unc := predictOn(k, "K80", b, c)
	must.InDelta(t, max(model[0]+bias, 0), out[0], 1e-9)
	must.Eq(t, sd, unc[0])
	out, unc = predictOn(k, "V100", b, c)
	must.InDelta(t, model[0], out[0], 1e-9)
	must.Eq(t, vsd, unc[0])
	// a GPU model nothing ran on: the model's prediction and the prior
	_, psd, pn := k.Belief("A100")
	must.Eq(t, 0, pn)
	must.Eq(t, k.Prior(), psd)
}
