package service

import (
	"maps"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/gpushare/gpushare/scheduler/config"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

func TestManagedNamespaces(t *testing.T) {
	all := managedNamespaces([]string{"*"})
	must.True(t, all.has("team-b"))
	must.True(t, all.has(""))
	must.Eq(t, []string{"*"}, all.list())
	must.Eq(t, "*", all.stream())
	must.True(t, managedNamespaces(nil).all)
	must.True(t, managedNamespaces([]string{"team-a", "*"}).all)

	one := managedNamespaces([]string{"team-a", "team-a"})
	must.Eq(t, []string{"team-a"}, one.list())
	must.Eq(t, "*", one.stream()) // allocations of every namespace hold shares
	must.False(t, one.has("team-b"))
	must.False(t, one.has(""))

	two := managedNamespaces([]string{"team-b", "", "team-a"})
	must.Eq(t, []string{"default", "team-a", "team-b"}, two.list())
	must.Eq(t, "*", two.stream())
	must.True(t, two.has("")) // "" is "default"
	must.Eq(t, "default, team-a, team-b", two.String())
}

// teams is a DGX-1 running one job in each of team-a, team-b and team-c.
func teams(t *testing.T) *fakeNomad {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	for i, ns := range []string{"team-a", "team-b", "team-c"} {
		id := ns[len(ns)-1:] + "1" // a1, b1, c1
		running(t, f, id, []int{i}, 0, "1h")
		f.jobs[id].Namespace = ptr(ns)
		f.allocs[i].Namespace = ns
	}
	return f
}

func nsConfig(namespaces ...string) *config.Config {
	cfg := config.Default()
	cfg.Nomad.Namespaces = namespaces
	return cfg
}

// With namespaces = ["team-a"] only team-a's jobs are listed and decided,
// and the API reveals nothing of team-b's; the allocations of every
// namespace are modelled, as the shares they hold are not free.
func TestNamespacesLimitTheModelAndTheAPI(t *testing.T) {
	f := teams(t)
	s, err := newService(nsConfig("team-a"), hclog.NewNullLogger(), f, func() time.Time { return time.Unix(1000, 0) })
	must.NoError(t, err)
	must.NoError(t, s.watcher.resync(t.Context()))
	must.Eq(t, []string{"jobs:team-a", "allocs:*"}, f.listed)
	must.MapLen(t, 1, s.state.Jobs)
	must.MapContainsKey(t, s.state.Jobs, "team-a/a1")
	must.MapLen(t, 3, s.state.Allocs)
	snap := s.state.Snapshot(nil, nil).Snapshot
	for _, id := range []string{"alloc-a1", "alloc-b1", "alloc-c1"} {
		_, held := snap.Alloc(id)
		must.True(t, held, must.Sprintf("%s holds its shares", id))
	}

	get := func(path string) *httptest.ResponseRecorder {
		rr := httptest.NewRecorder()
		s.Handler().ServeHTTP(rr, apiRequest("GET", path, nil))
		return rr
	}
	must.Eq(t, 200, get("/v1/jobs/a1?namespace=team-a").Code)

	// even if team-b's job and allocation were in the model, the API hides them
	s.state.PutJob(f.jobs["b1"])
	rr := get("/v1/jobs/b1?namespace=team-b")
	must.Eq(t, 404, rr.Code)
	must.StrContains(t, rr.Body.String(), "namespace team-b is not managed by this scheduler: it manages team-a")
	must.Eq(t, 404, get("/v1/jobs/b1").Code) // default is not managed either
	gpus := get("/v1/gpus").Body.String()
	must.StrContains(t, gpus, "alloc-a1")
	must.StrNotContains(t, gpus, "alloc-b1")
	must.StrNotContains(t, gpus, `"b1"`)
}

// With two namespaces the watch lists each and subscribes to all of them,
// dropping the events of the others.
func TestWatchFiltersEventsByNamespace(t *testing.T) {
	f := teams(t)
	w := startWatch(t, f, nsConfig("team-c", "team-a"))
	fs := w.next()
	must.Eq(t, "*", fs.ns)
	must.Eq(t, []string{"jobs:team-a", "jobs:team-c", "allocs:*"}, f.listed)
	must.NotNil(t, w.job("team-a/a1"))
	must.NotNil(t, w.job("team-c/c1"))
	must.Nil(t, w.job("team-b/b1"))

	b2, a2 := gated("b2", 10), gated("a2", 10)
	b2.Namespace, a2.Namespace = ptr("team-b"), ptr("team-a")
	b2.ModifyIndex, a2.ModifyIndex = ptr(f.index+1), ptr(f.index+2)
	alloc := &api.Allocation{ID: "alloc-b2", Namespace: "team-b", JobID: "b2", TaskGroup: "g", NodeID: "node-1",
		DesiredStatus: "run", ClientStatus: "complete", ModifyIndex: f.index + 3}
	w.send(fs, jobEvent(t, b2), jobEvent(t, a2), allocEvent(t, alloc))
	must.NotNil(t, w.job("team-a/a2"))
	must.Nil(t, w.job("team-b/b2"))
	must.NotNil(t, w.alloc("alloc-b2")) // its shares are taken, whoever owns it
	w.quiet()
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	must.Eq(t, []string{"team-a/a1", "team-a/a2", "team-c/c1"}, slices.Sorted(maps.Keys(w.s.state.Jobs)))
}

// With one namespace the watch still subscribes to all of them: the
// allocations of other namespaces hold shares too.
func TestWatchSubscribesToAllNamespaces(t *testing.T) {
	w := startWatch(t, teams(t), nsConfig("team-a"))
	must.Eq(t, "*", w.next().ns)
}
