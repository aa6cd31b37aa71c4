package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/internal/devcluster"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// TestRestarts measures, operation by operation, the allocations a routine
// operation restarts under Nomad alone and under gpushare (issue 45, part
// 5; docs/lifecycle.md), on the real Nomad 1.11.3, plugin and scheduler:
// four 4-GPU PCIe clients in dc1 whose plugins offer each GPU as a device
// group (device_groups = "gpu"), where the scheduler pins by node alone
// (a pin Nomad checks in place). Each operation names the allocations
// that must stay running — the same ID, its task never restarted — and
// counts restarts: allocations created beyond those the operation itself
// needs.
//   - scale 1 -> 3 (25 shares): the first allocation stays;
//   - scale 3 -> 1: the one left is one of the three;
//   - drain one node of a count-2 group (distinct_hosts): the allocation on
//     the other node stays;
//   - a GPU lost (marked unhealthy in its client's fixture; its allocation
//     stopped, as its task would die with it): the other allocation stays;
//   - the operations of restartMoreOps (restarts_more_test.go): the same
//     jobspec registered again, scale within the pin's room, revert, stop
//     or purge and run again, dispatched and periodic children, batch
//     groups, and a re-pin after Nomad refused a pin (restartRefusal);
//   - a node lost (its agent killed): the other allocation stays;
//   - an upgrade from the scheduler before node pins (built from
//     upgradeFrom, the last commit before them): its share-pinned group
//     keeps running through the upgrade; its next scale moves it to a node
//     pin (as any re-pin of a share pin, it replaces what runs), and the
//     scale after that restarts nothing.
//
// Nomad alone runs first, with no scheduler and the gate left out; then
// the scheduler. With GPUSHARE_E2E_SHARE_PINS set, the same operations run
// a third time under share pins (in_place_pins = false), on a fifth
// client: the table's "before". The table is logged (RESULT lines) and
// written into docs/lifecycle.md by hand.
func TestRestarts(t *testing.T) {
	start := time.Now()
	sharePins := os.Getenv("GPUSHARE_E2E_SHARE_PINS") != ""
	dcs := []string{"dc1", "dc1", "dc1", "dc1"}
	if sharePins {
		dcs = append(dcs, "dc1")
	}
	e := newPCIeEnvWith(t, "gpushare-restarts-", 80, fmt.Sprintf("device_groups = %q", devicefn.DeviceGroupsGPU), dcs...)
	checkFingerprint(t, e, true)
	t.Logf("cluster ready in %s", time.Since(start).Round(time.Second))
	var rows []restartRow

	t.Run("nomad alone", func(t *testing.T) {
		rows = append(rows, e.in(t).restartOps("nomad alone", "n-", nil)...)
	})
	// on the test's own env: the scheduler it leaves running serves the
	// rest of the test
	s, up := e.upgradeRows()
	rows = append(rows, up...)
	if s == nil {
		s = e.startScheduler("s1", "")
	}
	t.Run("gpushare", func(t *testing.T) {
		rows = append(rows, e.in(t).restartOps("gpushare", "g-", s)...)
	})
	if sharePins {
		s.proc.Stop()
		share := e.startScheduler("s-share", "in_place_pins = false\n")
		t.Run("share pins", func(t *testing.T) {
			rows = append(rows, e.in(t).restartOps("share pins", "s-", share)...)
		})
	}
	for _, r := range rows {
		t.Logf("RESULT %s | %s | restarts %d | kept %v | %s", r.who, r.op, r.restarts, r.kept, r.note)
	}
}

// restartRow is one operation's count under one of Nomad alone, gpushare
// or gpushare's share pins.
type restartRow struct {
	who, op  string
	restarts int
	kept     bool
	note     string
}

