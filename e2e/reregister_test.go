package e2e

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// TestReRegisterUnchangedKeepsAllocations: a gated jobspec registered
// again unchanged, as `nomad job run` of the same file or a CI pipeline
// does, is pinned exactly as before, so Nomad updates it in place: the
// allocations keep their IDs and keep running, none is replaced (issue 19;
// docs/gate-and-pin.md, "Sticky pins"). Also after another job landed on the same GPU, and
// when the spec is registered three times in a row without waiting.
//
// The job is jobspecs/examples/inference-quarter.nomad.hcl (two replicas of
// 25 shares), parsed once; every registration sends a copy of that parse.
func TestReRegisterUnchangedKeepsAllocations(t *testing.T) {
	start := time.Now()
	e := newTwoPCIeEnv(t)
	// room for the interference model's uncertainty (0.19), so that a
	// production job may share its GPU at all (as in TestSchedulerInterference)
	s := e.startScheduler("s1", "production_max_slowdown = 0.3")
	t.Logf("cluster and scheduler ready in %s", time.Since(start).Round(time.Second))

	src, err := os.ReadFile(filepath.Join("..", "jobspecs", "examples", "inference-quarter.nomad.hcl"))
	must.NoError(t, err)
	spec, err := e.nomad.Jobs().ParseHCLOpts(&api.JobsParseRequest{JobHCL: string(src), Canonicalize: true})
	must.NoError(t, err)
	must.Eq(t, "inference", *spec.ID)
	must.Eq(t, 2, *spec.TaskGroups[0].Count)
	must.SliceLen(t, 1, pin.Gated(spec))
	rr := &reRegister{e: e, s: s, spec: spec, id: *spec.ID, group: *spec.TaskGroups[0].Name}

	rr.register()
	e.running(rr.id, 2, 90*time.Second)

	t.Run("registered again unchanged", func(t *testing.T) {
		rr := rr.in(t)
		before := rr.baseline()
		idx := rr.register()
		rr.keeps(before, idx)
	})

	t.Run("registered again after another job landed on its GPU", func(t *testing.T) {
		rr := rr.in(t)
		before := rr.baseline()
		// a light production job: it pairs with inference's replicas under
		// the bound
		e := rr.e
		e.register("neighbour", map[string]any{"shares": 25, "class": "production", "sm_util": "0.05", "mem_bw": "0.05"})
		na := e.running("neighbour", 1, 60*time.Second)[0]
		ours := map[string]bool{}
		for _, a := range before.running {
			for _, g := range gpus(a) {
				ours[g] = true
			}
		}
		ng := gpus(na)
		must.SliceLen(t, 1, ng)
		if !ours[ng[0]] {
			job, _, _ := e.nomad.Jobs().Info("neighbour", nil)
			rec, _ := pin.ParseRecord(job, "g")
			t.Fatalf("precondition: the neighbour's shares are on GPU %s, not on a GPU of %s (%v): the scheduler did not pack it there (%+v)",
				ng[0], rr.id, slices.Sorted(maps.Keys(ours)), rec)
		}
		t.Logf("neighbour shares GPU %s with %s", ng[0], rr.id)
		idx := rr.register()
		rr.keeps(before, idx)
		must.SliceLen(t, 1, e.runningNow("neighbour"), must.Sprint("the neighbour stopped"))
	})

	t.Run("registered three times in a row", func(t *testing.T) {
		rr := rr.in(t)
		before := rr.baseline()
		var idx uint64
		for range 3 {
			idx = rr.register()
		}
		rr.keeps(before, idx)
	})
	t.Logf("TestReRegisterUnchangedKeepsAllocations took %s", time.Since(start).Round(time.Second))
}

// newTwoPCIeEnv is a cluster of two 4-GPU PCIe clients (the first is the
// dev agent with the server) whose GPU UUIDs differ.
func newTwoPCIeEnv(t *testing.T) *env {
	t.Helper()
	return newPCIeEnv(t, "gpushare-rereg-", 20, "dc1", "dc1")
}

// newPCIeEnv is a cluster of 4-GPU PCIe clients pcie-1, pcie-2, ... in
// the datacenters dcs (the first is the dev agent with the server), whose
// GPU UUIDs differ (numbered from first).
func newPCIeEnv(t *testing.T, prefix string, first int, dcs ...string) *env {
	t.Helper()
	return newPCIeEnvWith(t, prefix, first, "", dcs...)
}

// reRegister registers one parsed jobspec again and again.
type reRegister struct {
	e         *env
	s         *scheduler
	spec      *api.Job
	id, group string
}

