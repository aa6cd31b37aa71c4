package feasible

import (
	"testing"

	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// Select keeps the nodes a group's rules allow and narrows the gpushare
// device groups to those its block matches. The core's models are one list
// for every node, so a node where a group of a matching name does not
// match (its memory differs) is left out, counted as missing devices; a
// block that matches every group narrows nothing.
func TestSelect(t *testing.T) {
	node := func(id string, groups map[string]int64) *api.Node {
		n := gpuNode()
		n.ID = id
		n.NodeResources.Devices = nil
		for name, mib := range groups {
			n.NodeResources.Devices = append(n.NodeResources.Devices, &api.NodeDeviceResource{Vendor: "nvidia", Type: "gpushare", Name: name,
				Instances:  []*api.NodeDevice{{ID: name + ":0", Healthy: true}},
				Attributes: map[string]*api.Attribute{"memory": {IntVal: ptr(mib), Unit: "MiB"}}})
		}
		return n
	}
	nodes := []*api.Node{
		node("n1", map[string]int64{"A": 40960}),
		node("n2", map[string]int64{"A": 16384, "B": 81920}), // A too small here
		node("n3", map[string]int64{"C": 8192}),              // nothing big enough
		nil,
	}
	selectFor := func(cons ...*api.Constraint) Selection {
		rules, err := Compile(gpuJob(func(_ *api.Job, _ *api.TaskGroup, task *api.Task) {
			task.Resources.Devices[0].Constraints = cons
		}), "g", gateSkip)
		must.NoError(t, err)
		return rules.With(nil).Select(nodes)
	}

	sel := selectFor(&api.Constraint{LTarget: "${device.attr.memory}", Operand: ">=", RTarget: "32 GiB"})
	must.Eq(t, []string{"n1"}, sel.Allowed)
	must.Eq(t, []string{"A", "B"}, sel.Models)
	must.Eq(t, 2, sel.Tally.Count(FilterDevices)) // n2 left out, n3 fails
	must.Eq(t, []string{"A"}, sel.Narrow([]string{"A"}))
	must.Eq(t, []string{"A", "B"}, sel.Narrow(nil))
	must.Eq(t, []string{""}, sel.Narrow([]string{"C"})) // no model, never every one

	sel = selectFor()
	must.Eq(t, []string{"n1", "n2", "n3"}, sel.Allowed)
	must.Nil(t, sel.Models)
	must.Eq(t, []string{"C"}, sel.Narrow([]string{"C"}))
}