// restartOps runs the operations on jobs prefixed with prefix: ungated
// (Nomad alone) when s is nil, gated otherwise. Under Nomad alone and
// gpushare's node pins each must keep what it names and restart nothing;
// share pins are measured only.
func (e *env) restartOps(who, prefix string, s *scheduler) []restartRow {
	t := e.t.(*testing.T)
	var rows []restartRow
	add := func(op string, restarts int, kept bool, note string) {
		rows = append(rows, restartRow{who: who, op: op, restarts: restarts, kept: kept, note: note})
		t.Logf("%s: %s: restarts %d, kept %v; %s", who, op, restarts, kept, note)
		if who != "share pins" {
			must.True(t, kept, must.Sprintf("%s: %s: an allocation that must stay was restarted", who, op))
			must.Eq(t, 0, restarts, must.Sprintf("%s: %s restarted allocations", who, op))
		}
	}
	gated := s != nil

	// scale up past the pin, and down
	id := prefix + "scale"
	e.registerRestartJob(id, 1, false, gated)
	one := e.settled(id, 1)
	seen := e.allocIDs(id)
	e.scale(id, 3)
	three := e.settled(id, 3)
	add("scale 1 -> 3 (25 shares)", e.createdSince(id, seen)-2, e.keptRunning(one[0].ID), "3 run on "+strings.Join(nodesOf(three), ","))
	if who == "gpushare" {
		// spread over nodes, as Nomad alone spreads them (it scores only a
		// sample of the nodes, so not asserted there): under a node pin
		// its limit per node keeps Nomad from stacking the new ones on the
		// pinned node before the scheduler decides them
		must.SliceLen(t, 3, slices.Compact(nodesOf(three)), must.Sprintf("%s: scale 1 -> 3 stacked replicas", who))
	}
	seen = e.allocIDs(id)
	e.scale(id, 1)
	left := e.settled(id, 1)
	stayed := slices.ContainsFunc(three, func(a *api.Allocation) bool { return a.ID == left[0].ID }) && e.keptRunning(left[0].ID)
	add("scale 3 -> 1", e.createdSince(id, seen), stayed, "1 runs on "+left[0].NodeName)
	seen = e.allocIDs(id)
	e.scale(id, 3)
	three = e.settled(id, 3)
	add("scale 1 -> 3 again, within the pin's room", e.createdSince(id, seen)-2, e.keptRunning(left[0].ID), "3 run on "+strings.Join(nodesOf(three), ","))
	e.stopJobs(id)

	// drain one node of a group of two
	id = prefix + "drain"
	e.registerRestartJob(id, 2, true, gated)
	pair := e.settled(id, 2)
	seen = e.allocIDs(id)
	drained, keep := pair[0], pair[1]
	_, err := e.nomad.Nodes().UpdateDrainOpts(drained.NodeID, &api.DrainOptions{DrainSpec: &api.DrainSpec{Deadline: time.Minute}}, nil)
	must.NoError(t, err)
	moved := e.poll(liveness, func() bool {
		now := e.runningNow(id)
		return len(now) == 2 && !slices.ContainsFunc(now, func(a *api.Allocation) bool { return a.NodeID == drained.NodeID })
	})
	must.True(t, moved, must.Sprintf("%s: the drained allocation runs again elsewhere", who))
	e.settled(id, 2) // a re-pin's replacements, if any, done (Nomad replaces max_parallel at a time)
	add("drain one node of a group of 2", e.createdSince(id, seen)-1, e.keptRunning(keep.ID),
		fmt.Sprintf("%s drained; %s kept on %s", drained.NodeName, keep.ID[:8], keep.NodeName))
	_, err = e.nomad.Nodes().UpdateDrainOpts(drained.NodeID, &api.DrainOptions{DrainSpec: nil, MarkEligible: true}, nil)
	must.NoError(t, err)
	e.stopJobs(id)

	// a GPU lost under one allocation of a group of two
	id = prefix + "gpu"
	e.registerRestartJob(id, 2, true, gated)
	pair = e.settled(id, 2)
	seen = e.allocIDs(id)
	sick, keep := pair[0], pair[1]
	uuid := gpus(sick)[0]
	restore := e.markUnhealthy(sick.NodeName, uuid)
	_, err = e.nomad.Allocations().Stop(sick, nil)
	must.NoError(t, err)
	replaced := e.poll(liveness, func() bool {
		now := e.runningNow(id)
		return len(now) == 2 && !slices.ContainsFunc(now, func(a *api.Allocation) bool { return a.ID == sick.ID || slices.Contains(gpus(a), uuid) })
	})
	must.True(t, replaced, must.Sprintf("%s: the allocation of the lost GPU runs again on another", who))
	e.settled(id, 2)
	add("a GPU lost under one of 2", e.createdSince(id, seen)-1, e.keptRunning(keep.ID), fmt.Sprintf("GPU %s of %s lost", uuid, sick.NodeName))
	restore()
	e.stopJobs(id)

	// the operations of restarts_more_test.go: before a node is lost, as
	// its re-pin after a refusal needs three nodes up
	e.restartMoreOps(who, prefix, s, add)

	// a node lost under one allocation of a group of two
	id = prefix + "lost"
	e.registerRestartJob(id, 2, true, gated)
	pair = e.settled(id, 2)
	seen = e.allocIDs(id)
	gone, keep := pair[0], pair[1]
	if gone.NodeName == "pcie-1" { // the first client runs in the server's agent: it cannot be lost alone
		gone, keep = keep, gone
	}
	must.NoError(t, e.c.KillAgent(gone.NodeName))
	back := e.poll(liveness, func() bool {
		now := e.runningNow(id)
		return len(now) == 2 && !slices.ContainsFunc(now, func(a *api.Allocation) bool { return a.NodeID == gone.NodeID })
	})
	must.True(t, back, must.Sprintf("%s: the lost node's allocation runs again elsewhere", who))
	e.settled(id, 2)
	add("a node lost under one of 2", e.createdSince(id, seen)-1, e.keptRunning(keep.ID), gone.NodeName+" lost")
	e.stopJobs(id)
	return rows
}

