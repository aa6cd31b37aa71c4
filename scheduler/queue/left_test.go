package queue

import (
	"testing"
	"time"

	"github.com/shoenig/test/must"
)

func TestLeft(t *testing.T) {
	// the declared run time less the work done: the time run, net of
	// what sharing cost
	must.EqOp(t, 40*time.Minute, Left(time.Hour, 20*time.Minute, 0, 1))
	must.EqOp(t, 50*time.Minute, Left(time.Hour, 20*time.Minute, 10*time.Minute, 1))
	// at half its speed alone, what is left takes twice as long
	must.EqOp(t, 100*time.Minute, Left(time.Hour, 20*time.Minute, 10*time.Minute, 0.5))
	// a rate that is not a share of its speed alone counts as alone
	for _, rate := range []float64{0, -1, 1.5} {
		must.EqOp(t, 40*time.Minute, Left(time.Hour, 20*time.Minute, 0, rate))
	}
	// past what it declared: as much again as the work it has done, so
	// the longer it overruns, the longer it is expected to run
	must.EqOp(t, 90*time.Minute, Left(time.Hour, 90*time.Minute, 0, 1))
	must.EqOp(t, 5*time.Hour, Left(time.Hour, 6*time.Hour, time.Hour, 1))
	must.EqOp(t, 3*time.Hour, Left(time.Hour, 90*time.Minute, 0, 0.5))
	must.Positive(t, Left(time.Hour, time.Hour, 0, 1), must.Sprint("never 'any moment'"))
	// a clock that says it has not started, or lost more than it ran
	must.EqOp(t, time.Hour, Left(time.Hour, -time.Minute, 0, 1))
	must.EqOp(t, time.Hour, Left(time.Hour, time.Minute, time.Hour, 1))
}
