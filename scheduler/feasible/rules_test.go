package feasible

import (
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// gpuNode is testNode with a gpushare device group of 8 H100s and two
// healthy FPGA instances.
func gpuNode() *api.Node {
	n := testNode()
	n.Drivers = map[string]*api.DriverInfo{"docker": {Detected: true, Healthy: true}, "raw_exec": {Detected: true, Healthy: false}}
	n.HostVolumes = map[string]*api.HostVolumeInfo{"data": {Path: "/data"}, "models": {Path: "/models", ReadOnly: true},
		"dyn": {Path: "/dyn", ReadOnly: true, ID: "vol-1"}, "scratch[1]": {Path: "/s1"}}
	n.NodeResources = &api.NodeResources{Devices: []*api.NodeDeviceResource{
		{Vendor: "nvidia", Type: "gpushare", Name: "NVIDIA H100 80GB HBM3", Instances: []*api.NodeDevice{{ID: "GPU-a:0", Healthy: true}},
			Attributes: map[string]*api.Attribute{"memory": {IntVal: ptr(int64(81559)), Unit: "MiB"}, "cuda_version": {StringVal: ptr("12.4")},
				"compute_capability": {StringVal: ptr("9.0")}, "sharing": {StringVal: ptr("mps")}, "gpus": {IntVal: ptr(int64(8))}}},
		{Vendor: "xilinx", Type: "fpga", Name: "u250", Instances: []*api.NodeDevice{{ID: "f0", Healthy: true}, {ID: "f1", Healthy: true}, {ID: "f2"}}},
	}}
	return n
}

// gpuJob is a job of one group "g" with one docker task asking for 25
// gpushare shares; edit changes it.
func gpuJob(edit func(j *api.Job, tg *api.TaskGroup, task *api.Task)) *api.Job {
	task := &api.Task{Name: "t", Driver: "docker", Resources: &api.Resources{Devices: []*api.RequestedDevice{{Name: "nvidia/gpushare", Count: ptr(uint64(25))}}}}
	tg := &api.TaskGroup{Name: ptr("g"), Count: ptr(1), Tasks: []*api.Task{task}}
	j := &api.Job{ID: ptr("j"), Namespace: ptr("default"), TaskGroups: []*api.TaskGroup{tg}}
	if edit != nil {
		edit(j, tg, task)
	}
	return j
}

func reason(t *testing.T, j *api.Job, n *api.Node, allocs []Alloc) string {
	t.Helper()
	why, err := Feasible(j, "g", n, allocs, gateSkip)
	must.NoError(t, err)
	return why
}

// gateSkip skips the gpushare gate, as the service does.
func gateSkip(_ Level, c *api.Constraint) bool {
	return c.LTarget == "${meta.gpushare_gate}" && c.RTarget == "pending"
}

// TestRules checks each rule of Nomad's generic stack on one node, with
// the reason Nomad's metrics would count.
func TestRules(t *testing.T) {
	cases := []struct {
		name string
		edit func(j *api.Job, tg *api.TaskGroup, task *api.Task)
		node func(n *api.Node)
		want string
	}{
		{"plain job fits", nil, nil, ""},
		// Node.IsInAnyDC, Job.Canonicalize (no datacenters is "*")
		{"datacenter", func(j *api.Job, _ *api.TaskGroup, _ *api.Task) { j.Datacenters = []string{"dc2"} }, nil, FilterDatacenter},
		{"datacenter listed", func(j *api.Job, _ *api.TaskGroup, _ *api.Task) { j.Datacenters = []string{"dc2", "dc1"} }, nil, ""},
		{"datacenter glob", func(j *api.Job, _ *api.TaskGroup, _ *api.Task) { j.Datacenters = []string{"d*"} }, nil, ""},
		{"datacenter glob no", func(j *api.Job, _ *api.TaskGroup, _ *api.Task) { j.Datacenters = []string{"eu-*"} }, nil, FilterDatacenter},
		// readyNodesInDCsAndPool, Node.IsInPool
		{"node pool", func(j *api.Job, _ *api.TaskGroup, _ *api.Task) { j.NodePool = ptr("gpu") }, nil, FilterNodePool},
		{"node pool matches", func(j *api.Job, _ *api.TaskGroup, _ *api.Task) { j.NodePool = ptr("gpu") }, func(n *api.Node) { n.NodePool = "gpu" }, ""},
		{"node pool all", func(j *api.Job, _ *api.TaskGroup, _ *api.Task) { j.NodePool = ptr("all") }, func(n *api.Node) { n.NodePool = "gpu" }, ""},
		{"job in default pool, node in another", nil, func(n *api.Node) { n.NodePool = "gpu" }, FilterNodePool},
		{"node without pool is in default", nil, func(n *api.Node) { n.NodePool = "" }, ""},
		// ConstraintChecker at job, group and task level
		{"job constraint", func(j *api.Job, _ *api.TaskGroup, _ *api.Task) {
			j.Constraints = []*api.Constraint{{LTarget: "${attr.kernel.name}", Operand: "=", RTarget: "plan9"}}
		}, nil, "constraint ${attr.kernel.name} = plan9"},
		{"group constraint", func(_ *api.Job, tg *api.TaskGroup, _ *api.Task) {
			tg.Constraints = []*api.Constraint{{LTarget: "${meta.rack}", Operand: "!=", RTarget: "r1"}}
		}, nil, "constraint ${meta.rack} != r1"},
		{"task constraint", func(_ *api.Job, _ *api.TaskGroup, task *api.Task) {
			task.Constraints = []*api.Constraint{{LTarget: "${node.class}", Operand: "regexp", RTarget: "^cpu"}}
		}, nil, "constraint ${node.class} regexp ^cpu"},
		{"the gate is skipped", func(_ *api.Job, tg *api.TaskGroup, _ *api.Task) {
			tg.Constraints = []*api.Constraint{{LTarget: "${meta.gpushare_gate}", Operand: "=", RTarget: "pending"}}
		}, nil, ""},
		{"a user's own node set is checked", func(_ *api.Job, tg *api.TaskGroup, _ *api.Task) {
			tg.Constraints = []*api.Constraint{{LTarget: "${node.unique.id}", Operand: "set_contains_any", RTarget: "node-7,node-8"}}
		}, nil, "constraint ${node.unique.id} set_contains_any node-7,node-8"},
		// job constraints are checked before drivers (FeasibilityWrapper)
		{"job constraint before drivers", func(j *api.Job, _ *api.TaskGroup, task *api.Task) {
			j.Constraints = []*api.Constraint{{LTarget: "${attr.kernel.name}", Operand: "=", RTarget: "plan9"}}
			task.Driver = "podman"
		}, nil, "constraint ${attr.kernel.name} = plan9"},
		// DriverChecker: driver info first, then the driver.<name> attribute
		{"driver missing", func(_ *api.Job, _ *api.TaskGroup, task *api.Task) { task.Driver = "podman" }, nil, FilterDrivers},
		{"driver unhealthy", func(_ *api.Job, _ *api.TaskGroup, task *api.Task) { task.Driver = "raw_exec" }, nil, FilterDrivers},
		{"driver by attribute", func(_ *api.Job, _ *api.TaskGroup, task *api.Task) { task.Driver = "docker" },
			func(n *api.Node) { n.Drivers = nil }, ""},
		{"driver attribute false", func(_ *api.Job, _ *api.TaskGroup, task *api.Task) { task.Driver = "exec" }, nil, FilterDrivers},
		{"driver info wins over attribute", func(_ *api.Job, _ *api.TaskGroup, task *api.Task) { task.Driver = "docker" },
			func(n *api.Node) { n.Drivers["docker"] = &api.DriverInfo{Detected: true} }, FilterDrivers},
		{"drivers before group constraints", func(_ *api.Job, tg *api.TaskGroup, task *api.Task) {
			task.Driver = "podman"
			tg.Constraints = []*api.Constraint{{LTarget: "${meta.rack}", Operand: "=", RTarget: "r9"}}
		}, nil, FilterDrivers},
		// DeviceChecker: the gpushare group's constraints; other devices by count
		{"gpushare device constraint met", func(_ *api.Job, _ *api.TaskGroup, task *api.Task) {
			task.Resources.Devices[0].Constraints = []*api.Constraint{{LTarget: "${device.attr.memory}", Operand: ">=", RTarget: "79 GiB"},
				{LTarget: "${device.attr.cuda_version}", Operand: "version", RTarget: ">= 12.0"}}
		}, nil, ""},
		{"gpushare device constraint unmet", func(_ *api.Job, _ *api.TaskGroup, task *api.Task) {
			task.Resources.Devices[0].Constraints = []*api.Constraint{{LTarget: "${device.attr.memory}", Operand: ">", RTarget: "80 GiB"}}
		}, nil, FilterDevices},
		{"gpushare model in the name", func(_ *api.Job, _ *api.TaskGroup, task *api.Task) {
			task.Resources.Devices[0].Name = "nvidia/gpushare/Tesla V100-SXM2-16GB"
		}, nil, FilterDevices},
		{"gpushare ${device.ids} is the core's", func(_ *api.Job, _ *api.TaskGroup, task *api.Task) {
			task.Resources.Devices[0].Constraints = []*api.Constraint{{LTarget: "${device.ids}", Operand: "set_contains_any", RTarget: "GPU-z:0"}}
		}, nil, ""},
		{"gpushare count is the core's", func(_ *api.Job, _ *api.TaskGroup, task *api.Task) {
			task.Resources.Devices[0].Count = ptr(uint64(800))
		}, nil, ""},
		{"no gpushare device group", nil, func(n *api.Node) { n.NodeResources.Devices = n.NodeResources.Devices[1:] }, FilterDevices},
		{"other device present", func(_ *api.Job, _ *api.TaskGroup, task *api.Task) {
			task.Resources.Devices = append(task.Resources.Devices, &api.RequestedDevice{Name: "fpga", Count: ptr(uint64(2))})
		}, nil, ""},
		{"other device: only healthy instances count", func(_ *api.Job, _ *api.TaskGroup, task *api.Task) {
			task.Resources.Devices = append(task.Resources.Devices, &api.RequestedDevice{Name: "xilinx/fpga", Count: ptr(uint64(3))})
		}, nil, FilterDevices},
		{"other device: two tasks share the instances", func(_ *api.Job, tg *api.TaskGroup, task *api.Task) {
			task.Resources.Devices = append(task.Resources.Devices, &api.RequestedDevice{Name: "fpga", Count: ptr(uint64(1))})
			tg.Tasks = append(tg.Tasks, &api.Task{Name: "u", Driver: "docker", Resources: &api.Resources{Devices: []*api.RequestedDevice{{Name: "fpga", Count: ptr(uint64(2))}}}})
		}, nil, FilterDevices},
		{"other device missing", func(_ *api.Job, _ *api.TaskGroup, task *api.Task) {
			task.Resources.Devices = append(task.Resources.Devices, &api.RequestedDevice{Name: "amd/gpu"})
		}, nil, FilterDevices},
		// HostVolumeChecker
		{"host volume", func(_ *api.Job, tg *api.TaskGroup, _ *api.Task) {
			tg.Volumes = map[string]*api.VolumeRequest{"d": {Name: "d", Type: "host", Source: "data"}}
		}, nil, ""},
		{"host volume missing", func(_ *api.Job, tg *api.TaskGroup, _ *api.Task) {
			tg.Volumes = map[string]*api.VolumeRequest{"d": {Name: "d", Type: "host", Source: "cache"}}
		}, nil, FilterHostVolumes},
		{"read-only host volume mounted read-write", func(_ *api.Job, tg *api.TaskGroup, _ *api.Task) {
			tg.Volumes = map[string]*api.VolumeRequest{"m": {Name: "m", Type: "host", Source: "models"}}
		}, nil, FilterHostVolumes},
		{"read-only host volume mounted read-only", func(_ *api.Job, tg *api.TaskGroup, _ *api.Task) {
			tg.Volumes = map[string]*api.VolumeRequest{"m": {Name: "m", Type: "host", Source: "models", ReadOnly: true}}
		}, nil, ""},
		{"dynamic host volume", func(_ *api.Job, tg *api.TaskGroup, _ *api.Task) {
			tg.Volumes = map[string]*api.VolumeRequest{"v": {Name: "v", Type: "host", Source: "dyn"}}
		}, nil, ""},
		{"per_alloc host volume", func(_ *api.Job, tg *api.TaskGroup, _ *api.Task) {
			tg.Count = ptr(2)
			tg.Volumes = map[string]*api.VolumeRequest{"s": {Name: "s", Type: "host", Source: "scratch", PerAlloc: true}}
		}, nil, ""},
		{"csi volume not checked", func(_ *api.Job, tg *api.TaskGroup, _ *api.Task) {
			tg.Volumes = map[string]*api.VolumeRequest{"c": {Name: "c", Type: "csi", Source: "nowhere"}}
		}, nil, ""},
		{"distinct_hosts alone is feasible", func(j *api.Job, _ *api.TaskGroup, _ *api.Task) {
			j.Constraints = []*api.Constraint{{Operand: "distinct_hosts"}}
		}, nil, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := gpuNode()
			if tc.node != nil {
				tc.node(n)
			}
			must.Eq(t, tc.want, reason(t, gpuJob(tc.edit), n, nil))
		})
	}
}

