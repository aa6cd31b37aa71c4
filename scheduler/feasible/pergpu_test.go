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

// On a node whose plugin offers each GPU as a group of its own
// ("<model> GPU <index>"), a device block matches as Nomad's would once
// pinned: any gpushare device, or the model by its attribute; the model in
// the device name or a ${device.model} equality, which the pin writes as
// the regexp that matches the model's per-GPU groups too
// (pin.ModelConstraint). The groups it may use are named by model,
// matching when every GPU of the model matches.
func TestPerGPUGroupsMatchAsNomadWould(t *testing.T) {
	const model = "Tesla V100-SXM2-16GB"
	st, err := fixture.ParseShipped(fixtures.DGX1V100)
	must.NoError(t, err)
	g := devicefn.Groups(&st.Inventory, 100, devicefn.SharingMPS, nil)[0]
	n := gpuNode()
	n.NodeResources.Devices = nomadattr.GPUDevices(&g)
	for _, c := range []struct {
		name, device string
		cons         []*api.Constraint
		want         string
		match, other []string
	}{
		{"any model", "nvidia/gpushare", nil, "", []string{model}, nil},
		{"the model attribute", "nvidia/gpushare", []*api.Constraint{{LTarget: "${device.attr.model}", RTarget: model}}, "", []string{model}, nil},
		{"the model in the device name", "nvidia/gpushare/" + model, nil, "", []string{model}, nil},
		{"device.model equal to the model", "nvidia/gpushare", []*api.Constraint{{LTarget: "${device.model}", RTarget: model}}, "", []string{model}, nil},
		{"device.model is the group's name for other operators", "nvidia/gpushare", []*api.Constraint{{LTarget: "${device.model}", Operand: "set_contains_any", RTarget: model}}, FilterDevices, nil, []string{model}},
		{"another model in the device name", "nvidia/gpushare/Tesla P100-PCIE-16GB", nil, FilterDevices, nil, []string{model}},
		{"one GPU's group by name", "nvidia/gpushare/" + model + " GPU 3", nil, "", nil, []string{model}},
		{"some GPUs by index", "nvidia/gpushare", []*api.Constraint{{LTarget: "${device.attr.index}", Operand: "<", RTarget: "4"}}, "", nil, []string{model}},
	} {
		t.Run(c.name, func(t *testing.T) {
			j := gpuJob(func(_ *api.Job, _ *api.TaskGroup, task *api.Task) {
				task.Resources.Devices[0].Name = c.device
				task.Resources.Devices[0].Constraints = c.cons
			})
			must.Eq(t, c.want, reason(t, j, n, nil))
			rules, err := Compile(j, "g", gateSkip)
			must.NoError(t, err)
			match, other := rules.With(nil).GPUShareGroups(n)
			must.Eq(t, c.match, match)
			must.Eq(t, c.other, other)
		})
	}
}

// A node where only some GPUs of a model offered per GPU match is not
// selected: the placement core places on whole models.
func TestSelectLeavesOutPartlyMatchingPerGPUNodes(t *testing.T) {
	st, err := fixture.ParseShipped(fixtures.PCIe4GPU)
	must.NoError(t, err)
	g := devicefn.Groups(&st.Inventory, 100, devicefn.SharingMPS, nil)[0]
	n := gpuNode()
	n.NodeResources.Devices = nomadattr.GPUDevices(&g)
	rules, err := Compile(gpuJob(func(_ *api.Job, _ *api.TaskGroup, task *api.Task) {
		task.Resources.Devices[0].Constraints = []*api.Constraint{{LTarget: "${device.attr.index}", RTarget: "2"}}
	}), "g", gateSkip)
	must.NoError(t, err)
	sel := rules.With(nil).Select([]*api.Node{n})
	must.SliceEmpty(t, sel.Allowed)
	must.Eq(t, 1, sel.Tally.Count(FilterDevices))

	rules, err = Compile(gpuJob(nil), "g", gateSkip)
	must.NoError(t, err)
	sel = rules.With(nil).Select([]*api.Node{n})
	must.Eq(t, []string{n.ID}, sel.Allowed)
	must.Nil(t, sel.Models)
}
