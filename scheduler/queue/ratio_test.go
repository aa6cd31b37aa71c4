package queue

import (
	"testing"
	"time"

	"github.com/shoenig/test/must"
)

func TestResponseRatio(t *testing.T) {
	must.EqOp(t, 2.0, ResponseRatio(400*time.Second, 400*time.Second))
	must.EqOp(t, 1.0, ResponseRatio(0, time.Hour))
	must.EqOp(t, 1.0, ResponseRatio(-time.Minute, time.Hour)) // clock skew: no wait
	must.EqOp(t, 1.5, ResponseRatio(500*time.Millisecond, 100*time.Millisecond))
	// a job that has just arrived does not overtake one that has waited as
	// long as it will run
	must.Greater(t, ResponseRatio(0, 10*time.Second), ResponseRatio(400*time.Second, 400*time.Second))
	must.EqOp(t, 90*time.Minute, Seconds(5400))
}