func (rr *reRegister) in(t *testing.T) *reRegister {
	c := *rr
	c.e = rr.e.in(t)
	return &c
}

// register sends a copy of the parsed jobspec, as `nomad job run` of the
// same file does, and returns the job modify index it created.
func (rr *reRegister) register() uint64 {
	t := rr.e.t
	t.Helper()
	b, err := json.Marshal(rr.spec)
	must.NoError(t, err)
	var job api.Job
	must.NoError(t, json.Unmarshal(b, &job))
	resp, _, err := rr.e.nomad.Jobs().Register(&job, nil)
	must.NoError(t, err)
	return resp.JobModifyIndex
}

// allocsBefore are a job's allocations before a registration.
type allocsBefore struct {
	// running are the running allocations: exactly the group's count
	running []*api.Allocation
	// known are the IDs of all its allocations, stopped ones too
	known map[string]bool
}

// baseline returns the job's allocations now.
func (rr *reRegister) baseline() allocsBefore {
	t := rr.e.t
	t.Helper()
	b := allocsBefore{running: rr.e.running(rr.id, 2, 30*time.Second), known: map[string]bool{}}
	for _, a := range b.running {
		t.Logf("before: allocation %s on %s, version %d, create index %d, shares on %v", a.ID[:8], a.NodeName, *a.Job.Version, a.CreateIndex, gpus(a))
	}
	stubs, _, err := rr.e.nomad.Jobs().Allocations(rr.id, true, nil)
	must.NoError(t, err)
	for _, a := range stubs {
		b.known[a.ID] = true
	}
	return b
}

// keeps waits until the scheduler has pinned the version registered at
// index idx (or later) and Nomad has acted on it, then checks that the
// running allocations in before are still running, updated in place to
// the pinned version, and the job has no allocation before did not know.
func (rr *reRegister) keeps(b allocsBefore, idx uint64) {
	before := b.running
	e, t := rr.e, rr.e.t
	t.Helper()
	var job *api.Job
	var stubs []*api.AllocationListStub
	settled := func() bool {
		var err error
		job, _, err = e.nomad.Jobs().Info(rr.id, nil)
		if err != nil || *job.JobModifyIndex <= idx || len(pin.Gated(job)) > 0 {
			return false // not pinned since the registration
		}
		if stubs, _, err = e.nomad.Jobs().Allocations(rr.id, true, nil); err != nil {
			return false
		}
		current := 0
		for _, a := range stubs {
			switch {
			case a.DesiredStatus == "run" && a.ClientStatus == "running" && a.JobVersion == *job.Version:
				current++
			case a.ClientStatus == "pending" || (a.DesiredStatus == "run" && a.JobVersion != *job.Version):
				return false // Nomad is still at it
			}
		}
		return current == len(before)
	}
	deadline := time.Now().Add(liveness)
	for !settled() {
		if time.Now().After(deadline) {
			t.Fatalf("%s not settled %s after its registration (index %d): %s", rr.id, liveness, idx, rr.state(job, stubs))
		}
		time.Sleep(250 * time.Millisecond)
	}
	var problems []string
	for _, a := range stubs {
		if !b.known[a.ID] {
			problems = append(problems, fmt.Sprintf("new allocation %s on %s (version %d, %s/%s)", a.ID[:8], a.NodeName, a.JobVersion, a.DesiredStatus, a.ClientStatus))
		}
	}
	for _, b := range before {
		i := slices.IndexFunc(stubs, func(a *api.AllocationListStub) bool { return a.ID == b.ID })
		switch {
		case i < 0:
			problems = append(problems, fmt.Sprintf("allocation %s is gone", b.ID[:8]))
		case stubs[i].DesiredStatus != "run" || stubs[i].ClientStatus != "running":
			problems = append(problems, fmt.Sprintf("allocation %s is %s/%s (%s)", b.ID[:8], stubs[i].DesiredStatus, stubs[i].ClientStatus, stubs[i].DesiredDescription))
		case stubs[i].CreateIndex != b.CreateIndex:
			problems = append(problems, fmt.Sprintf("allocation %s create index %d, was %d", b.ID[:8], stubs[i].CreateIndex, b.CreateIndex))
		case stubs[i].JobVersion != *job.Version:
			problems = append(problems, fmt.Sprintf("allocation %s still at version %d, job at %d", b.ID[:8], stubs[i].JobVersion, *job.Version))
		default:
			// updated in place: its tasks were not restarted either
			now, _, err := e.nomad.Allocations().Info(b.ID, nil)
			must.NoError(t, err)
			for task, st := range b.TaskStates {
				ns := now.TaskStates[task]
				if ns == nil || !ns.StartedAt.Equal(st.StartedAt) || ns.Restarts != st.Restarts {
					problems = append(problems, fmt.Sprintf("allocation %s task %s restarted in place", b.ID[:8], task))
				}
			}
		}
	}
	if len(problems) > 0 {
		t.Fatalf("re-registering unchanged %s replaced its allocations:\n  %s\n%s", rr.id, strings.Join(problems, "\n  "), rr.pinDiff(before[0], job))
	}
	t.Logf("%s kept allocations %s, updated in place to version %d", rr.id, allocIDs(before), *job.Version)
}

