package cli

import (
	"fmt"

	"github.com/gpushare/gpushare/scheduler/miglayout"
	"github.com/gpushare/gpushare/scheduler/service"
)

// renderMIGLayouts prints, per node with MIG-enabled GPUs, the layout the
// scheduler recommends from the demand it sees, and how to apply it. A
// scheduler that cannot be reached, or that does not let the token read
// nodes, shows nothing here (renderWaiting said so already).
func renderMIGLayouts(io IO, sched scheduler) {
	var body service.GPUs
	if err := sched.get("/v1/gpus", &body); err != nil || len(body.MIGLayouts) == 0 {
		return
	}
	writeMIGLayouts(io, body.MIGLayouts)
}

func writeMIGLayouts(io IO, rs []miglayout.Recommendation) {
	fmt.Fprintf(io.Out, "\nMIG layouts for the demand the scheduler sees (waiting and running fractional requests):\n")
	for _, r := range rs {
		fmt.Fprintf(io.Out, "  %s  %s\n", r.Node, r.Summary())
		if d := r.DemandString(); d != "" {
			fmt.Fprintf(io.Out, "    demand: %s\n", d)
		}
		if r.Change && r.Note != "" {
			fmt.Fprintf(io.Out, "    note: %s\n", r.Note)
		}
		if how := r.Apply(); how != "" {
			fmt.Fprintf(io.Out, "    to apply: %s\n", how)
		}
	}
}
