package cli

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// serveJSON answers each path of bodies with its JSON, others with 404.
func serveJSON(t *testing.T, bodies map[string]any) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, ok := bodies[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		if s, ok := b.(string); ok {
			_, _ = w.Write([]byte(s))
			return
		}
		must.NoError(t, json.NewEncoder(w).Encode(b))
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// The parent of a periodic or parameterized job is never placed and never
// decided: job status says what it is in plain words (and, for a
// parameterized one, whether to dispatch yet), not "template" nor — from a
// scheduler that calls it pending — "waiting for the next decision".
func TestJobStatusOfTemplateJobs(t *testing.T) {
	periodic := &api.Job{ID: ptr("nightly"), Periodic: &api.PeriodicConfig{Spec: ptr("@daily")}}
	dispatch := &api.Job{ID: ptr("infer"), ParameterizedJob: &api.ParameterizedJobConfig{}}
	for _, tc := range []struct {
		name   string
		nomad  map[string]any // "" for no Nomad
		status string
		want   []string
		not    []string
	}{
		{name: "periodic", nomad: map[string]any{"/v1/job/nightly": periodic},
			status: `{"namespace":"default","id":"nightly","type":"batch","status":"running","groups":[{"name":"g","state":"template","lifecycle":"template",
				"reason":"a periodic or parameterized job: Nomad never places it, and gpushare never decides it"}]}`,
			want: []string{"group g: the template of a periodic job: never placed itself; Nomad launches a child job (nightly/periodic-<time>) on its schedule, and gpushare places each child as it comes"}},
		{name: "periodic, as an older scheduler says it", nomad: map[string]any{"/v1/job/nightly": periodic},
			status: `{"namespace":"default","id":"nightly","type":"batch","status":"running","groups":[{"name":"g","state":"pending","reason":"waiting for the next decision"}]}`,
			want:   []string{"group g: the template of a periodic job"},
			not:    []string{"waiting for the next decision", "pending"}},
		{name: "parameterized, pinned to a pool", nomad: map[string]any{"/v1/job/infer": dispatch},
			status: `{"namespace":"default","id":"infer","type":"batch","status":"running","groups":[{"name":"g","state":"template",
				"placement":{"nodes":["n1"],"gpus":["GPU-1"],"shares":["GPU-1:0","GPU-1:1"],"reason":"pool for dispatched children: GPU [0] of node n1"},
				"reason":"a parameterized job pinned to a pool of GPUs"}]}`,
			want: []string{"group g: the template of a parameterized job, pinned to a pool of GPUs: dispatch children now (`nomad job dispatch infer`)",
				"pool: 1 node(s), 1 GPU(s), 2 share(s):\n      on node n1: GPU-1 (2 shares)\n    why: pool for dispatched children"}},
		{name: "parameterized, not pinned yet", nomad: map[string]any{"/v1/job/infer": dispatch},
			status: `{"namespace":"default","id":"infer","type":"batch","status":"running","groups":[{"name":"g","state":"pending","reason":"waiting for the next decision"}]}`,
			want:   []string{"group g: the template of a parameterized job, not pinned to a pool of GPUs yet: do not dispatch yet"},
			not:    []string{"waiting for the next decision"}},
		{name: "without Nomad",
			status: `{"namespace":"default","id":"nightly","type":"batch","status":"running","groups":[{"name":"g","state":"template","reason":"a periodic or parameterized job"}]}`,
			want:   []string{"group g: the template of a periodic or parameterized job: never placed itself; its children are jobs of their own"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := "nightly"
			if tc.nomad["/v1/job/infer"] != nil {
				id = "infer"
			}
			nomad := "http://127.0.0.1:1"
			if tc.nomad != nil {
				nomad = serveJSON(t, tc.nomad)
			}
			sched := serveJSON(t, map[string]any{"/v1/jobs/" + id: tc.status})
			code, out, errOut := run("job", "status", "-scheduler", sched, "-address", nomad, id)
			must.EqOp(t, 0, code, must.Sprint(errOut))
			for _, w := range tc.want {
				must.StrContains(t, out, w)
			}
			for _, n := range tc.not {
				must.StrNotContains(t, out, n)
			}
			must.StrNotContains(t, out, ": template\n")
		})
	}
}

// A group of count 2 pinned to two nodes: job status prints one line per
// node of the pin (named, else its ID's first 8 characters, with its
// GPUs), each allocation's reason on a line of its own, and one line per
// allocation with the node and GPU its shares are on.
func TestJobStatusOneLinePerPlacement(t *testing.T) {
	status := `{"namespace":"default","id":"train","type":"service","status":"running","groups":[{"name":"g","state":"pinned",
		"placement":{"nodes":["aaaa1111-node-a","bbbb2222-node-b"],"gpus":["GPU-a0","GPU-b0"],
			"shares":["GPU-a0:0","GPU-a0:1","GPU-a0:2","GPU-b0:0","GPU-b0:1","GPU-b0:2"],"cell":"gpu 0",
			"reason":"3 shares of GPU 0 on node a; fragmentation +0.10 GPU; alone on its GPU; 3 shares of GPU 0 on node bbbb2222; fragmentation +0.10 GPU; alone on its GPU"},
		"allocations":["alloc-1","alloc-2","alloc-3"]}]}`
	gpus := `{"nodes":[
		{"id":"aaaa1111-node-a","name":"a","gpus":[{"index":0,"uuid":"GPU-a0","shares":100,"used":3,"users":[{"alloc_id":"alloc-1","shares":3}]}]},
		{"id":"bbbb2222-node-b","gpus":[{"index":0,"uuid":"GPU-b0","shares":100,"used":3,"users":[{"alloc_id":"alloc-2","shares":3}]}]}]}`
	sched := serveJSON(t, map[string]any{"/v1/jobs/train": status, "/v1/gpus": gpus})
	code, out, errOut := run("job", "status", "-scheduler", sched, "-address", "http://127.0.0.1:1", "train")
	must.EqOp(t, 0, code, must.Sprint(errOut))
	must.StrContains(t, out, `  group g: pinned
    pinned to 2 node(s), 2 GPU(s), 6 share(s):
      on node a: GPU 0 (3 shares)
      on node bbbb2222: GPU 0 (3 shares)
    why: 3 shares of GPU 0 on node a; fragmentation +0.10 GPU; alone on its GPU
    why: 3 shares of GPU 0 on node bbbb2222; fragmentation +0.10 GPU; alone on its GPU
    allocation alloc-1: node a, GPU 0 (3 shares)
    allocation alloc-2: node bbbb2222, GPU 0 (3 shares)
    allocation alloc-3: holds no shares`)
}

// The run time the queue orders a group by is said, and where it comes
// from: learned from its runs, or declared.
func TestJobStatusSaysTheExpectedRunTime(t *testing.T) {
	for expected, want := range map[string]string{
		`{"seconds":7980,"source":"learned","runs":4}`: "    expected run time: 2h13m0s, learned: the median of its last 4 runs\n",
		`{"seconds":600,"source":"learned","runs":1}`:  "    expected run time: 10m0s, learned: what its last run took\n",
		`{"seconds":5400,"source":"declared"}`:         "    expected run time: 1h30m0s, declared (gpushare.expected_runtime)\n",
	} {
		status := `{"namespace":"default","id":"etl","type":"batch","status":"pending","groups":[{"name":"g","state":"pending",
			"reason":"waits","expected_runtime":` + expected + `}]}`
		sched := serveJSON(t, map[string]any{"/v1/jobs/etl": status, "/v1/gpus": `{"nodes":[]}`})
		code, out, errOut := run("job", "status", "-scheduler", sched, "-address", "http://127.0.0.1:1", "etl")
		must.EqOp(t, 0, code, must.Sprint(errOut))
		must.StrContains(t, out, want)
	}
}
