package service

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/gpushare/scheduler/config"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// fuzzCluster is a DGX-1 with a running job (2 GPUs), a gated one and a
// pinned one, and a service that listed it.
func fuzzCluster(t *testing.T) (*Service, *fakeNomad) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	running(t, f, "run", []int{0, 1}, time.Minute, "1h")
	f.put(gated("wait", 25))
	f.put(gated("pinned", 50))
	s, err := newService(config.Default(), hclog.NewNullLogger(), f, func() time.Time { return time.Unix(1000, 0) })
	must.NoError(t, err)
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context()) // pins "wait" and "pinned"
	return s, f
}

func marshal(t testing.TB, v any) string {
	b, err := json.Marshal(v)
	must.NoError(t, err)
	return string(b)
}

// checkModel builds the snapshot the way a decision does and checks its
// invariants, then serves every endpoint from the state.
func checkModel(t *testing.T, s *Service) {
	s.mu.Lock()
	b := s.state.Snapshot(nil, nil)
	if err := b.Snapshot.Check(); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	b = s.state.Snapshot(s.loop.profile, nil)
	if err := b.Snapshot.Check(); err != nil {
		t.Fatalf("snapshot with profiles: %v", err)
	}
	jobs := make([]*api.Job, 0, len(s.state.Jobs))
	for _, j := range s.state.Jobs {
		jobs = append(jobs, j)
	}
	s.mu.Unlock()
	paths := []string{"/v1/gpus", "/v1/groups", "/v1/health"}
	for _, j := range jobs {
		if j.ID != nil && j.Namespace != nil {
			paths = append(paths, "/v1/jobs/"+urlPath(*j.ID)+"?namespace="+urlPath(*j.Namespace))
		}
	}
	for _, p := range paths {
		serve(t, s, "GET", p)
	}
}

// FuzzApplyEvent: an event of any payload under the Job, Allocation and
// Node topics never panics the service, and the model stays consistent:
// the snapshot keeps its invariants, a decision pass and every endpoint
// still work. A Node event's payload is what the fake Nomad then returns
// for the node.
func FuzzApplyEvent(f *testing.F) {
	t0 := &testing.T{}
	node := dgx1(t0)
	job := gated("new", 25)
	job.ModifyIndex, job.JobModifyIndex = ptr(uint64(50)), ptr(uint64(50))
	purged := gated("run", 100)
	alloc := &api.Allocation{ID: "alloc-new", Namespace: "default", JobID: "new", TaskGroup: "g", NodeID: "node-1",
		DesiredStatus: "run", ClientStatus: "running", ModifyIndex: 60,
		AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{"t": {
			Devices: []*api.AllocatedDeviceResource{{Vendor: "nvidia", Type: "gpushare", DeviceIDs: []string{"x:1"}}}}}}}
	for _, s := range []struct {
		topic   uint8
		typ     string
		key     string
		payload string
	}{
		{0, "JobRegistered", "new", `{"Job":` + marshal(f, job) + `}`},
		{0, "JobDeregistered", "run", `{"Job":` + marshal(f, purged) + `,"Deleted":true}`},
		{0, "JobDeregistered", "run", `{"Job":` + marshal(f, purged) + `,"Deleted":false}`},
		{0, "JobRegistered", "x", `{"Job":{"ID":"x","TaskGroups":[null]}}`},
		{0, "JobRegistered", "x", `{"Job":{"ID":"x","TaskGroups":[{"Count":-1}]}}`},
		{0, "JobRegistered", "x", `{"Job":{"ID":"x","TaskGroups":[{"Name":"g","Tasks":[null,{"Resources":{"Devices":[null,{"Name":"nvidia/gpushare","Count":1e30}]}}]}]}}`},
		{0, "JobRegistered", "x", `{"Job":{"ID":"x","Constraints":[null],"TaskGroups":[{"Name":"g","Constraints":[null],"Meta":{"gpushare.placement":"{\"shares\":[\"GPU:1\"]}"}}]}}`},
		{0, "JobRegistered", "x", `{"Job":{"ID":"","Namespace":"","Stop":true}}`},
		{0, "JobRegistered", "x", `{"Job":"not a job"}`},
		{0, "JobDeregistered", "x", `{}`},
		{1, "AllocationUpdated", "alloc-new", `{"Allocation":` + marshal(f, alloc) + `}`},
		{1, "AllocationUpdated", "a", `{"Allocation":{"ID":"a","NodeID":"node-1","AllocatedResources":{"Tasks":{"t":null}}}}`},
		{1, "AllocationUpdated", "a", `{"Allocation":{"ID":"a","NodeID":"node-1","AllocatedResources":{"Tasks":{"t":{"Devices":[null]}}}}}`},
		{1, "AllocationUpdated", "a", `{"Allocation":{"ID":"alloc-run","ClientStatus":"complete","ModifyIndex":1e20}}`},
		{1, "AllocationUpdated", "a", `{"Allocation":{"ID":"a","Job":{"ID":"run"},"TaskGroup":"g","JobID":"run"}}`},
		{1, "AllocationUpdated", "a", `{"Allocation":[]}`},
		{2, "NodeRegistration", "node-1", `{"Node":` + marshal(f, node) + `}`},
		{2, "NodeRegistration", "node-2", `{"Node":{"ID":"node-2","Status":"ready","SchedulingEligibility":"eligible","NodeResources":{"Devices":[null]}}}`},
		{2, "NodeUpdate", "node-1", `{"Node":{"ID":"node-1","Status":"ready","SchedulingEligibility":"eligible"}}`},
		{2, "NodeDeregistration", "node-1", `{}`},
		{3, "Whatever", "", `null`},
	} {
		f.Add(s.topic, s.typ, s.key, uint64(100), []byte(s.payload))
	}
	f.Fuzz(func(t *testing.T, topic uint8, typ, key string, index uint64, payload []byte) {
		var m map[string]any
		if json.Unmarshal(payload, &m) != nil {
			return
		}
		s, fake := fuzzCluster(t)
		topics := []api.Topic{api.TopicJob, api.TopicAllocation, api.TopicNode, "Deployment"}
		e := api.Event{Topic: topics[int(topic)%len(topics)], Type: typ, Key: key, Index: index, Payload: m}
		if e.Topic == api.TopicNode {
			// the fake Nomad returns the node of the payload when it is read
			var p struct{ Node *api.Node }
			if b, err := json.Marshal(m); err == nil && json.Unmarshal(b, &p) == nil && p.Node != nil {
				p.Node.ID = key
				fake.nodes = append([]*api.Node{p.Node}, fake.nodes...)
			}
		}
		_, _ = s.watcher.apply(t.Context(), &api.Events{Index: index, Events: []api.Event{e}}, s.watcher.ns, 0)
		checkModel(t, s)
		s.loop.reconcile(t.Context())
		checkModel(t, s)
	})
}

