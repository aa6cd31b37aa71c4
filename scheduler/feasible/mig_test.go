package feasible

import (
	"testing"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/devicefn/fixture"
	"github.com/gpushare/gpushare/fixtures"
	"github.com/gpushare/gpushare/scheduler/nomadattr"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// Shared MIG instances are gpushare device groups named "<model> MIG
// <profile>": a request for nvidia/gpushare (any model) or naming that
// group matches them, one naming the parent model does not, and their
// attributes answer device constraints, as with Nomad's own DeviceChecker.
func TestSharedMIGGroupsMatchAsNomadWould(t *testing.T) {
	st, err := fixture.ParseShipped(fixtures.A100MIG)
	must.NoError(t, err)
	n := gpuNode()
	n.NodeResources.Devices = nil
	for _, g := range devicefn.SharedMIGGroups(&st.Inventory, 100, devicefn.SharingMPS, nil) {
		d := nomadattr.Device(&g)
		n.NodeResources.Devices = append(n.NodeResources.Devices, d)
	}
	for _, c := range []struct {
		name, device string
		cons         []*api.Constraint
		want         string
	}{
		{"any model", "nvidia/gpushare", nil, ""},
		{"the group's name", "nvidia/gpushare/NVIDIA A100-SXM4-40GB MIG 3g.20gb", nil, ""},
		{"the parent's model is another device", "nvidia/gpushare/NVIDIA A100-SXM4-40GB", nil, FilterDevices},
		{"device.model", "nvidia/gpushare", []*api.Constraint{{LTarget: "${device.model}", RTarget: "NVIDIA A100-SXM4-40GB MIG 1g.5gb"}}, ""},
		{"profile attribute", "nvidia/gpushare", []*api.Constraint{{LTarget: "${device.attr.mig_profile}", RTarget: "7g.40gb"}}, ""},
		{"slices attribute", "nvidia/gpushare", []*api.Constraint{{LTarget: "${device.attr.mig_slices}", Operand: ">=", RTarget: "4"}}, ""},
		{"no such profile", "nvidia/gpushare", []*api.Constraint{{LTarget: "${device.attr.mig_profile}", RTarget: "4g.20gb"}}, FilterDevices},
		{"no such model", "nvidia/gpushare/NVIDIA A100-SXM4-40GB MIG 4g.20gb", nil, FilterDevices},
	} {
		t.Run(c.name, func(t *testing.T) {
			j := gpuJob(func(_ *api.Job, _ *api.TaskGroup, task *api.Task) {
				task.Resources.Devices[0].Name = c.device
				task.Resources.Devices[0].Constraints = c.cons
			})
			must.Eq(t, c.want, reason(t, j, n, nil))
		})
	}
}
