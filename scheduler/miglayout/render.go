package miglayout

import (
	"fmt"
	"strings"
)

// Summary is the recommendation in a line: "MIG layout for <model>: now
// <current>, recommended <layout>: saves N shares of expected
// fragmentation (X → Y)", or why the layout stays.
func (r Recommendation) Summary() string {
	now := Format(r.Current)
	if r.Current == nil {
		parts := make([]string, len(r.CurrentByGPU))
		for i, g := range r.CurrentByGPU {
			parts[i] = fmt.Sprintf("GPU%d %s", g.Index, Format(g.Layout))
		}
		now = strings.Join(parts, ", ")
	}
	head := fmt.Sprintf("MIG layout for %s: now %s", r.Model, now)
	switch {
	case r.Change:
		return fmt.Sprintf("%s, recommended %s: saves %s shares of expected fragmentation (%s → %s)",
			head, Format(r.Recommended), num(r.Saving.Shares), num(r.Fragmentation.Current.Shares), num(r.Fragmentation.Recommended.Shares))
	case r.Recommended == nil:
		return head + ", no recommendation: " + r.Note
	}
	return fmt.Sprintf("%s, kept (expected fragmentation %s shares): %s", head, num(r.Fragmentation.Current.Shares), r.Note)
}

// Apply says what an operator does to apply a recommended layout on the
// node; "" when nothing changes.
func (r Recommendation) Apply() string {
	if !r.Change {
		return ""
	}
	how := "put it in the plugin's configuration on " + r.Node + " (" + r.Config + ") and restart the Nomad client"
	if r.Busy == 0 {
		return how + "; its GPUs are idle: the plugin applies it at its next fingerprint (logs \"MIG layout applied\")"
	}
	return fmt.Sprintf("%s; %d of %d GPUs are in use: drain the node (nomad node drain -enable -deadline 1h %s) or wait for their jobs to end, "+
		"the plugin applies the layout at the next fingerprint once a GPU is idle (logs \"MIG layout applied\"), then nomad node drain -disable %s",
		how, r.Busy, r.GPUs, r.NodeID, r.NodeID)
}

// String writes the size as counted: "6 x 14 shares", "1 x 3g.20gb".
func (z Size) String() string {
	size := fmt.Sprintf("%d shares", z.Shares)
	if z.Profile != "" {
		size = z.Profile
	}
	return fmt.Sprintf("%g x %s", z.Weight, size)
}

// DemandString writes the demand counted for the model, "" for none.
func (r Recommendation) DemandString() string {
	parts := make([]string, len(r.Demand))
	for i, d := range r.Demand {
		parts[i] = d.String()
	}
	return strings.Join(parts, ", ")
}

// num writes a figure with at most one decimal.
func num(x float64) string {
	s := fmt.Sprintf("%.1f", x)
	return strings.TrimSuffix(s, ".0")
}
