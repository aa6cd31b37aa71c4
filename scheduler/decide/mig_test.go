package decide

import (
	"testing"
	"time"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/devicefn/fixture"
	"github.com/gpushare/gpushare/fixtures"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/shoenig/test/must"
)

// With IdleFirst a fractional group gets a GPU nobody uses: a shared MIG
// instance it fills exactly is one (isolated, and the core's best fit), so
// it is taken before an idle whole GPU of another node is broken into; a
// request that fills no instance still gets an idle whole GPU.
func TestIdleFirstTakesAnInstanceItFills(t *testing.T) {
	s := snapshot(t, fixtures.PCIe4GPU)
	st, err := fixture.ParseShipped(fixtures.A100MIG)
	must.NoError(t, err)
	mig, err := placement.NodeFromGroups("mig", "mig", placement.Resources{CPU: 64000, MemoryMiB: 512 << 10}, nil,
		devicefn.SharedMIGGroups(&st.Inventory, 100, devicefn.SharingMPS, nil))
	must.NoError(t, err)
	must.NoError(t, s.AddNode(mig))
	must.True(t, s.HasMIGInstances())

	c := cfg()
	c.IdleFirst = true
	acts := Step(policy(t), Input{Snapshot: s, Groups: []Group{group("fills-3g", 1, 42, 0, time.Hour), group("half", 1, 50, 0, time.Hour)}, Now: now}, c)
	must.SliceLen(t, 2, acts)
	byJob := map[string]placement.Placement{}
	for _, a := range acts {
		must.Eq(t, Pin, a.Kind)
		byJob[a.Group.Job] = a.Decision.Placements[0]
	}
	must.Eq(t, "mig", byJob["fills-3g"].Node)
	must.Eq(t, []string{"MIG-a2000000-0000-4000-8000-000000000001"}, byJob["fills-3g"].GPUs)
	must.Eq(t, "n1", byJob["half"].Node) // an idle whole GPU
	must.SliceLen(t, 50, byJob["half"].Shares)
}