// TestDistinctHosts mirrors DistinctHostsIterator: job level counts every
// allocation of the job, group level those of the group; "false" turns it
// off, anything unreadable keeps it on.
func TestDistinctHosts(t *testing.T) {
	other := []Alloc{{Group: "other", NodeID: "node-1"}}
	same := []Alloc{{Group: "g", NodeID: "node-1"}}
	elsewhere := []Alloc{{Group: "g", NodeID: "node-2"}}
	cases := []struct {
		name     string
		job, grp string // RTarget of a distinct_hosts at that level; "-" none
		allocs   []Alloc
		want     string
	}{
		{"job level, another group here", "", "-", other, FilterDistinctHosts},
		{"job level true", "true", "-", same, FilterDistinctHosts},
		{"job level false", "false", "-", same, ""},
		{"job level unreadable is on", "maybe", "-", same, FilterDistinctHosts},
		{"group level, another group here", "-", "", other, ""},
		{"group level, the group here", "-", "", same, FilterDistinctHosts},
		{"group level, the group elsewhere", "-", "", elsewhere, ""},
		{"none", "-", "-", same, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			j := gpuJob(func(j *api.Job, tg *api.TaskGroup, _ *api.Task) {
				if tc.job != "-" {
					j.Constraints = []*api.Constraint{{Operand: "distinct_hosts", RTarget: tc.job}}
				}
				if tc.grp != "-" {
					tg.Constraints = []*api.Constraint{{Operand: "distinct_hosts", RTarget: tc.grp}}
				}
			})
			must.Eq(t, tc.want, reason(t, j, gpuNode(), tc.allocs))
			r, err := Compile(j, "g", nil)
			must.NoError(t, err)
			must.Eq(t, tc.job != "-" && tc.job != "false" || tc.grp != "-", r.DistinctHosts())
		})
	}
}

