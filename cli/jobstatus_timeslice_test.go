package cli

import (
	"testing"

	"github.com/shoenig/test/must"
)

// A time-sliced group's allocations are said with their quantum, the time
// they were suspended and their turns, after where they run.
func TestJobStatusSaysTimeSlicing(t *testing.T) {
	status := `{"namespace":"default","id":"train","type":"batch","status":"running","groups":[{"name":"g","state":"pinned",
		"placement":{"nodes":["aaaa1111-node-a"],"gpus":["GPU-a0"],"shares":["GPU-a0:0","GPU-a0:1"]},
		"allocations":["a1b2c3d4-0000-4000-8000-000000000001"],
		"timeslice":[{"allocation":"a1b2c3d4-0000-4000-8000-000000000001","quantum_seconds":2,"suspended_seconds":12.5,"turns":7}]}]}`
	gpus := `{"nodes":[{"id":"aaaa1111-node-a","name":"a","gpus":[{"index":0,"uuid":"GPU-a0","shares":100,"used":2,
		"users":[{"alloc_id":"a1b2c3d4-0000-4000-8000-000000000001","shares":2}]}]}]}`
	sched := serveJSON(t, map[string]any{"/v1/jobs/train": status, "/v1/gpus": gpus})
	code, out, errOut := run("job", "status", "-scheduler", sched, "-address", "http://127.0.0.1:1", "train")
	must.EqOp(t, 0, code, must.Sprint(errOut))
	must.StrContains(t, out, `    allocation a1b2c3d4: node a, GPU 0 (2 shares)
    time-sliced: allocation a1b2c3d4 runs 2s per turn; suspended 12.5s in all (its memory kept), 7 turn(s)`)
}
