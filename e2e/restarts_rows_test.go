package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/fixtures"
	"github.com/gpushare/gpushare/internal/devcluster"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// TestRestartRows measures the rows of docs/lifecycle.md's table that
// TestRestarts does not (issue 45, part 5), the same way: each operation
// on a running job under Nomad alone (ungated, no scheduler) and then
// under gpushare, naming the allocations that must stay running — the
// same ID, its task never restarted — and counting restarts, the
// allocations created beyond those the operation needs. Its cluster:
//   - pcie-1, pcie-2 (meta.rack r1) and pcie-3 (r2): 4-GPU PCIe clients in
//     dc1 with one device group per GPU (device_groups = "gpu": node pins);
//   - pcie-4 (r2): the same, without raw_exec (the jobs' driver): the
//     mixed cluster, every evaluation filters it for missing drivers;
//   - pcie-5: a 4-GPU client in dc2 with device_groups = "model", where
//     several whole GPUs of a group on one node are staged.
//
// The operations (rowOps, and restarts_rows_more_test.go):
//   - distinct_property on ${meta.rack}, a group of 2: registered again,
//     scaled 2 -> 1 -> 2, its r1 node drained;
//   - job-level distinct_hosts, groups g and h: registered again, g scaled
//     1 -> 2 (onto the third node);
//   - a group of 3 with no rule: registered again, one node drained;
//   - a batch group of 3 one allocation of which fails (rescheduled once
//     by its policy, then failed for good), then the same file registered
//     again while the two others run; and one whose allocation of index 0
//     completed, registered again while the two others run;
//   - a rolling update (max_parallel = 1) on a node with room for the
//     group alone, while another group waits for that room;
//   - a pin that waits only for its shares: scaled within its room while
//     ungated jobs hold every GPU, on the mixed cluster;
//   - two whole GPUs of a group on one node (staged on pcie-5 under
//     gpushare; Nomad alone on a per-GPU node): registered again, scaled
//     2 -> 1 -> 2.
func TestRestartRows(t *testing.T) {
	start := time.Now()
	e := newRowsEnv(t)
	t.Logf("cluster ready in %s", time.Since(start).Round(time.Second))
	var rows []restartRow
	if !t.Run("nomad alone", func(t *testing.T) {
		rows = append(rows, e.in(t).rowOps("nomad alone", "n-", nil)...)
	}) {
		return // its jobs may still hold GPUs the rest needs
	}
	s := e.startScheduler("s1", "")
	t.Run("gpushare", func(t *testing.T) {
		rows = append(rows, e.in(t).rowOps("gpushare", "g-", s)...)
	})
	for _, r := range rows {
		t.Logf("RESULT %s | %s | restarts %d | kept %v | %s", r.who, r.op, r.restarts, r.kept, r.note)
	}
	t.Logf("took %s", time.Since(start).Round(time.Second))
}

// newRowsEnv starts TestRestartRows' cluster of five clients.
func newRowsEnv(t *testing.T) *env {
	t.Helper()
	src, err := fixtures.FS.ReadFile(fixtures.PCIe4GPU)
	must.NoError(t, err)
	fx := t.TempDir()
	paths := map[string]string{}
	var clients []devcluster.Client
	for i, c := range []struct {
		rack, dc, groups string
		deny             []string
	}{
		{"r1", "dc1", devicefn.DeviceGroupsGPU, nil},
		{"r1", "dc1", devicefn.DeviceGroupsGPU, nil},
		{"r2", "dc1", devicefn.DeviceGroupsGPU, nil},
		{"r2", "dc1", devicefn.DeviceGroupsGPU, []string{"raw_exec"}},
		{"r3", "dc2", devicefn.DeviceGroupsModel, nil},
	} {
		name := fmt.Sprintf("pcie-%d", i+1)
		b := fixtureUUID.ReplaceAllString(string(src), fmt.Sprintf("GPU-${1}${2}0000%02d-", 90+i))
		p := filepath.Join(fx, name+".hcl")
		must.NoError(t, os.WriteFile(p, []byte(b), 0o644))
		paths[name] = p
		clients = append(clients, devcluster.Client{Name: name, Fixture: p, Datacenter: c.dc,
			PluginConfig: fmt.Sprintf("device_groups = %q", c.groups), Meta: map[string]string{"rack": c.rack}, DenyDrivers: c.deny})
	}
	e := envOn(t, startClusterWith(t, devcluster.Options{Clients: clients}), paths, "gpushare-rows-")
	e.eventually(liveness, "every client ready with its gpushare groups", func() bool {
		stubs, _, err := e.nomad.Nodes().List(nil)
		if err != nil || len(stubs) != len(paths) {
			return false
		}
		for _, st := range stubs {
			n, _, err := e.nomad.Nodes().Info(st.ID, nil)
			if err != nil || n.Status != api.NodeStatusReady || n.NodeResources == nil {
				return false
			}
			groups := 0
			for _, d := range n.NodeResources.Devices {
				if d.Type == devicefn.DeviceType {
					groups++
				}
			}
			if want := map[bool]int{true: 1, false: 4}[n.Datacenter == "dc2"]; groups != want {
				return false
			}
		}
		return true
	})
	return e
}