func urlPath(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "%", "%25"), "?", "%3F")
}

// serve makes one request and checks the answer: never a 5xx but the
// health of a service that has not listed the cluster, and JSON bodies
// parse.
func serve(t *testing.T, s *Service, method, target string) {
	t.Helper()
	rr := httptest.NewRecorder()
	s.Handler().ServeHTTP(rr, apiRequest(method, target, nil))
	if rr.Code >= 500 && !(strings.HasPrefix(target, "/v1/health") && rr.Code == 503) {
		t.Fatalf("%s %s: %d %s", method, target, rr.Code, rr.Body)
	}
	if strings.HasPrefix(rr.Header().Get("Content-Type"), "application/json") && !json.Valid(rr.Body.Bytes()) {
		t.Fatalf("%s %s: body is not JSON: %s", method, target, rr.Body)
	}
}

// FuzzHandler: any method, path and query never panic the HTTP API nor
// answer a 5xx (beyond /v1/health while not synced), and its JSON bodies
// parse.
func FuzzHandler(f *testing.F) {
	for _, s := range []struct{ method, target string }{
		{"GET", "/v1/health"}, {"GET", "/v1/gpus"}, {"GET", "/v1/groups"}, {"GET", "/metrics"},
		{"GET", "/v1/jobs/wait"}, {"GET", "/v1/jobs/run?namespace=default"}, {"GET", "/v1/jobs/run?namespace=*"},
		{"GET", "/v1/jobs/run?namespace=other"}, {"GET", "/v1/jobs/run?namespace=%00&namespace=default"},
		{"GET", "/v1/jobs/"}, {"GET", "/v1/jobs/a/b"}, {"GET", "/v1/jobs/%2e%2e"}, {"GET", "/v1/jobs/..%2f..%2fetc"},
		{"GET", "/v1/jobs/wait?namespace=%zz"}, {"GET", "//v1//gpus"}, {"GET", "/v1/gpus/../health"},
		{"POST", "/v1/jobs/wait"}, {"DELETE", "/v1/groups"}, {"HEAD", "/v1/health"}, {"OPTIONS", "*"},
		{"PUT", "/metrics"}, {"GET", "/"}, {"GET", "/v2"}, {"GET", "/v1/jobs/" + strings.Repeat("a", 5000)},
		{"GET", "/ui"}, {"GET", "/ui/"}, {"GET", "/ui/jobs/wait"}, {"GET", "/ui/jobs/run?namespace=other"},
		{"GET", "/ui/jobs/%2e%2e?namespace=%zz"}, {"GET", "/ui/static/style.css"}, {"GET", "/ui/static/../../v1/gpus"},
		{"GET", "/ui/login"}, {"POST", "/ui/login"}, {"POST", "/ui/logout"}, {"GET", "/v1/preemptions"},
	} {
		f.Add(s.method, s.target, false)
		f.Add(s.method, s.target, true)
	}
	f.Fuzz(func(t *testing.T, method, target string, synced bool) {
		if !strings.HasPrefix(target, "/") {
			target = "/" + target
		}
		s := handlerService(t)
		s.synced = synced
		rr := httptest.NewRecorder()
		req, err := newRequest(method, target)
		if err != nil {
			return // not an HTTP request a server would hand on
		}
		s.Handler().ServeHTTP(rr, req)
		if rr.Code >= 500 && !(rr.Code == 503 && !synced) {
			t.Fatalf("%s %s: %d %s", method, target, rr.Code, rr.Body)
		}
		if strings.HasPrefix(rr.Header().Get("Content-Type"), "application/json") && !json.Valid(rr.Body.Bytes()) {
			t.Fatalf("%s %s: body is not JSON: %s", method, target, rr.Body)
		}
	})
}

var handlerSvc *Service

// handlerService is one service with a cluster, made once: requests only
// read it.
func handlerService(t *testing.T) *Service {
	if handlerSvc == nil {
		handlerSvc, _ = fuzzCluster(t)
		// a refused group and one whose job has gone shows in /v1/groups too
		handlerSvc.loop.answers.pending[key("ghost")] = "no job"
		handlerSvc.mu.Lock()
		j := gated("meta", 10)
		j.Meta[pin.MetaClass] = "vip"
		handlerSvc.state.PutJob(j)
		handlerSvc.mu.Unlock()
	}
	return handlerSvc
}

// newRequest reads the request as a server reads it off the wire.
func newRequest(method, target string) (*http.Request, error) {
	raw := method + " " + target + " HTTP/1.1\r\nHost: gpushare\r\n\r\n"
	req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
	if err != nil {
		return nil, err
	}
	req.RemoteAddr = "192.0.2.1:1234"
	return req, nil
}
