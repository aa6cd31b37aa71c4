package decide

import (
	"testing"
	"time"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/shoenig/test/must"
)

// A guaranteed group whose virtual cluster's quota is in use waits, with
// a reason naming the VC, its guarantee and its use, and is placed once
// the quota frees; only one that even the VC's whole guarantee could never
// hold is refused for good. The cluster: a DGX-1 (8 V100) and a 4-GPU
// P100 server; research runs 1 V100.
func TestQuotaShortageWaits(t *testing.T) {
	const v100, p100 = "Tesla V100-SXM2-16GB", "Tesla P100-PCIE-16GB"
	for _, tc := range []struct {
		name   string
		cells  []placement.CellQuota
		shares int
		want   string // the first action: "wait" or "refuse"
		reason []string
	}{
		{name: "quota in use", cells: []placement.CellQuota{{GPUs: 1, Count: 1}}, shares: 100, want: "wait",
			reason: []string{`the guaranteed capacity of virtual cluster "research" is in use`, v100 + ": needs 1.00 GPUs, uses 1.00 GPUs of its 1.00 GPUs"}},
		{name: "quota left only where it can never fit", shares: 800, want: "wait",
			cells:  []placement.CellQuota{{Model: v100, GPUs: 8, Count: 1}, {Model: p100, GPUs: 4, Count: 2}},
			reason: []string{v100 + ": needs 8.00 GPUs, uses 1.00 GPUs of its 8.00 GPUs", "the models it has quota left of can never hold it (needs 8 GPUs of " + p100 + " on one node; the largest node has 4)"}},
		{name: "larger than the whole guarantee", cells: []placement.CellQuota{{GPUs: 1, Count: 1}}, shares: 200, want: "refuse",
			reason: []string{`larger than the guarantee of virtual cluster "research" even unused`, v100 + ": needs 2.00 GPUs, guarantees 1.00 GPUs"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := snapshot(t, "dgx1-v100.hcl", "pcie-4gpu-2socket.hcl")
			n, _ := s.Node("n1")
			var shares []string
			for k := range 100 {
				shares = append(shares, devicefn.ShareID{UUID: n.GPUs[0].UUID, Index: k}.String())
			}
			must.NoError(t, s.AddAlloc(placement.Alloc{ID: "research-1", Node: "n1", Shares: shares, VC: "research"}))
			p, err := placement.New(placement.PolicyGpushare, placement.Options{VCs: []placement.VirtualCluster{{Name: "research", Cells: tc.cells}}})
			must.NoError(t, err)
			c := cfg()
			c.VCs = []string{"research"}
			g := group("more", 1, tc.shares, time.Minute, time.Hour)
			g.Req.VC = "research"
			in := Input{Snapshot: s, Groups: []Group{g}, Now: now}

			as := Step(p, in, c)
			must.Eq(t, []string{tc.want + " more"}, kinds(as))
			for _, r := range tc.reason {
				must.StrContains(t, as[0].Reason, r)
			}
			if tc.want == "refuse" {
				return
			}
			must.Eq(t, placement.RefusedQuota, as[0].Refusal.Code)
			_, err = s.Remove("research-1") // the quota frees
			must.NoError(t, err)
			as = Step(p, in, c)
			must.Eq(t, []string{"pin more"}, kinds(as))
			if tc.shares == 800 {
				must.Eq(t, "n1", as[0].Decision.Placements[0].Node) // the only node that can hold it
			}
		})
	}
}
