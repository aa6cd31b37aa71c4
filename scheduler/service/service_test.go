package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/devicefn/fixture"
	"github.com/gpushare/gpushare/fixtures"
	"github.com/gpushare/gpushare/scheduler/config"
	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/gpushare/gpushare/scheduler/nomadattr"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

func ptr[T any](v T) *T { return &v }

// fakeNomad keeps jobs in memory and enforces modify indexes like Nomad.
// Jobs are keyed by ID alone: tests use distinct IDs across namespaces.
type fakeNomad struct {
	// mu guards jobs, index and registers against concurrent pins.
	mu     sync.Mutex
	nodes  []*api.Node
	jobs   map[string]*api.Job
	allocs []*api.Allocation
	index  uint64
	// beforeRegister runs before a registration is checked (a concurrent user edit).
	beforeRegister func()
	registers      int
	// jobReads counts the reads of one job.
	jobReads int
	// registerErr, when set, refuses every registration with it.
	registerErr error
	// hang makes registrations wait until their context ends (a hung Nomad);
	// hangJob, those of one job only.
	hang    bool
	hangJob string
	// submitNow, when set, stamps the SubmitTime of every registration,
	// as Nomad does.
	submitNow func() time.Time
	// tokens are the ACL tokens Nomad knows (nil: ACLs off); see Authorize.
	tokens map[string][]string
	// vars are the Nomad Variables written, by path.
	vars      map[string]map[string]string
	varWrites int
	// beforeList runs before each listing ("nodes", "jobs", "allocs"):
	// a change while the cluster is listed.
	beforeList func(kind string)
	// listed records the namespace of every job and allocation listing.
	listed []string
	// nodeErr fails every read of one node.
	nodeErr error
	// nodeReads counts the reads of one node (jobReads of one job).
	nodeReads int
	// allocReads counts the reads of one allocation.
	allocReads int
	// nodeVers are the nodes' content hashes and modify indexes.
	nodeVers map[string][2]uint64
	// evals are the evaluations FailedEvals lists.
	evals []*api.Evaluation
	// streams, when set, receives every event stream subscription, which
	// the test drives; without it there is no stream.
	streams chan *fakeStream
	// deployments are the jobs' latest deployments, by job ID; PromoteAll
	// marks their canary groups promoted unless promoteErr is set, and
	// records the IDs in promoted.
	deployments map[string]*api.Deployment
	promoteErr  error
	promoted    []string
	// holdErr fails every hold registration; holdUnplaced registers holds
	// Nomad does not place; holdsRegistered counts registrations and
	// holdsStopped lists the holds stopped (hold_test.go).
	holdErr         error
	holdUnplaced    bool
	holdsRegistered int
	holdsStopped    []string
	// namespaces are Nomad's namespaces beyond "default", created at
	// nsIndex; nsErr fails every listing of them (newnamespace_test.go).
	namespaces []string
	nsIndex    uint64
	nsErr      error
	// scaleEvents are the groups' scaling events by job, newest first;
	// scales lists every Scale call and scaleNow stamps their events
	// (elastic_test.go).
	scaleEvents map[string]map[string][]*api.ScalingEvent
	scales      []string
	scaleNow    func() time.Time
}

// fakeStream is one subscription to the fake's event stream.
type fakeStream struct {
	from uint64
	ns   string
	ch   chan *api.Events
}

func (f *fakeNomad) list(kind string) {
	if f.beforeList != nil {
		f.beforeList(kind)
	}
}

// NodeList lists the nodes with a modify index that grows whenever a
// test changed a node since it was last listed or read, as Nomad's does.
func (f *fakeNomad) NodeList(context.Context) ([]*api.NodeListStub, uint64, error) {
	f.list("nodes")
	out := make([]*api.NodeListStub, 0, len(f.nodes))
	for _, n := range f.nodes {
		out = append(out, &api.NodeListStub{ID: n.ID, Name: n.Name, ModifyIndex: f.nodeVersion(n)})
	}
	return out, f.index, nil
}

func (f *fakeNomad) Node(_ context.Context, id string) (*api.Node, error) {
	if f.nodeErr != nil {
		return nil, f.nodeErr
	}
	for _, n := range f.nodes {
		if n.ID == id {
			b, _ := json.Marshal(n)
			var c api.Node
			_ = json.Unmarshal(b, &c)
			c.ModifyIndex = f.nodeVersion(n)
			f.mu.Lock()
			f.nodeReads++
			f.mu.Unlock()
			return &c, nil
		}
	}
	return nil, errors.New("not found")
}

