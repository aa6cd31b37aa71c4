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
	must.Eq(t, (model[0]+0.9)/4, out[0])
	must.Eq(t, k.Prior()/2, unc[0])
	mean, n := k.Observed("V100", a, b)
	must.Eq(t, 3, n)
	must.Eq(t, 0.3, mean)

	// b was not observed with a: b's own estimate is unchanged.
	must.Eq(t, model[1], out[1])
	// The job-level error carries to a's other partners on V100 ...
	withC := m.Predict([]Profile{a, c})
	out, unc = predictOn(k, "V100", a, c)
	must.Less(t, withC[0], out[0])
	must.Eq(t, k.Prior()/2, unc[0])
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
