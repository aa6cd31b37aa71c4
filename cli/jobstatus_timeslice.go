package cli

import (
	"fmt"
	"time"

	"github.com/gpushare/gpushare/scheduler/service"
)

// printTimeslice says, for each allocation of a time-sliced group, its
// quantum, the time its launches waited for their turn and its turns (what
// its device plugin last reported; issue 46 part 2).
func printTimeslice(io IO, ts []service.AllocTimeslice) {
	for _, t := range ts {
		fmt.Fprintf(io.Out, "    time-sliced: allocation %s runs %s per turn; suspended %s in all (its memory kept), %d turn(s)\n",
			shortID(t.Alloc), seconds(t.QuantumSeconds), seconds(t.SuspendedSeconds), t.Turns)
	}
}

func seconds(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(time.Millisecond).String()
}