// registerRestartJob registers testdata/shares.nomad.hcl as id: count
// allocations of 25 shares, apart on distinct nodes if apart, gated or
// not (then Nomad alone places it: no scheduler runs).
func (e *env) registerRestartJob(id string, count int, apart, gated bool) {
	e.t.Helper()
	j := e.parse(id, map[string]any{"shares": 25, "count": count})
	tg := j.TaskGroups[0]
	if apart {
		tg.Constraints = append(tg.Constraints, &api.Constraint{Operand: "distinct_hosts", RTarget: "true"})
	}
	if !gated {
		tg.Constraints = slices.DeleteFunc(tg.Constraints, pin.IsGate)
	}
	_, _, err := e.nomad.Jobs().Register(j, nil)
	must.NoError(e.t, err)
}

// allocIDs are the IDs of every allocation of job id, of any status.
func (e *env) allocIDs(id string) map[string]bool {
	stubs, _, err := e.nomad.Jobs().Allocations(id, true, nil)
	must.NoError(e.t, err)
	out := map[string]bool{}
	for _, a := range stubs {
		out[a.ID] = true
	}
	return out
}

// createdSince counts job id's allocations not in seen.
func (e *env) createdSince(id string, seen map[string]bool) int {
	n := 0
	for a := range e.allocIDs(id) {
		if !seen[a] {
			n++
		}
	}
	return n
}

// keptRunning reports whether allocation id still runs, its task never
// restarted.
func (e *env) keptRunning(id string) bool {
	a, _, err := e.nomad.Allocations().Info(id, nil)
	if err != nil || a.DesiredStatus != api.AllocDesiredStatusRun || a.ClientStatus != api.AllocClientStatusRunning {
		return false
	}
	for _, ts := range a.TaskStates {
		if ts.Restarts > 0 {
			return false
		}
	}
	return true
}

// markUnhealthy marks GPU uuid of client node unhealthy in its fixture and
// waits until Nomad says so; the returned func makes it healthy again.
func (e *env) markUnhealthy(node, uuid string) func() {
	t := e.t.(*testing.T)
	path := e.fixtures[node]
	src, err := os.ReadFile(path)
	must.NoError(t, err)
	block := fmt.Sprintf("gpu %q {\n", uuid)
	sick := strings.Replace(string(src), block, block+"  healthy = false\n  health_reason = \"XID 79: GPU has fallen off the bus\"\n", 1)
	must.NotEq(t, string(src), sick)
	replaceFile(t, path, sick)
	e.eventually(2*time.Minute, "GPU "+uuid+" unhealthy in Nomad", func() bool { return e.gpuHealthy(node, uuid) == 0 })
	return func() {
		replaceFile(t, path, string(src))
		e.eventually(2*time.Minute, "GPU "+uuid+" healthy again", func() bool { return e.gpuHealthy(node, uuid) == 1 })
	}
}

// gpuHealthy is 1 when Nomad lists GPU uuid of node healthy, 0 when
// unhealthy, -1 when it cannot say.
func (e *env) gpuHealthy(node, uuid string) int {
	id := e.nodes()[node].ID
	n, _, err := e.nomad.Nodes().Info(id, nil)
	if err != nil || n.NodeResources == nil {
		return -1
	}
	for _, d := range n.NodeResources.Devices {
		for _, inst := range d.Instances {
			if strings.HasPrefix(inst.ID, uuid+":") {
				if inst.Healthy {
					return 1
				}
				return 0
			}
		}
	}
	return -1
}

// upgradeFrom is the last commit of the scheduler before node pins.
const upgradeFrom = "2667a74"

