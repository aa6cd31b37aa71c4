package cli

import (
	"testing"

	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// A periodic parent's job status lists its children (Nomad's jobs whose
// ParentID is the parent), newest first, with their states.
func TestJobStatusListsPeriodicChildren(t *testing.T) {
	periodic := &api.Job{ID: ptr("nightly"), Periodic: &api.PeriodicConfig{Spec: ptr("@daily")}}
	children := []*api.JobListStub{
		{ID: "nightly/periodic-1700000000", ParentID: "nightly", Status: "dead", SubmitTime: 1,
			JobSummary: &api.JobSummary{Summary: map[string]api.TaskGroupSummary{"g": {Complete: 1}}}},
		// pinned: Nomad's API dropped its ParentID when gpushare registered it
		{ID: "nightly/periodic-1700086400", ParentID: "", Status: "running", SubmitTime: 2,
			JobSummary: &api.JobSummary{Summary: map[string]api.TaskGroupSummary{"g": {Running: 1}}}},
		{ID: "nightly/periodic-1700172800", ParentID: "nightly", Status: "pending", SubmitTime: 3,
			JobSummary: &api.JobSummary{Summary: map[string]api.TaskGroupSummary{"g": {Queued: 1}}}},
		{ID: "nightly/other", ParentID: "", Status: "running", SubmitTime: 4},         // not a child: a prefix only
		{ID: "nightly/periodic-soon", ParentID: "", Status: "running", SubmitTime: 5}, // nor this
	}
	nomad := serveJSON(t, map[string]any{"/v1/job/nightly": periodic, "/v1/jobs": children})
	sched := serveJSON(t, map[string]any{"/v1/jobs/nightly": `{"namespace":"default","id":"nightly","type":"batch","status":"running",
		"groups":[{"name":"g","state":"template","lifecycle":"template","reason":"a periodic or parameterized job"}]}`})
	code, out, errOut := run("job", "status", "-scheduler", sched, "-address", nomad, "nightly")
	must.EqOp(t, 0, code, must.Sprint(errOut))
	must.StrContains(t, out, `  children (3, newest first):
    nightly/periodic-1700172800: pending (allocations: 1 queued (waits for gpushare))
    nightly/periodic-1700086400: running (allocations: 1 running)
    nightly/periodic-1700000000: dead (allocations: 1 complete)
`)
	must.StrNotContains(t, out, "nightly/other")
	must.StrNotContains(t, out, "nightly/periodic-soon")

	// none yet
	nomad = serveJSON(t, map[string]any{"/v1/job/nightly": periodic, "/v1/jobs": []*api.JobListStub{}})
	code, out, errOut = run("job", "status", "-scheduler", sched, "-address", nomad, "nightly")
	must.EqOp(t, 0, code, must.Sprint(errOut))
	must.StrContains(t, out, "  children: none in Nomad now")
}

// A dispatched child's job status shows its own allocation's GPU and
// shares, inside its parent's pool, not the whole pool as its placement;
// allocation IDs are cut to 8 characters, as Nomad's CLI shows them.
func TestJobStatusOfDispatchedChild(t *testing.T) {
	id := "infer/dispatch-1700000000-abcd1234"
	child := &api.Job{ID: ptr(id), ParentID: ptr("infer"), Dispatched: true}
	nomad := serveJSON(t, map[string]any{"/v1/job/" + id: child})
	status := `{"namespace":"default","id":"` + id + `","type":"batch","status":"running","groups":[{"name":"g","state":"pinned",
		"placement":{"nodes":["aaaa1111-node-a","bbbb2222-node-b"],"gpus":["GPU-a0","GPU-a1","GPU-b0"],
			"shares":["GPU-a0:0","GPU-a0:1","GPU-a1:0","GPU-a1:1","GPU-b0:0","GPU-b0:1"],"reason":"pool for dispatched children: GPU [0 1] of node a; GPU [0] of node b"},
		"allocations":["4f1c2d3e-aaaa-bbbb-cccc-0123456789ab"]}]}`
	gpus := `{"nodes":[
		{"id":"aaaa1111-node-a","name":"a","gpus":[{"index":0,"uuid":"GPU-a0","shares":100,"used":25,"users":[{"alloc_id":"4f1c2d3e-aaaa-bbbb-cccc-0123456789ab","shares":25}]},
			{"index":1,"uuid":"GPU-a1","shares":100}]},
		{"id":"bbbb2222-node-b","name":"b","gpus":[{"index":0,"uuid":"GPU-b0","shares":100}]}]}`
	sched := serveJSON(t, map[string]any{"/v1/jobs/" + id: status, "/v1/gpus": gpus})
	code, out, errOut := run("job", "status", "-scheduler", sched, "-address", nomad, id)
	must.EqOp(t, 0, code, must.Sprint(errOut))
	must.StrContains(t, out, "  group g: pinned, inside its parent infer's pool of GPUs (2 node(s), 3 GPU(s); `gpushare job status infer` shows the pool)\n"+
		"    allocation 4f1c2d3e: node a, GPU 0 (25 shares)\n")
	must.StrNotContains(t, out, "pinned to 2 node(s)")
	must.StrNotContains(t, out, "on node b")
	must.StrNotContains(t, out, "4f1c2d3e-aaaa")
}

// Reasons in job status read as users write their jobs: job IDs
// unescaped, allocation IDs of 8 characters, no "learned:".
func TestJobStatusReasonsForUsers(t *testing.T) {
	status := `{"namespace":"default","id":"train","type":"service","status":"pending","groups":[{"name":"g","state":"pending",
		"lifecycle":"waiting","lifecycle_reason":"behind default/nightly%2Fperiodic-1/g",
		"reason":"would preempt allocation 4f1c2d3e-aaaa-bbbb-cccc-0123456789ab; pairs learned:default/train/g with sm 0.50/bw 0.30"}]}`
	sched := serveJSON(t, map[string]any{"/v1/jobs/train": status})
	code, out, errOut := run("job", "status", "-scheduler", sched, "-address", "http://127.0.0.1:1", "train")
	must.EqOp(t, 0, code, must.Sprint(errOut))
	must.StrContains(t, out, "    lifecycle: waiting: behind default/nightly/periodic-1/g\n")
	must.StrContains(t, out, "    why: would preempt allocation 4f1c2d3e; pairs the profile learned from default/train/g with sm 0.50/bw 0.30\n")
}
