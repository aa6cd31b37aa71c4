package e2e

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// TestInPlacePin measures, on the real Nomad 1.11.3 and plugin with one
// device group per GPU (device_groups = "gpu"; three 4-GPU PCIe clients in
// dc1), the facts the pin of issue 45 rests on: the device block written
// once with fixed affinities on ${device.attr.index} (a lower index
// matches more of them), the pin only the group's ${node.unique.id}
// set_contains_any constraint. No scheduler runs: the jobs are written as
// that design would write them.
//   - index affinities: fractions of several jobs, registered one after
//     another on one node, each go to the lowest-indexed GPU with room
//     (Nomad's createOffer takes the device group of best affinity score),
//     never two GPUs; the same jobs without the affinities on another node
//     are the control;
//   - node ranking: the same affinities score nodes too (Nomad's "devices"
//     score), so a pin naming two nodes sends a fraction to the node whose
//     lower-indexed GPU has room;
//   - a scale 1 -> 3 whose re-registration only widens the node constraint
//     keeps the running allocation (same ID, updated in place, 0 restarts);
//   - the same scale with today's pin (a ${device.ids} constraint in the
//     device block, changed) replaces it: the control;
//   - the same scale with the node-only pin and a changed group meta
//     (gpushare.placement) replaces it too;
//   - a drain of one node of a count-2 group, re-registered naming the
//     other node and a third: the allocation on the other node stays, the
//     drained one moves to the third.
//
// The table is logged at the end (RESULT lines) and written into
// docs/device-contract.md by hand ("A pin Nomad checks in place:
// measured").
func TestInPlacePin(t *testing.T) {
	start := time.Now()
	e := newPCIeEnvWith(t, "gpushare-inplace-", 60, fmt.Sprintf("device_groups = %q", devicefn.DeviceGroupsGPU), "dc1", "dc1", "dc1")
	checkFingerprint(t, e, true)
	nodes := e.nodes()
	A, B, C := nodes["pcie-1"].ID, nodes["pcie-2"].ID, nodes["pcie-3"].ID
	t.Logf("cluster ready in %s", time.Since(start).Round(time.Second))
	var rows []string
	add := func(format string, args ...any) {
		rows = append(rows, fmt.Sprintf(format, args...))
		t.Log(rows[len(rows)-1])
	}

	t.Run("index affinities", func(t *testing.T) {
		e := e.in(t)
		// jobs in registration order: count x shares; the rule's choice
		// (lowest index with room) is in the comment, GPUs 0..3 of 100
		steps := []struct{ count, shares int }{
			{3, 25}, // 0,0,0 (75 on GPU 0)
			{1, 50}, // 1 (GPU 0 has 25 left)
			{2, 25}, // 0,1 (GPU 0 full, GPU 1 75)
			{1, 30}, // 2
			{1, 25}, // 1 (GPU 1 full)
			{2, 40}, // 2,3 (GPU 2 70, GPU 3 40)
			{1, 10}, // 2 (back to the lowest with room)
		}
		var ids []string
		t.Cleanup(func() { e.stopDone(ids...) })
		used := make([]int, 4)
		total, hits, plainHits, plainPlaced, spans := 0, 0, 0, 0, 0
		var got, gotPlain []string
		for i, st := range steps {
			want := make([]int, st.count)
			for k := range want {
				want[k] = slices.IndexFunc(used, func(u int) bool { return u+st.shares <= 100 })
				used[want[k]] += st.shares
			}
			aff, plain := fmt.Sprintf("aff-%d", i), fmt.Sprintf("plain-%d", i)
			ids = append(ids, aff, plain)
			e.registerJob(inplaceJob(aff, st.count, st.shares, []string{A}, pinOpts{affinities: true}))
			e.registerJob(inplaceJob(plain, st.count, st.shares, []string{B}, pinOpts{}))
			allocs, ok := e.placedOr(aff, st.count)
			must.True(t, ok, must.Sprintf("%s: %d x %d shares placed on pcie-1", aff, st.count, st.shares))
			idx := gpuIndexes(t, allocs)
			total += st.count
			hits += overlap(want, idx)
			got = append(got, fmt.Sprintf("%v", idx))
			// the control may find no GPU with room: it waits, counted apart
			pa, pok := e.placedOr(plain, st.count)
			if pok {
				pi := gpuIndexes(t, pa)
				plainPlaced += st.count
				plainHits += overlap(want, pi)
				gotPlain = append(gotPlain, fmt.Sprintf("%v", pi))
			} else {
				gotPlain = append(gotPlain, "waits")
			}
			for _, a := range append(allocs, pa...) {
				if len(gpus(a)) != 1 {
					spans++
				}
			}
		}
		t.Logf("GPU indexes per job, with affinities: %s; without: %s", strings.Join(got, " "), strings.Join(gotPlain, " "))
		add("RESULT index affinities: %d of %d allocations on the lowest-indexed GPU with room (%s); without affinities %d of %d (%d placed: %s); allocations on two GPUs: %d",
			hits, total, strings.Join(got, " "), plainHits, total, plainPlaced, strings.Join(gotPlain, " "), spans)
		must.Eq(t, total, hits, must.Sprint("every fraction on the lowest-indexed GPU with room"))
		must.Eq(t, 0, spans)
	})

	t.Run("node ranking", func(t *testing.T) {
		e := e.in(t)
		t.Cleanup(func() { e.stopDone("fill", "rank-aff", "rank-plain") })
		// GPU 0 of pcie-1 full; pcie-2 empty: a fraction pinned to both
		e.registerJob(inplaceJob("fill", 1, 100, []string{A}, pinOpts{affinities: true}))
		fill, ok := e.placedOr("fill", 1)
		must.True(t, ok)
		must.Eq(t, []int{0}, gpuIndexes(t, fill))
		where := func(id string, o pinOpts) string {
			e.registerJob(inplaceJob(id, 1, 25, []string{A, B}, o))
			allocs, ok := e.placedOr(id, 1)
			must.True(t, ok)
			out := fmt.Sprintf("%s GPU %d", allocs[0].NodeName, gpuIndexes(t, allocs)[0])
			e.stopDone(id)
			return out
		}
		aff := where("rank-aff", pinOpts{affinities: true})
		plain := where("rank-plain", pinOpts{})
		add("RESULT node ranking: 25 shares pinned to pcie-1 (GPU 0 full) and pcie-2 (empty): with affinities on %s, without on %s", aff, plain)
		// the devices score: 7 of 7 affinities on pcie-2's GPU 0, 6 of 7 on
		// pcie-1's GPU 1, against a binpack score a 20 MHz task hardly moves
		must.StrHasPrefix(t, "pcie-2 GPU 0", aff)
	})

	t.Run("scale 1 -> 3, node-only pin widened", func(t *testing.T) {
		e := e.in(t)
		t.Cleanup(func() { e.stopDone("svc") })
		e.registerJob(inplaceJob("svc", 1, 25, []string{A}, pinOpts{affinities: true}))
		before := e.settled("svc", 1)
		must.Eq(t, "pcie-1", before[0].NodeName)
		e.registerJob(inplaceJob("svc", 3, 25, []string{A, B}, pinOpts{affinities: true}))
		after := e.settled("svc", 3)
		kept := keptOf(t, e, before[0], after)
		r := e.restarts("svc", before, 2)
		add("RESULT scale 1 -> 3, node-only pin [pcie-1] -> [pcie-1,pcie-2]: first allocation kept %v (task restarts %d), restarts %d; now on %s",
			kept, taskRestarts(after, before[0].ID), r, placedOn(t, after))
		must.True(t, kept, must.Sprint("the running allocation is updated in place"))
		must.Eq(t, 0, r)
	})

	t.Run("scale 1 -> 3, today's pin", func(t *testing.T) {
		e := e.in(t)
		t.Cleanup(func() { e.stopDone("today") })
		g0 := func(node string) string { return gpuUUID(t, e, node, 0) }
		ids1 := devicefn.ShareIDs(g0(A), 25)
		e.registerJob(inplaceJob("today", 1, 25, []string{A}, pinOpts{affinities: true, shares: ids1}))
		before := e.settled("today", 1)
		// today's re-pin: the running allocation's shares kept in the set,
		// the new ones' added; meta left byte-identical (only the device
		// block changes)
		ids3 := append(devicefn.ShareIDs(g0(A), 50), devicefn.ShareIDs(g0(B), 25)...)
		e.registerJob(inplaceJob("today", 3, 25, []string{A, B}, pinOpts{affinities: true, shares: ids3}))
		after := e.settled("today", 3)
		kept := keptOf(t, e, before[0], after)
		r := e.restarts("today", before, 2)
		add("RESULT scale 1 -> 3, today's pin (${device.ids} in the device block changed): first allocation kept %v, restarts %d; now on %s",
			kept, r, placedOn(t, after))
		must.False(t, kept, must.Sprint("a changed device block is a destructive update"))
		must.Eq(t, 1, r)
	})

	t.Run("scale 1 -> 3, node-only pin and meta changed", func(t *testing.T) {
		e := e.in(t)
		t.Cleanup(func() { e.stopDone("meta") })
		e.registerJob(inplaceJob("meta", 1, 25, []string{A}, pinOpts{affinities: true, placement: `{"nodes":1}`}))
		before := e.settled("meta", 1)
		e.registerJob(inplaceJob("meta", 3, 25, []string{A, B}, pinOpts{affinities: true, placement: `{"nodes":2}`}))
		after := e.settled("meta", 3)
		kept := keptOf(t, e, before[0], after)
		r := e.restarts("meta", before, 2)
		add("RESULT scale 1 -> 3, node-only pin widened and group meta gpushare.placement changed: first allocation kept %v, restarts %d; now on %s",
			kept, r, placedOn(t, after))
		must.False(t, kept, must.Sprint("a changed group meta is a destructive update"))
		must.Eq(t, 1, r)
	})

	t.Run("drain one node, node-only pin moved", func(t *testing.T) {
		e := e.in(t)
		t.Cleanup(func() { e.stopDone("pair") })
		e.registerJob(inplaceJob("pair", 2, 25, []string{A, B}, pinOpts{affinities: true, distinct: true}))
		before := e.settled("pair", 2)
		must.Eq(t, []string{"pcie-1", "pcie-2"}, nodesOf(before))
		onB := before[slices.IndexFunc(before, func(a *api.Allocation) bool { return a.NodeID == B })]
		_, err := e.nomad.Nodes().UpdateDrainOpts(A, &api.DrainOptions{
			DrainSpec: &api.DrainSpec{Deadline: time.Minute}, MarkEligible: false}, nil)
		must.NoError(t, err)
		t.Cleanup(func() {
			_, _ = e.nomad.Nodes().UpdateDrainOpts(A, &api.DrainOptions{DrainSpec: nil, MarkEligible: true}, nil)
		})
		e.registerJob(inplaceJob("pair", 2, 25, []string{B, C}, pinOpts{affinities: true, distinct: true}))
		after := e.settled("pair", 2)
		kept := keptOf(t, e, onB, after)
		r := e.restarts("pair", before, 1)
		add("RESULT drain pcie-1 of a count-2 group on [pcie-1,pcie-2], pin -> [pcie-2,pcie-3]: pcie-2's allocation kept %v (task restarts %d), restarts %d; now on %s",
			kept, taskRestarts(after, onB.ID), r, placedOn(t, after))
		must.True(t, kept)
		must.Eq(t, []string{"pcie-2", "pcie-3"}, nodesOf(after))
		must.Eq(t, 0, r)
	})

	for _, r := range rows {
		t.Log(r)
	}
	t.Logf("took %s", time.Since(start).Round(time.Second))
}

