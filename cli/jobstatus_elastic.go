package cli

import (
	"fmt"
	"time"

	"github.com/gpushare/gpushare/internal/usertext"
	"github.com/gpushare/gpushare/scheduler/service"
)

// printElastic says what the scheduler says of a group that opted in to
// elastic resizing (gpushare.elastic): whether it resizes the group, its
// counts, its last resize and why, and why it does or does not now.
func printElastic(io IO, e *service.ElasticStatus) {
	if e == nil {
		return
	}
	if !e.Managed {
		fmt.Fprintf(io.Out, "    elastic: not resized by gpushare: %s\n", usertext.Reason(e.Why))
		return
	}
	fmt.Fprintf(io.Out, "    elastic: count %d (registered %d; scaling min %d, max %d)\n", e.Count, e.Registered, e.Min, e.Max)
	if l := e.Last; l != nil {
		fmt.Fprintf(io.Out, "      last %s at %s: %s\n", l.Direction, l.At.UTC().Format(time.RFC3339), usertext.Reason(l.Reason))
	}
	if e.Why != "" && (e.Last == nil || e.Why != e.Last.Reason) {
		fmt.Fprintf(io.Out, "      now: %s\n", usertext.Reason(e.Why))
	}
}