// TestDistinctProperty mirrors propertySet: RTarget allowed allocations
// per value of the property (1 when empty), counted over the job's (job
// level) or the group's (group level) live allocations by their node's
// value; a node without the property fails.
func TestDistinctProperty(t *testing.T) {
	rack := func(id, r string) *api.Node {
		n := gpuNode()
		n.ID, n.Meta = id, map[string]string{"rack": r}
		return n
	}
	r1, r2 := rack("node-a", "r1"), rack("node-b", "r2")
	cases := []struct {
		name   string
		level  Level
		value  string
		allocs []Alloc
		node   *api.Node
		want   string
	}{
		{"free rack", LevelJob, "", []Alloc{{Group: "g", NodeID: r2.ID, Node: r2}}, rack("node-1", "r1"), ""},
		{"used rack", LevelJob, "", []Alloc{{Group: "g", NodeID: r1.ID, Node: r1}}, rack("node-1", "r1"), "distinct_property: ${meta.rack}=r1 used by 1 allocs"},
		{"two allowed", LevelJob, "2", []Alloc{{Group: "g", NodeID: r1.ID, Node: r1}}, rack("node-1", "r1"), ""},
		{"two allowed, two used", LevelJob, "2", []Alloc{{Group: "g", NodeID: r1.ID, Node: r1}, {Group: "x", NodeID: r1.ID, Node: r1}}, rack("node-1", "r1"), "distinct_property: ${meta.rack}=r1 used by 2 allocs"},
		{"group level ignores other groups", LevelGroup, "", []Alloc{{Group: "x", NodeID: r1.ID, Node: r1}}, rack("node-1", "r1"), ""},
		{"missing property", LevelJob, "", nil, testNodeWithoutMeta(), `missing property "${meta.rack}"`},
		{"unreadable count", LevelGroup, "two", nil, rack("node-1", "r1"), `failed to convert RTarget "two" to uint64: strconv.ParseUint: parsing "two": invalid syntax`},
		{"unknown node of an allocation is not counted", LevelJob, "", []Alloc{{Group: "g", NodeID: "gone"}}, rack("node-1", "r1"), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := &api.Constraint{Operand: "distinct_property", LTarget: "${meta.rack}", RTarget: tc.value}
			j := gpuJob(func(j *api.Job, tg *api.TaskGroup, _ *api.Task) {
				if tc.level == LevelJob {
					j.Constraints = []*api.Constraint{c}
				} else {
					tg.Constraints = []*api.Constraint{c}
				}
			})
			must.Eq(t, tc.want, reason(t, j, tc.node, tc.allocs))
		})
	}
}