// pinOpts shapes inplaceJob: the device block's fixed index affinities,
// today's share pin in it, a distinct_hosts constraint, group meta.
type pinOpts struct {
	affinities bool
	shares     []string
	distinct   bool
	// placement, when set, is group meta gpushare.placement
	placement string
}

// inplaceJob is a service of count allocations of shares shares each,
// pinned as issue 45's design pins: ${node.unique.id} set_contains_any
// nodes, the rest (device block, meta, task) the same in every version.
func inplaceJob(id string, count, shares int, nodes []string, o pinOpts) *api.Job {
	j := api.NewServiceJob(id, id, "global", 50)
	j.Datacenters = []string{"dc1"}
	tg := api.NewTaskGroup("g", count)
	tg.Constraints = []*api.Constraint{api.NewConstraint(pin.NodeAttribute, pin.OpSetContains, strings.Join(nodes, ","))}
	if o.distinct {
		tg.Constraints = append(tg.Constraints, api.NewConstraint("", "distinct_hosts", "true"))
	}
	tg.Meta = map[string]string{"gpushare.vc": "e2e"}
	if o.placement != "" {
		tg.Meta["gpushare.placement"] = o.placement
	}
	tg.RestartPolicy = &api.RestartPolicy{Attempts: ptr(0), Mode: ptr("fail")}
	tg.Update = &api.UpdateStrategy{MinHealthyTime: ptr(time.Second), HealthyDeadline: ptr(2 * time.Minute), ProgressDeadline: ptr(5 * time.Minute)}
	dev := &api.RequestedDevice{Name: "nvidia/" + devicefn.DeviceType, Count: ptr(uint64(shares))}
	if o.affinities {
		// k = 0..6: GPU i matches 7-i of them (nodes of up to 8 GPUs)
		for k := range 7 {
			dev.Affinities = append(dev.Affinities, &api.Affinity{LTarget: "${device.attr." + devicefn.AttrGPUIndex + "}", Operand: "<=", RTarget: strconv.Itoa(k), Weight: ptr(int8(50))})
		}
	}
	if o.shares != nil {
		dev.Constraints = []*api.Constraint{api.NewConstraint(pin.DeviceAttribute, pin.OpSetContains, strings.Join(o.shares, ","))}
	}
	task := api.NewTask("work", "raw_exec").SetConfig("command", "/bin/sh").SetConfig("args", []string{"-c", "exec sleep 3600"})
	task.Resources = &api.Resources{CPU: ptr(20), MemoryMB: ptr(16), Devices: []*api.RequestedDevice{dev}}
	tg.AddTask(task)
	j.AddTaskGroup(tg)
	return j
}

