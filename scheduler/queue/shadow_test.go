package queue

import (
	"testing"

	"github.com/shoenig/test/must"
)

// The shadow is exclusive first come first served: a job starts when GPUs
// free for it, in arrival order, except that a job that does not fit lets
// later ones that do start (they do not wait behind it); a job of up to a
// node takes the tightest node, a larger one whole nodes.
func TestShadowIsExclusiveFCFS(t *testing.T) {
	s, err := NewShadow(2, 2)
	must.NoError(t, err)
	must.NoError(t, s.Arrive(0, 0, 2, 10))  // node 0, 0-10
	must.NoError(t, s.Arrive(1, 1, 4, 100)) // both nodes: waits for node 0
	must.NoError(t, s.Arrive(2, 2, 1, 5))   // fits on node 1 now: 2-7
	must.NoError(t, s.Arrive(3, 3, 1, 50))  // node 1's other GPU: 3-53
	must.NoError(t, s.Arrive(4, 4, 1, 1))   // no GPU free: waits
	for id, want := range map[int]float64{0: 0, 2: 2, 3: 3} {
		got, ok := s.Start(id)
		must.True(t, ok, must.Sprintf("job %d", id))
		must.Eq(t, want, got, must.Sprintf("job %d", id))
	}
	_, ok := s.Start(1)
	must.False(t, ok)
	s.Advance(9)
	got, ok := s.Start(4) // node 1's GPU freed at 7
	must.True(t, ok)
	must.Eq(t, 7.0, got)
	_, ok = s.Start(1)
	must.False(t, ok)
	s.Advance(60) // node 1 frees whole at 53 (job 3)
	got, ok = s.Start(1)
	must.True(t, ok)
	must.Eq(t, 53.0, got)
}

// A 1-GPU job takes the node with the fewest free GPUs that fit it, so
// that a whole node stays free for a larger job.
func TestShadowBestFit(t *testing.T) {
	s, err := NewShadow(2, 2)
	must.NoError(t, err)
	must.NoError(t, s.Arrive(0, 0, 1, 10)) // node 0
	must.NoError(t, s.Arrive(1, 0, 1, 10)) // node 0 (tightest), node 1 stays whole
	must.NoError(t, s.Arrive(2, 0, 2, 10)) // node 1
	got, ok := s.Start(2)
	must.True(t, ok)
	must.Eq(t, 0.0, got)
}

func TestShadowBadInput(t *testing.T) {
	_, err := NewShadow(0, 4)
	must.ErrorContains(t, err, "want at least one")
	s, err := NewShadow(1, 2)
	must.NoError(t, err)
	must.ErrorContains(t, s.Arrive(0, 0, 0, 1), "want at least one")
	must.NoError(t, s.Arrive(1, 0, 3, 1)) // larger than the cluster: no bound
	s.Advance(100)
	_, ok := s.Start(1)
	must.False(t, ok)
	must.ErrorContains(t, s.Arrive(1, 5, 3, 1), "arrived twice")
	must.NoError(t, s.Arrive(2, 5, 1, 1))
	must.ErrorContains(t, s.Arrive(2, 6, 1, 1), "arrived twice")
}

// A job's bound is its shadow start, or later while its completion (from
// arrival, at its expected run time) stays within the shadow's tail.
func TestShadowBoundAndTail(t *testing.T) {
	s, err := NewShadow(1, 1)
	must.NoError(t, err)
	must.Eq(t, 0.0, s.TailJCT(0.99))
	must.NoError(t, s.Arrive(0, 0, 1, 100)) // 0-100, JCT 100
	must.NoError(t, s.Arrive(1, 10, 1, 10)) // 100-110, JCT 100
	must.NoError(t, s.Arrive(2, 20, 1, 5))  // 110-115, JCT 95
	s.Advance(200)
	must.Eq(t, 100.0, s.TailJCT(0.99))
	must.Eq(t, 95.0, s.TailJCT(0.2))
	b, ok := s.Bound(2, 0.99)
	must.True(t, ok)
	must.Eq(t, 115.0, b) // 20 + 100 - 5: later than its start at 110
	b, ok = s.Bound(0, 0.99)
	must.True(t, ok)
	must.Eq(t, 0.0, b) // its completion is the tail: its start
	must.NoError(t, s.Arrive(3, 200, 1, 1000))
	_, ok = s.Bound(4, 0.99)
	must.False(t, ok)
}