// nodeVersion is a node's modify index in the fake: one more each time
// its content (but for the index) is seen changed.
func (f *fakeNomad) nodeVersion(n *api.Node) uint64 {
	c := *n
	c.ModifyIndex = 0
	b, _ := json.Marshal(&c)
	h := fnv.New64a()
	_, _ = h.Write(b)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.nodeVers == nil {
		f.nodeVers = map[string][2]uint64{}
	}
	if n.ModifyIndex != 0 {
		return n.ModifyIndex // the test's own
	}
	// small indexes: below the listings' index, so that a node removed
	// is removed from the model
	v, ok := f.nodeVers[n.ID]
	switch {
	case !ok:
		v = [2]uint64{h.Sum64(), n.ModifyIndex}
	case v[0] != h.Sum64():
		v = [2]uint64{h.Sum64(), v[1] + 1}
	}
	f.nodeVers[n.ID] = v
	return v[1]
}

func inNamespace(want, ns string) bool {
	return want == "*" || model.JobKey(want, "") == model.JobKey(ns, "")
}

func (f *fakeNomad) JobList(_ context.Context, namespace string) ([]*api.JobListStub, uint64, error) {
	f.list("jobs")
	f.mu.Lock()
	defer f.mu.Unlock()
	f.listed = append(f.listed, "jobs:"+namespace)
	var out []*api.JobListStub
	for _, j := range f.jobs {
		if inNamespace(namespace, nsOf(j)) {
			out = append(out, &api.JobListStub{ID: *j.ID, Namespace: nsOf(j), ModifyIndex: *j.ModifyIndex, JobModifyIndex: *j.JobModifyIndex})
		}
	}
	return out, f.index, nil
}
func (f *fakeNomad) Job(_ context.Context, _, id string) (*api.Job, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.jobReads++
	j, ok := f.jobs[id]
	if !ok {
		return nil, errors.New("not found")
	}
	return copyJob(j)
}
func (f *fakeNomad) Allocs(_ context.Context, namespace string) ([]*api.Allocation, uint64, error) {
	f.list("allocs")
	f.listed = append(f.listed, "allocs:"+namespace)
	var out []*api.Allocation
	for _, a := range f.allocs {
		if inNamespace(namespace, a.Namespace) {
			out = append(out, a)
		}
	}
	return out, f.index, nil
}
func (f *fakeNomad) Alloc(_ context.Context, id string) (*api.Allocation, error) {
	f.mu.Lock()
	f.allocReads++
	f.mu.Unlock()
	for _, a := range f.allocs {
		if a.ID == id {
			return a, nil
		}
	}
	return nil, errors.New("not found")
}
func (f *fakeNomad) FailedEvals(_ context.Context, namespace string) ([]*api.Evaluation, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*api.Evaluation
	for _, e := range f.evals {
		if inNamespace(namespace, e.Namespace) && len(e.FailedTGAllocs) > 0 {
			out = append(out, e)
		}
	}
	return out, nil
}

func (f *fakeNomad) StopAlloc(context.Context, string) error { return nil }

func (f *fakeNomad) LatestDeployment(_ context.Context, _, id string) (*api.Deployment, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.deployments[id], nil
}