// stopDone stops jobs (no purge: see stopJobs) and waits until their
// allocations stop on the clients: Nomad counts the devices of an
// allocation told to stop until its client says it stopped
// (EvalContext.ProposedAllocs), so the next subtest would find them taken.
func (e *env) stopDone(ids ...string) {
	for _, id := range ids {
		_, _, _ = e.nomad.Jobs().Deregister(id, false, nil)
	}
	e.eventually(liveness, "stopped jobs' allocations to stop on their clients", func() bool {
		for _, id := range ids {
			stubs, _, err := e.nomad.Jobs().Allocations(id, false, nil)
			if err != nil {
				return false
			}
			for _, a := range stubs {
				if a.ClientStatus == api.AllocClientStatusPending || a.ClientStatus == api.AllocClientStatusRunning {
					return false
				}
			}
		}
		return true
	})
}

func (e *env) registerJob(j *api.Job) {
	e.t.Helper()
	_, _, err := e.nomad.Jobs().Register(j, nil)
	must.NoError(e.t, err)
}

// placedOr waits until n allocations of job id run, or an evaluation of it
// is blocked (Nomad found no room for some): false then.
func (e *env) placedOr(id string, n int) ([]*api.Allocation, bool) {
	e.t.Helper()
	var out []*api.Allocation
	blocked := false
	e.eventually(liveness, fmt.Sprintf("%d allocation(s) of %s to run, or Nomad to block it", n, id), func() bool {
		if out = e.runningNow(id); len(out) == n {
			return true
		}
		evals, _, err := e.nomad.Jobs().Evaluations(id, nil)
		if err != nil {
			return false
		}
		for _, ev := range evals {
			if ev.Status == api.EvalStatusBlocked {
				blocked = true
			}
		}
		return blocked
	})
	return out, !blocked
}