// rowOps runs TestRestartRows' operations on jobs prefixed with prefix,
// ungated when s is nil. Each must keep what it names and restart nothing
// beyond what it needs.
func (e *env) rowOps(who, prefix string, s *scheduler) []restartRow {
	t := e.t.(*testing.T)
	var rows []restartRow
	add := func(op string, restarts int, kept bool, note string) {
		rows = append(rows, restartRow{who: who, op: op, restarts: restarts, kept: kept, note: note})
		t.Logf("%s: %s: restarts %d, kept %v; %s", who, op, restarts, kept, note)
		must.True(t, kept, must.Sprintf("%s: %s: an allocation that must stay was restarted", who, op))
		must.Eq(t, 0, restarts, must.Sprintf("%s: %s restarted allocations", who, op))
	}
	// measure records an operation whose restarts under gpushare are a
	// known defect (reported, not yet fixed): it must keep what it names,
	// and Nomad alone must restart nothing
	measure := func(op string, restarts int, kept bool, note string) {
		if s == nil {
			add(op, restarts, kept, note)
			return
		}
		rows = append(rows, restartRow{who: who, op: op, restarts: restarts, kept: kept, note: note})
		t.Logf("%s: %s: restarts %d (measured, not asserted; Nomad alone 0), kept %v; %s", who, op, restarts, kept, note)
		must.True(t, kept, must.Sprintf("%s: %s: an allocation that must stay was restarted", who, op))
	}
	gated := s != nil
	step := func(name string, f func()) {
		at := time.Now()
		f()
		t.Logf("%s: %s took %s", who, name, time.Since(at).Round(time.Second))
	}
	step("distinct_property", func() { e.rowDistinctProperty(prefix, gated, add) })
	step("job distinct_hosts", func() { e.rowJobDistinctHosts(prefix, gated, add) })
	step("no rule", func() { e.rowNoRule(prefix, gated, add) })
	step("failed batch", func() { e.rowFailedBatch(prefix, s, add, measure) })
	step("completed batch registered again", func() { e.rowCompletedBatchAgain(prefix, s, add) })
	step("new version waiting", func() { e.rowNewVersionWaits(prefix, gated, add) })
	step("mixed cluster", func() { e.rowMixedCluster(prefix, s, add) })
	step("staging", func() { e.rowStaged(prefix, s, add) })
	return rows
}

// rowJob is testdata/shares.nomad.hcl as id, count allocations of shares
// each in dc1, edited, ungated unless gated.
func (e *env) rowJob(id string, shares, count int, gated bool, edit func(j *api.Job)) *api.Job {
	j := e.parse(id, map[string]any{"shares": shares, "count": count})
	j.Datacenters = []string{"dc1"}
	if edit != nil {
		edit(j)
	}
	if !gated {
		ungate(j)
	}
	return j
}

// keptAll reports whether every allocation of allocs still runs, never
// restarted.
func (e *env) keptAll(allocs []*api.Allocation) bool {
	for _, a := range allocs {
		if !e.keptRunning(a.ID) {
			return false
		}
	}
	return len(allocs) > 0
}

// registeredAgain registers j again unchanged and counts what it created.
func (e *env) registeredAgain(j *api.Job, running []*api.Allocation, add func(string, int, bool, string), op string) {
	id := *j.ID
	seen, v := e.allocIDs(id), e.version(id)
	e.registerJob(j)
	e.settled(id, len(running))
	add(op, e.createdSince(id, seen), e.keptAll(running), fmt.Sprintf("job version %d -> %d", v, e.version(id)))
}

// drainOne drains node, waits until job id runs n allocations again none
// of which is on it, and makes it eligible again.
func (e *env) drainOne(id string, n int, node *api.Allocation) {
	_, err := e.nomad.Nodes().UpdateDrainOpts(node.NodeID, &api.DrainOptions{DrainSpec: &api.DrainSpec{Deadline: time.Minute}}, nil)
	must.NoError(e.t, err)
	e.eventually(liveness, id+" to run again off the drained node", func() bool {
		now := e.runningNow(id)
		return len(now) == n && !slices.ContainsFunc(now, func(a *api.Allocation) bool { return a.NodeID == node.NodeID })
	})
	e.settled(id, n)
	_, err = e.nomad.Nodes().UpdateDrainOpts(node.NodeID, &api.DrainOptions{DrainSpec: nil, MarkEligible: true}, nil)
	must.NoError(e.t, err)
}