func (f *fakeNomad) PromoteAll(_ context.Context, _, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.promoteErr != nil {
		return f.promoteErr
	}
	for _, d := range f.deployments {
		if d.ID != id {
			continue
		}
		for _, st := range d.TaskGroups {
			if st.DesiredCanaries > 0 && st.HealthyAllocs < st.DesiredCanaries {
				return fmt.Errorf("Unexpected response code: 500 (rpc error: 1 error occurred:\n\t* Task group %q has %d/%d healthy allocations)", "g", st.HealthyAllocs, st.DesiredCanaries)
			}
			st.Promoted = true
		}
		f.promoted = append(f.promoted, id)
		return nil
	}
	return errors.New("deployment not found")
}
func (f *fakeNomad) DeviceStats(context.Context, string) ([]*api.DeviceGroupStats, error) {
	return nil, errors.New("no stats in tests")
}
func (f *fakeNomad) Stream(ctx context.Context, index uint64, namespace string) (<-chan *api.Events, error) {
	if f.streams == nil {
		return nil, errors.New("no stream in tests")
	}
	fs := &fakeStream{from: index, ns: namespace, ch: make(chan *api.Events)}
	select {
	case f.streams <- fs:
		return fs.ch, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
func (f *fakeNomad) Client() *api.Client { return nil }

// Authorize: with tokens set, a token may read the namespaces it lists
// ("*": all; "nodes": nodes).
func (f *fakeNomad) Authorize(_ context.Context, token string, scope authScope) error {
	if f.tokens == nil {
		return nil
	}
	allowed, ok := f.tokens[token]
	if !ok {
		return ErrBadToken
	}
	if scope.Namespace == "" && !scope.Nodes {
		return nil // a token Nomad knows
	}
	want := scope.Namespace
	if scope.Nodes {
		want = "nodes"
	}
	if !slices.Contains(allowed, want) && !slices.Contains(allowed, "*") {
		return ErrForbidden
	}
	return nil
}

func (f *fakeNomad) ReadVar(_ context.Context, path string) (map[string]string, error) {
	return maps.Clone(f.vars[path]), nil
}

func (f *fakeNomad) WriteVar(_ context.Context, path string, items map[string]string) error {
	if f.vars == nil {
		f.vars = map[string]map[string]string{}
	}
	f.varWrites++
	if size := varSize(items); size > maxVariableSize {
		return fmt.Errorf("Unexpected response code: 400 (variables are limited to %d bytes, got %d)", maxVariableSize, size)
	}
	if len(items) == 0 {
		delete(f.vars, path)
		return nil
	}
	f.vars[path] = maps.Clone(items)
	return nil
}

// maxVariableSize is Nomad's limit on a Variable's items, keys and values
// (nomad/structs.maxVariableSize, checked on VariableItems.Size).
const maxVariableSize = 64 << 10

func varSize(items map[string]string) int {
	n := 0
	for k, v := range items {
		n += len(k) + len(v)
	}
	return n
}

func (f *fakeNomad) put(j *api.Job) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.putLocked(j)
}

func (f *fakeNomad) putLocked(j *api.Job) {
	f.index++
	j.ModifyIndex, j.JobModifyIndex = ptr(f.index), ptr(f.index)
	if prev, ok := f.jobs[*j.ID]; ok {
		j.Version = ptr(*prev.Version + 1)
		j.CreateIndex = prev.CreateIndex // the same incarnation of the job
	} else {
		j.Version = ptr(uint64(0))
		j.CreateIndex = ptr(f.index)
	}
	c, _ := copyJob(j)
	f.jobs[*j.ID] = c
}

func (f *fakeNomad) Register(ctx context.Context, j *api.Job, index uint64) (uint64, error) {
	if f.hang || (f.hangJob != "" && *j.ID == f.hangJob) {
		<-ctx.Done()
		return 0, ctx.Err()
	}
	f.mu.Lock()
	before := f.beforeRegister
	f.beforeRegister = nil
	f.mu.Unlock()
	if before != nil {
		before()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.registers++
	if f.registerErr != nil {
		return 0, f.registerErr
	}
	if cur := f.jobs[*j.ID]; cur != nil && *cur.JobModifyIndex != index {
		return 0, ErrConflict
	}
	if cur := f.jobs[*j.ID]; cur != nil && cur.Dispatched {
		// Nomad's HTTP API drops Dispatched, and its validation wants it
		// unchanged: a dispatched job is never registered again
		return 0, errors.New("Unexpected response code: 500 (cannot update non-parameterized job to being parameterized)")
	}
	if f.submitNow != nil { // on a copy: Nomad does not change the caller's job
		j, _ = copyJob(j)
		j.SubmitTime = ptr(f.submitNow().UnixNano())
	}
	f.putLocked(j)
	return f.index, nil
}

func dgx1(t *testing.T) *api.Node {
	src, err := fixtures.FS.ReadFile(fixtures.DGX1V100)
	must.NoError(t, err)
	st, err := fixture.Parse("dgx1", src)
	must.NoError(t, err)
	g := devicefn.Groups(&st.Inventory, 100, "mps", nil)[0]
	d := &api.NodeDeviceResource{Vendor: "nvidia", Type: "gpushare", Name: g.Model, Attributes: nomadattr.ToAPI(g.Attributes())}
	return &api.Node{ID: "node-1", Name: "dgx1", Status: "ready", SchedulingEligibility: "eligible",
		NodeResources: &api.NodeResources{Cpu: api.NodeCpuResources{CpuShares: 20000}, Memory: api.NodeMemoryResources{MemoryMB: 65536},
			Devices: []*api.NodeDeviceResource{d}}}
}

func gated(id string, shares uint64) *api.Job {
	return &api.Job{ID: ptr(id), Name: ptr(id), Namespace: ptr("default"), Type: ptr("service"), Meta: map[string]string{},
		TaskGroups: []*api.TaskGroup{{Name: ptr("g"), Count: ptr(1), Constraints: []*api.Constraint{pin.Gate()}, Meta: map[string]string{},
			Tasks: []*api.Task{{Name: "t", Resources: &api.Resources{CPU: ptr(100), MemoryMB: ptr(128),
				Devices: []*api.RequestedDevice{{Name: "nvidia/gpushare", Count: ptr(shares)}}}}}}}}
}

func newTestService(t *testing.T, f *fakeNomad) *Service {
	s, err := newService(config.Default(), hclog.NewNullLogger(), f, func() time.Time { return time.Unix(1000, 0) })
	must.NoError(t, err)
	must.NoError(t, s.watcher.resync(t.Context()))
	return s
}

func TestReconcilePinsGatedGroups(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	f.put(gated("pair", 200))
	f.put(gated("quarter", 25))
	s := newTestService(t, f)
	s.loop.reconcile(t.Context())

	pair := f.jobs["pair"]
	must.SliceEmpty(t, pin.Gated(pair))
	rec, ok := pin.ParseRecord(pair, "g")
	must.True(t, ok)
	must.SliceLen(t, 200, rec.Shares)
	must.Eq(t, "", rec.Reason) // why lives in the scheduler's records, not the meta
	must.StrContains(t, s.loop.answers.placed[decide.Key{Namespace: "default", Job: "pair", Group: "g"}], "NV2 pair")
	q, _ := pin.ParseRecord(f.jobs["quarter"], "g")
	must.SliceLen(t, 25, q.Shares)
	// no share is pinned twice
	for _, sh := range q.Shares {
		for _, other := range rec.Shares {
			must.NotEq(t, sh, other)
		}
	}

	// the API says where it went
	rr := httptest.NewRecorder()
	s.Handler().ServeHTTP(rr, apiRequest("GET", "/v1/jobs/pair", nil))
	must.Eq(t, 200, rr.Code)
	must.StrContains(t, rr.Body.String(), `"state": "pinned"`)
}

func TestReconcileKeepsAConcurrentEdit(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	f.put(gated("edited", 30))
	s := newTestService(t, f)
	f.beforeRegister = func() {
		j, _ := f.Job(t.Context(), "", "edited")
		j.TaskGroups[0].Meta["owner"] = "alice"
		f.put(j)
	}
	s.loop.reconcile(t.Context())
	must.Eq(t, 1, f.registers)
	must.Eq(t, "alice", f.jobs["edited"].TaskGroups[0].Meta["owner"])
	must.Eq(t, []string{"g"}, pin.Gated(f.jobs["edited"])) // not pinned over the edit
	must.MapContainsKey(t, s.loop.answers.pending, key("edited"))

	s.loop.reconcile(t.Context()) // the next pass decides on the new version
	must.SliceEmpty(t, pin.Gated(f.jobs["edited"]))
	must.Eq(t, "alice", f.jobs["edited"].TaskGroups[0].Meta["owner"])
}

func TestReconcileExplainsWhyAGroupWaits(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	running(t, f, "b", []int{0}, 0, "2h")
	big := gated("big", 800)
	big.SubmitTime = ptr(time.Unix(880, 0).UnixNano()) // 2 minutes before the test clock's now
	f.put(big)
	bad := gated("bad", 150)
	f.put(bad)
	s := newTestService(t, f)
	s.loop.reconcile(t.Context())
	must.Eq(t, []string{"g"}, pin.Gated(f.jobs["big"]))
	must.StrContains(t, s.loop.answers.pending[key("big")], "needs 8 free GPUs")
	// where it stands: 2 minutes waited of the 1h default run time
	must.StrContains(t, s.loop.answers.pending[key("big")], "; position 1 of 2 in the queue (response ratio 1.03)")
	rr := httptest.NewRecorder()
	s.Handler().ServeHTTP(rr, apiRequest("GET", "/v1/jobs/big", nil))
	must.StrContains(t, rr.Body.String(), `"state": "pending"`)
	must.NotEq(t, "", s.loop.answers.pending[key("bad")])
	rr = httptest.NewRecorder()
	s.Handler().ServeHTTP(rr, apiRequest("GET", "/metrics", nil))
	must.StrContains(t, rr.Body.String(), "gpushare_oldest_pending_seconds 120")
}

// A group no node could ever hold is refused once, with what to change,
// and not decided again until its job or the cluster's nodes change.
func TestRefusedForGoodUntilTheClusterChanges(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	f.put(gated("huge", 1600))
	s := newTestService(t, f)
	s.loop.reconcile(t.Context())
	must.StrContains(t, s.loop.answers.pending[key("huge")], "needs 16 GPUs of any model on one node; the largest node has 8")
	must.StrContains(t, s.loop.answers.pending[key("huge")], "can never hold it")
	must.MapContainsKey(t, s.loop.refusals.forGood, key("huge"))
	rr := httptest.NewRecorder()
	s.Handler().ServeHTTP(rr, apiRequest("GET", "/v1/groups", nil))
	must.StrContains(t, rr.Body.String(), `"state": "refused"`)
	rr = httptest.NewRecorder()
	s.Handler().ServeHTTP(rr, apiRequest("GET", "/v1/jobs/huge", nil))
	must.StrContains(t, rr.Body.String(), `"state": "refused"`)
	s.loop.reconcile(t.Context())
	s.loop.reconcile(t.Context())
	must.Eq(t, 1.0, counterValue(t, s, `gpushare_decisions_total{outcome="never"}`)) // decided once
	must.StrContains(t, s.loop.answers.pending[key("huge")], "can never hold it")

	// a second DGX-1 joins: still too large for one node, decided again
	n2 := dgx1(t)
	n2.ID, n2.Name = "node-2", "dgx1-b"
	for _, d := range n2.NodeResources.Devices {
		for k, a := range d.Attributes {
			if a.StringVal != nil && strings.HasPrefix(*a.StringVal, "GPU-") {
				d.Attributes[k] = &api.Attribute{StringVal: ptr(strings.Replace(*a.StringVal, "GPU-", "GPU-b", 1))}
			}
		}
	}
	f.nodes = append(f.nodes, n2)
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	must.Eq(t, 2.0, counterValue(t, s, `gpushare_decisions_total{outcome="never"}`))
}

func TestStaleStateAfterPinIsNotRepinned(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	f.put(gated("once", 10))
	s := newTestService(t, f)
	s.loop.reconcile(t.Context())
	s.loop.reconcile(t.Context())
	must.Eq(t, 1, f.registers)
	must.Eq(t, uint64(1), *f.jobs["once"].Version)
}

// A pinned group still waiting for its allocation whose pinned shares were
// taken meanwhile (Nomad placed an ungated job there) is pinned again
// elsewhere; it would otherwise wait forever.
func TestRepinWhenPinnedSharesAreTaken(t *testing.T) {
	f, s, rec := pinnedX(t)
	version := *f.jobs["x"].Version

	// another job's allocation now holds one of x's pinned shares
	f.allocs = append(f.allocs, &api.Allocation{ID: "intruder", Namespace: "default", JobID: "other", TaskGroup: "g", NodeID: "node-1",
		DesiredStatus: "run", ClientStatus: "pending", ModifyIndex: f.index + 1,
		AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{"t": {
			Devices: []*api.AllocatedDeviceResource{{Vendor: "nvidia", Type: "gpushare", DeviceIDs: rec.Shares[:1]}}}}}})
	f.index++
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	must.Greater(t, version, *f.jobs["x"].Version)
	again, _ := pin.ParseRecord(f.jobs["x"], "g")
	must.SliceNotContains(t, again.Shares, rec.Shares[0])

	// with its shares free, a pinned group is never pinned again
	version = *f.jobs["x"].Version
	s.loop.reconcile(t.Context())
	must.Eq(t, version, *f.jobs["x"].Version)
}

// pinnedX is a DGX-1 on which the service pinned job x (25 shares), whose
// allocation does not exist yet.
func pinnedX(t *testing.T) (*fakeNomad, *Service, *pin.Record) {
	t.Helper()
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	f.put(gated("x", 25))
	s := newTestService(t, f)
	s.loop.reconcile(t.Context())
	rec, ok := pin.ParseRecord(f.jobs["x"], "g")
	must.True(t, ok)
	return f, s, rec
}

// copyJob deep-copies a job through JSON.
func copyJob(j *api.Job) (*api.Job, error) {
	b, err := json.Marshal(j)
	if err != nil {
		return nil, err
	}
	var out api.Job
	return &out, json.Unmarshal(b, &out)
}