// gpuIndexes returns the NVML indexes of the per-GPU groups the
// allocations' shares are on, sorted; -1 for one on several groups.
func gpuIndexes(t *testing.T, allocs []*api.Allocation) []int {
	t.Helper()
	var out []int
	for _, a := range allocs {
		tr := a.AllocatedResources.Tasks["work"]
		must.NotNil(t, tr)
		if len(tr.Devices) != 1 {
			out = append(out, -1)
			continue
		}
		name := tr.Devices[0].Name
		i, err := strconv.Atoi(name[strings.LastIndex(name, devicefn.GPUGroupInfix)+len(devicefn.GPUGroupInfix):])
		must.NoError(t, err, must.Sprintf("device group %q", name))
		out = append(out, i)
	}
	slices.Sort(out)
	return out
}

// overlap is the size of the intersection of two multisets.
func overlap(a, b []int) int {
	n := 0
	rest := slices.Clone(b)
	for _, x := range a {
		if i := slices.Index(rest, x); i >= 0 {
			n++
			rest = slices.Delete(rest, i, i+1)
		}
	}
	return n
}

// gpuUUID is the UUID of GPU index of a node (its per-GPU group's shares).
func gpuUUID(t *testing.T, e *env, nodeID string, index int) string {
	t.Helper()
	n, _, err := e.nomad.Nodes().Info(nodeID, nil)
	must.NoError(t, err)
	for _, d := range n.NodeResources.Devices {
		if d.Type == devicefn.DeviceType && strings.HasSuffix(d.Name, devicefn.GPUGroupInfix+strconv.Itoa(index)) && len(d.Instances) > 0 {
			sid, err := devicefn.ParseShareID(d.Instances[0].ID)
			must.NoError(t, err)
			return sid.UUID
		}
	}
	t.Fatalf("node %s has no GPU %d", nodeID, index)
	return ""
}