// rowDistinctProperty: a group of 2 with distinct_property on
// ${meta.rack} (r1: pcie-1 and pcie-2; r2: pcie-3, pcie-4 lacking the
// driver): one allocation per rack. Registered again, both stay; scaled
// 2 -> 1 -> 2, the one left stays and the new one goes to the other rack;
// the r1 node drained, its allocation goes to the other r1 node and the
// r2 one stays.
func (e *env) rowDistinctProperty(prefix string, gated bool, add func(string, int, bool, string)) {
	t := e.t.(*testing.T)
	id := prefix + "racks"
	j := e.rowJob(id, 25, 2, gated, func(j *api.Job) {
		j.TaskGroups[0].Constraints = append(j.TaskGroups[0].Constraints, &api.Constraint{Operand: "distinct_property", LTarget: "${meta.rack}"})
	})
	e.registerJob(j)
	pair := e.settled(id, 2)
	racks := func(allocs []*api.Allocation) []string {
		var out []string
		for _, a := range allocs {
			n, _, err := e.nomad.Nodes().Info(a.NodeID, nil)
			must.NoError(t, err)
			out = append(out, n.Meta["rack"])
		}
		slices.Sort(out)
		return out
	}
	must.Eq(t, []string{"r1", "r2"}, racks(pair))
	e.registeredAgain(j, pair, add, "distinct_property (rack), count 2: the same jobspec registered again")

	seen := e.allocIDs(id)
	e.scale(id, 1)
	left := e.settled(id, 1)
	e.scale(id, 2)
	two := e.settled(id, 2)
	must.Eq(t, []string{"r1", "r2"}, racks(two))
	add("distinct_property (rack): scale 2 -> 1 -> 2", e.createdSince(id, seen)-1, e.keptRunning(left[0].ID),
		fmt.Sprintf("%s kept on %s; 2 run on %s", left[0].ID[:8], left[0].NodeName, strings.Join(nodesOf(two), ",")))

	var r1, r2 *api.Allocation
	for _, a := range two {
		if a.NodeName == "pcie-3" {
			r2 = a
		} else {
			r1 = a
		}
	}
	must.NotNil(t, r1)
	must.NotNil(t, r2)
	seen = e.allocIDs(id)
	e.drainOne(id, 2, r1)
	now := e.runningNow(id)
	must.Eq(t, []string{"r1", "r2"}, racks(now))
	add("distinct_property (rack), count 2: its r1 node drained", e.createdSince(id, seen)-1, e.keptRunning(r2.ID),
		fmt.Sprintf("%s drained; %s kept on %s; 2 run on %s", r1.NodeName, r2.ID[:8], r2.NodeName, strings.Join(nodesOf(now), ",")))
	e.stopJobs(id)
}

// rowJobDistinctHosts: a job of two groups, g and h, of one allocation
// each, with distinct_hosts at job level. Registered again, both stay; g
// scaled 1 -> 2, both stay and g's new one runs on the third node.
func (e *env) rowJobDistinctHosts(prefix string, gated bool, add func(string, int, bool, string)) {
	t := e.t.(*testing.T)
	id := prefix + "apart"
	j := e.rowJob(id, 25, 1, gated, func(j *api.Job) {
		h := *j.TaskGroups[0]
		h.Name = ptr("h")
		h.Constraints = slices.Clone(h.Constraints)
		j.TaskGroups = append(j.TaskGroups, &h)
		j.Constraints = append(j.Constraints, &api.Constraint{Operand: "distinct_hosts", RTarget: "true"})
	})
	e.registerJob(j)
	pair := e.settled(id, 2)
	must.SliceLen(t, 2, slices.Compact(nodesOf(pair)))
	e.registeredAgain(j, pair, add, "job-level distinct_hosts, groups g and h: the same jobspec registered again")

	seen := e.allocIDs(id)
	e.scale(id, 2)
	three := e.settled(id, 3)
	must.SliceLen(t, 3, slices.Compact(nodesOf(three)), must.Sprint("two allocations of the job on one node"))
	add("job-level distinct_hosts: g scaled 1 -> 2", e.createdSince(id, seen)-1, e.keptAll(pair),
		"3 run on "+strings.Join(nodesOf(three), ","))
	e.stopJobs(id)
}

// rowNoRule: a group of 3 with no rule. Registered again, all stay; the
// node of one drained, every allocation on another node stays.
func (e *env) rowNoRule(prefix string, gated bool, add func(string, int, bool, string)) {
	id := prefix + "plain"
	j := e.rowJob(id, 25, 3, gated, nil)
	e.registerJob(j)
	three := e.settled(id, 3)
	e.registeredAgain(j, three, add, "count 3, no rule: the same jobspec registered again")

	drained := three[0]
	var others []*api.Allocation
	for _, a := range three {
		if a.NodeID != drained.NodeID {
			others = append(others, a)
		}
	}
	seen := e.allocIDs(id)
	e.drainOne(id, 3, drained)
	now := e.runningNow(id)
	add("count 3, no rule: one of its nodes drained", e.createdSince(id, seen)-(3-len(others)), len(others) == 0 || e.keptAll(others),
		fmt.Sprintf("3 ran on %s; %s drained; %d kept; 3 run on %s", strings.Join(nodesOf(three), ","), drained.NodeName, len(others), strings.Join(nodesOf(now), ",")))
	e.stopJobs(id)
}
