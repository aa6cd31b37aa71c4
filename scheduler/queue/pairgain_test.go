package queue

import (
	"math"
	"testing"

	"github.com/shoenig/test/must"
)

func TestPairGain(t *testing.T) {
	// r has 90 s left, j needs 50 s, 0.6 each together: j ends at 83.3 s,
	// r at 83.3 + 40 = 123.3 s; summed 206.7 s.
	// Waiting for r (SJF-BSBF): 90 + 140 = 230 s.
	must.InDelta(t, 230-(2*50/0.6+40), PairGain(90, 50, 0.6, 0.6, math.Inf(1)), 1e-9)
	// If another GPU frees in 10 s, waiting costs 90 + 10 + 50 = 150 s:
	// pairing loses.
	must.InDelta(t, 150-(2*50/0.6+40), PairGain(90, 50, 0.6, 0.6, 10), 1e-9)
	// j longer than r: r ends at 10/0.5 = 20 s, j has 60 - 20*0.9 = 42 s
	// left: 62 s; summed 20 + 62 = 82 s against waiting 10 + 10 + 60 = 80 s.
	must.InDelta(t, -2.0, PairGain(10, 60, 0.5, 0.9, math.Inf(1)), 1e-9)
	// A pair that makes no progress never wins.
	must.Less(t, 0.0, PairGain(10, 60, 0, 0.9, math.Inf(1)))
}