func testNodeWithoutMeta() *api.Node {
	n := gpuNode()
	n.Meta = nil
	return n
}

// TestCacheAndTally: rules are compiled once per job version and forgotten
// when no longer asked for; the tally reads like Nomad's filter metrics.
func TestCacheAndTally(t *testing.T) {
	c := NewCache()
	j := gpuJob(nil)
	j.JobModifyIndex = ptr(uint64(7))
	r1, err := c.Rules(j, "g", nil)
	must.NoError(t, err)
	r2, _ := c.Rules(j, "g", nil)
	must.True(t, r1 == r2)
	j.JobModifyIndex = ptr(uint64(8))
	r3, _ := c.Rules(j, "g", nil)
	must.False(t, r1 == r3)
	_, err = c.Rules(j, "nope", nil)
	must.ErrorIs(t, err, ErrNoGroup)
	c.Sweep()
	must.Eq(t, 2, c.Len())
	c.Sweep() // not asked for in the last pass
	must.Eq(t, 0, c.Len())

	var tally Tally
	for _, r := range []string{FilterDatacenter, "", ReasonConstraint("${attr.kernel.name} = plan9"), FilterDatacenter} {
		tally.Add(r)
	}
	must.Eq(t, "3 nodes filtered: missing compatible datacenter (2), constraint ${attr.kernel.name} = plan9 (1)", tally.String())
	must.Eq(t, 2, tally.Count(FilterDatacenter))
	must.True(t, strings.HasPrefix((&Tally{}).String(), "no node"))
}