// pinDiff says how the pin of job differs from the one allocation a ran
// with: the group meta and the device constraint Nomad compares.
func (rr *reRegister) pinDiff(a *api.Allocation, job *api.Job) string {
	old := pin.Group(a.Job, rr.group)
	now := pin.Group(job, rr.group)
	if old == nil || now == nil {
		return "(no group to compare)"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "pin of version %d (the allocations' first) against version %d:", *a.Job.Version, *job.Version)
	same := true
	for _, k := range slices.Sorted(maps.Keys(union(old.Meta, now.Meta))) {
		if old.Meta[k] == now.Meta[k] {
			continue
		}
		same = false
		var was, is map[string]any
		if json.Unmarshal([]byte(old.Meta[k]), &was) != nil || json.Unmarshal([]byte(now.Meta[k]), &is) != nil {
			fmt.Fprintf(&b, "\n  group meta %s:\n    was %s\n    now %s", k, short(old.Meta[k]), short(now.Meta[k]))
			continue
		}
		for _, f := range slices.Sorted(maps.Keys(union(was, is))) {
			w, _ := json.Marshal(was[f])
			n, _ := json.Marshal(is[f])
			if string(w) != string(n) {
				fmt.Fprintf(&b, "\n  group meta %s, field %s:\n    was %s\n    now %s", k, f, short(string(w)), short(string(n)))
			}
		}
	}
	oc, _ := json.Marshal(deviceConstraints(old))
	nc, _ := json.Marshal(deviceConstraints(now))
	if string(oc) != string(nc) {
		same = false
		fmt.Fprintf(&b, "\n  device constraints:\n    was %s\n    now %s", short(string(oc)), short(string(nc)))
	}
	oe, _ := json.Marshal(old.Tasks[0].Env)
	ne, _ := json.Marshal(now.Tasks[0].Env)
	if string(oe) != string(ne) {
		same = false
		fmt.Fprintf(&b, "\n  task env:\n    was %s\n    now %s", short(string(oe)), short(string(ne)))
	}
	if same {
		b.WriteString(" meta, device constraints and task env identical")
	}
	return b.String()
}

func deviceConstraints(tg *api.TaskGroup) []*api.Constraint {
	var out []*api.Constraint
	for _, task := range tg.Tasks {
		if task.Resources == nil {
			continue
		}
		for _, d := range task.Resources.Devices {
			out = append(out, d.Constraints...)
		}
	}
	return out
}

// state describes the job and its allocations, and what the scheduler
// says of it, for a failure message.
func (rr *reRegister) state(job *api.Job, stubs []*api.AllocationListStub) string {
	var b strings.Builder
	if job != nil {
		fmt.Fprintf(&b, "job version %d, modify index %d, gated groups %v", *job.Version, *job.JobModifyIndex, pin.Gated(job))
	}
	for _, a := range stubs {
		fmt.Fprintf(&b, "\n  allocation %s on %s version %d %s/%s", a.ID[:8], a.NodeName, a.JobVersion, a.DesiredStatus, a.ClientStatus)
	}
	var st jobStatusView
	if getJSON(rr.s.http+"/v1/jobs/"+rr.id, &st) == nil {
		for _, g := range st.Groups {
			fmt.Fprintf(&b, "\n  scheduler: group %s %s %s", g.Name, g.State, g.Reason)
		}
	}
	return b.String()
}

// jobStatusView is the part of /v1/jobs/<id> failure messages show.
type jobStatusView struct {
	Groups []struct{ Name, State, Reason string }
}

func allocIDs(allocs []*api.Allocation) string {
	var ids []string
	for _, a := range allocs {
		ids = append(ids, a.ID[:8])
	}
	return strings.Join(ids, ",")
}

// short cuts s to 240 characters (share ID lists run to thousands).
func short(s string) string {
	if len(s) <= 240 {
		return s
	}
	return fmt.Sprintf("%s...(%d more bytes)", s[:240], len(s)-240)
}

// union is the keys of a and b.
func union[V any](a, b map[string]V) map[string]bool {
	out := map[string]bool{}
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}
