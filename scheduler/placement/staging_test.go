package placement

import (
	"testing"

	"github.com/shoenig/test/must"
)

// On a staged node the hold that keeps an allocation's GPUs while Nomad
// places the one before runs beside it: an allocation there counts at
// least what a hold takes (Request.HoldRes). Two allocations of 10 MHz
// fit a node with 35 MHz free, but the first and the hold of the second
// (20 MHz) do not, so they are not staged there (Nomad would not place
// the hold); without HoldRes they are.
func TestAStagedAllocationCountsWhatItsHoldTakes(t *testing.T) {
	for _, name := range PolicyNames() {
		t.Run(name, func(t *testing.T) {
			r := Request{ID: "r", Count: 2, Shares: 100, Res: Resources{CPU: 10, MemoryMiB: 8}}
			s := cluster(t, NodeSpec{ID: "a", GPUs: 8, CPU: 35, MemoryMiB: 1024})
			s.SetStaging(func(string) bool { return true })
			d := place(t, s, policy(t, name, Options{}), r)
			must.SliceLen(t, 2, d.Placements, must.Sprint("without a hold's resources: staged"))

			s = cluster(t, NodeSpec{ID: "a", GPUs: 8, CPU: 35, MemoryMiB: 1024})
			s.SetStaging(func(string) bool { return true })
			r.HoldRes = Resources{CPU: 20, MemoryMiB: 16}
			must.False(t, policy(t, name, Options{}).Decide(s, r).Placed(), must.Sprint("10 MHz and a 20 MHz hold beside it, twice: 40 > 35"))

			s = cluster(t, NodeSpec{ID: "a", GPUs: 8, CPU: 45, MemoryMiB: 1024})
			s.SetStaging(func(string) bool { return true })
			d = place(t, s, policy(t, name, Options{}), r)
			must.SliceLen(t, 2, d.Placements)
			n, _ := s.Node("a")
			must.Eq(t, 5, n.Free().CPU, must.Sprint("each counted at its hold's 20 MHz"))
		})
	}
}

// A request the service cannot stage on a node (Request.Unstaged: its
// namespace refuses the holds' driver, Nomad did not place its hold
// there) keeps one whole-GPU allocation per node there, and the rule's
// reason says why and what to do.
func TestAnUnstagedRequestKeepsOnePerNode(t *testing.T) {
	for _, name := range PolicyNames() {
		t.Run(name, func(t *testing.T) {
			s := cluster(t, NodeSpec{ID: "a", GPUs: 8}, NodeSpec{ID: "b", GPUs: 8})
			s.SetStaging(func(string) bool { return true })
			r := Request{ID: "r", Count: 3, Shares: 100, Unstaged: &Unstaged{Nodes: map[string]bool{"a": true}, Why: "its namespace refuses raw_exec", Fix: "allow it"}}
			d := place(t, s, policy(t, name, Options{}), r)
			on := map[string]int{}
			for _, p := range d.Placements {
				on[p.Node]++
			}
			must.Eq(t, map[string]int{"a": 1, "b": 2}, on, must.Sprint("staged on b only"))

			s = cluster(t, NodeSpec{ID: "a", GPUs: 8})
			s.SetStaging(func(string) bool { return true })
			r = Request{ID: "r", Count: 2, Shares: 100, Unstaged: &Unstaged{Why: "its namespace refuses raw_exec", Fix: "allow it"}}
			must.False(t, policy(t, name, Options{}).Decide(s, r).Placed())
			why := OnePerNode(s, r)
			must.StrContains(t, why, "(its namespace refuses raw_exec;")
			must.StrContains(t, why, "or allow it, split it")
		})
	}
}