// keptOf reports whether allocation a still runs among after, updated in
// place to the job's current version, on the same shares, its task not
// restarted nor started again.
func keptOf(t *testing.T, e *env, a *api.Allocation, after []*api.Allocation) bool {
	t.Helper()
	i := slices.IndexFunc(after, func(b *api.Allocation) bool { return b.ID == a.ID })
	if i < 0 {
		return false
	}
	job, _, err := e.nomad.Jobs().Info(*a.Job.ID, nil)
	must.NoError(t, err)
	must.Eq(t, *job.Version, *after[i].Job.Version, must.Sprint("the kept allocation runs the new version"))
	must.Eq(t, 0, taskRestarts(after, a.ID))
	must.Eq(t, allocatedIDs(a), allocatedIDs(after[i]), must.Sprint("the kept allocation keeps its shares"))
	if was, now := a.TaskStates["work"], after[i].TaskStates["work"]; was != nil && now != nil {
		must.Eq(t, was.StartedAt, now.StartedAt, must.Sprint("the kept allocation's task was not started again"))
	}
	return true
}

// taskRestarts is the restart count of allocation id's task among allocs
// (-1: not among them).
func taskRestarts(allocs []*api.Allocation, id string) int {
	for _, a := range allocs {
		if a.ID == id {
			if ts := a.TaskStates["work"]; ts != nil {
				return int(ts.Restarts)
			}
			return 0
		}
	}
	return -1
}

// placedOn says where allocations run: node and GPU index each.
func placedOn(t *testing.T, allocs []*api.Allocation) string {
	t.Helper()
	var out []string
	for _, a := range allocs {
		out = append(out, fmt.Sprintf("%s GPU %v", a.NodeName, gpuIndexes(t, []*api.Allocation{a})))
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}