// upgradeRows pins a group of two with the scheduler of upgradeFrom (a
// share pin), upgrades to this one, and counts what restarts: nothing
// through the upgrade; the group's next scale moves it to a node pin; the
// one after restarts nothing. It returns the new scheduler, left running.
func (e *env) upgradeRows() (*scheduler, []restartRow) {
	t := e.t.(*testing.T)
	old, why := buildAt(t, upgradeFrom)
	if old == "" {
		t.Logf("NOT MEASURED: no scheduler of %s to upgrade from: %s", upgradeFrom, why)
		return nil, nil
	}
	var rows []restartRow
	add := func(op string, restarts int, kept bool, note string) {
		rows = append(rows, restartRow{who: "upgrade", op: op, restarts: restarts, kept: kept, note: note})
		t.Logf("upgrade: %s: restarts %d, kept %v; %s", op, restarts, kept, note)
	}
	before := e.startSchedulerBin("s-old", old, "debug", "")
	id := "u-upgrade"
	e.registerRestartJob(id, 2, false, true)
	pair := e.settled(id, 2)
	job, _, err := e.nomad.Jobs().Info(id, nil)
	must.NoError(t, err)
	rec, ok := pin.ParseRecord(job, "g")
	must.True(t, ok)
	must.Eq(t, "", rec.Contract, must.Sprint("the scheduler before node pins pins by shares"))
	version := *job.Version
	before.proc.Stop()
	t.Logf("pinned by %s's scheduler (share pin on %v); upgraded", upgradeFrom, rec.Nodes)

	s := e.startScheduler("s1", "")
	// the new scheduler has decided on what it found: a pass at least
	e.eventually(liveness, "the upgraded scheduler to have decided", func() bool {
		var h struct{ Decided uint64 }
		return getJSON(s.http+"/v1/health", &h) == nil && h.Decided > 0
	})
	time.Sleep(5 * time.Second) // a few passes more (liveness only: the counts below decide)
	job, _, err = e.nomad.Jobs().Info(id, nil)
	must.NoError(t, err)
	kept := e.keptRunning(pair[0].ID) && e.keptRunning(pair[1].ID)
	add("upgrade of the scheduler (share pin of count 2)", e.createdSince(id, idsOf(pair)), kept,
		fmt.Sprintf("job version %d -> %d", version, *job.Version))
	must.True(t, kept, must.Sprint("the upgrade restarted a running allocation"))
	must.Eq(t, version, *job.Version, must.Sprint("the upgraded scheduler wrote the job again"))

	seen := e.allocIDs(id)
	e.scale(id, 3)
	three := e.settled(id, 3)
	job, _, err = e.nomad.Jobs().Info(id, nil)
	must.NoError(t, err)
	rec, ok = pin.ParseRecord(job, "g")
	must.True(t, ok)
	must.Eq(t, pin.ContractNode, rec.Contract, must.Sprint("pinned again, a node pin"))
	add("its first scale after the upgrade, 2 -> 3 (share pin -> node pin)", e.createdSince(id, seen)-1, false, "moved to a node pin")
	seen = e.allocIDs(id)
	e.scale(id, 4)
	e.settled(id, 4)
	keptAll := true
	for _, a := range three {
		keptAll = keptAll && e.keptRunning(a.ID)
	}
	add("the scale after, 3 -> 4 (node pin)", e.createdSince(id, seen)-1, keptAll, "")
	must.True(t, keptAll)
	must.Eq(t, 0, e.createdSince(id, seen)-1)
	e.stopJobs(id)
	return s, rows
}

func idsOf(allocs []*api.Allocation) map[string]bool {
	out := map[string]bool{}
	for _, a := range allocs {
		out[a.ID] = true
	}
	return out
}

// buildAt builds the gpushare binary of commit rev of this repository
// ("" and why when it cannot: a clone without that commit).
func buildAt(t *testing.T, rev string) (string, string) {
	root, err := devcluster.RepoRoot()
	if err != nil {
		return "", err.Error()
	}
	if out, err := exec.Command("git", "-C", root, "cat-file", "-e", rev+"^{commit}").CombinedOutput(); err != nil {
		return "", fmt.Sprintf("git cat-file: %v %s", err, out)
	}
	dir := t.TempDir()
	archive := exec.Command("sh", "-c", fmt.Sprintf("git -C %q archive %s | tar -x -C %q", root, rev, dir))
	if out, err := archive.CombinedOutput(); err != nil {
		return "", fmt.Sprintf("git archive: %v %s", err, out)
	}
	bin, err := devcluster.BuildCLI(t.Context(), dir, filepath.Join(dir, "bin"))
	if err != nil {
		return "", err.Error()
	}
	return bin, ""
}
