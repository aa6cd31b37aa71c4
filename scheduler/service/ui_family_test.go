package service

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// mapIndexOf is the index of GPU uuid on its node, from the service's map.
func mapIndexOf(t *testing.T, s *Service, uuid string) (string, int) {
	t.Helper()
	m := s.view.gpuMap(func(string) bool { return true })
	for _, n := range m.Nodes {
		for _, g := range n.GPUs {
			if g.UUID == uuid {
				return n.Name, g.Index
			}
		}
	}
	t.Fatalf("GPU %s not in the map %v", uuid, m)
	return "", 0
}

// A child dispatched from a parameterized job carries its parent's pool
// of GPUs as its pin: its page shows where its own allocation runs (its
// node, its GPU and shares), says it is a child dispatched into its
// parent's pool, and does not show the pool's other node and GPU as its
// placement (issue 47 point 8). The parent's page lists its children
// with their states.
func TestUIJobPageOfADispatchedChild(t *testing.T) {
	f, s, rec := placedFirst(t, gatedParam("infer"), twoDGX1(t)...)
	must.Len(t, 2, rec.GPUs)
	running := *f.dispatch(t, "infer", "infer/dispatch-1764000000-00000001").ID
	waiting := *f.dispatch(t, "infer", "infer/dispatch-1764000100-00000002").ID
	f.runningOn(running, "4f1c2d3e-aaaa-bbbb-cccc-0123456789ab", rec.Shares[:25]) // on node-1's pool GPU
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())

	rr := uiServe(s, "GET", "/ui/jobs/infer%2Fdispatch-1764000000-00000001?namespace=default", "", nil)
	must.EqOp(t, http.StatusOK, rr.Code, must.Sprint(rr.Body.String()))
	body := rr.Body.String()
	must.StrContains(t, body, `A child dispatched from the parameterized job <a href="/ui/jobs/infer?namespace=default">infer</a> into its pool of GPUs`)
	node, index := mapIndexOf(t, s, rec.GPUs[0])
	must.EqOp(t, "dgx1-node-1", node)
	must.StrContains(t, body, fmt.Sprintf(`allocation <span title="allocation 4f1c2d3e-aaaa-bbbb-cccc-0123456789ab">4f1c2d3e</span> on node dgx1-node-1: `+
		`<span class="gpu-name" title="%s">GPU %d</span> (25 shares)`, rec.GPUs[0], index))
	must.StrContains(t, body, "pool of GPUs (2 nodes, 2 GPUs, shown on its page)")
	// the pool's other node and GPU are not its placement
	must.StrNotContains(t, body, "dgx1-node-2")
	must.StrNotContains(t, body, rec.GPUs[1])
	must.StrNotContains(t, body, "200 shares")
	must.StrNotContains(t, body, "<dt>Why there</dt>")

	rr = uiServe(s, "GET", "/ui/jobs/infer%2Fdispatch-1764000100-00000002?namespace=default", "", nil)
	must.EqOp(t, http.StatusOK, rr.Code)
	must.StrContains(t, rr.Body.String(), "<dt>Why it waits</dt><dd class=\"reason\">a dispatched child: Nomad places its 1 allocation(s) inside its parent&#39;s pool of GPUs")
	must.StrNotContains(t, rr.Body.String(), "dgx1-node")

	// the parent lists both, newest first, each linked to its page
	rr = uiServe(s, "GET", "/ui/jobs/infer?namespace=default", "", nil)
	must.EqOp(t, http.StatusOK, rr.Code)
	body = rr.Body.String()
	must.StrContains(t, body, "<h2>Children</h2>")
	must.StrContains(t, body, "2 children, newest first: each is a job of its own, placed inside this job's pool.")
	first := strings.Index(body, `<a href="/ui/jobs/infer%2Fdispatch-1764000100-00000002?namespace=default">`+waiting+`</a>`)
	second := strings.Index(body, `<a href="/ui/jobs/infer%2Fdispatch-1764000000-00000001?namespace=default">`+running+`</a>`)
	must.Positive(t, first, must.Sprint(body))
	must.Greater(t, first, second, must.Sprint("newest first"))
	must.StrContains(t, body[second:], "<td>1 running</td>")
	must.StrNotContains(t, body, "A child dispatched from")

	// its run ends: its page still says where it ran, not that it waits
	f.mu.Lock()
	f.index++
	for _, a := range f.allocs {
		if a.JobID == running {
			a.ClientStatus, a.ModifyIndex = "complete", f.index
		}
	}
	f.mu.Unlock()
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	body = uiServe(s, "GET", "/ui/jobs/infer%2Fdispatch-1764000000-00000001?namespace=default", "", nil).Body.String()
	must.StrContains(t, body, fmt.Sprintf(`<span class="gpu-name" title="%s">GPU %d</span> (25 shares) <span class="quiet">(complete)</span>`, rec.GPUs[0], index))
	must.StrNotContains(t, body, "no allocation yet")
}

// A periodic parent's page lists the children Nomad launched from it,
// newest first, with their states, allocations and why one waits; a
// launched child's page names its parent; a parent with no child says so.
func TestUIJobPageListsPeriodicChildren(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	periodic := gated("nightly", 100)
	periodic.Type, periodic.Periodic = ptr("batch"), &api.PeriodicConfig{Enabled: ptr(true), Spec: ptr("@daily")}
	f.put(periodic)
	for i, c := range []struct {
		id     string
		shares uint64
	}{{"nightly/periodic-1700000000", 100}, {"nightly/periodic-1700086400", 1600}} { // the second never fits
		child := gated(c.id, c.shares)
		child.Type, child.Status, child.SubmitTime = ptr("batch"), ptr("pending"), ptr(int64(i+1))
		if i == 1 {
			// Nomad's HTTP API drops ParentID when a job is registered
			// again, as gpushare registers each child it pins: the first
			// child has none, and is known by its ID
			child.ParentID = ptr("nightly")
		}
		f.put(child)
	}
	f.put(gated("nightly/other", 25))         // a prefix only, not a child
	f.put(gated("nightly/periodic-soon", 25)) // nor is this
	f.put(gated("daily", 25))
	f.put(gated("daily/periodic-1700000000", 25)) // daily is no periodic job
	s := withConfig(t, f, nil)
	rec, ok := pin.ParseRecord(f.jobs["nightly/periodic-1700000000"], "g")
	must.True(t, ok)
	f.runningOn("nightly/periodic-1700000000", "alloc-first", rec.Shares)
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())

	rr := uiServe(s, "GET", "/ui/jobs/nightly?namespace=default", "", nil)
	must.EqOp(t, http.StatusOK, rr.Code, must.Sprint(rr.Body.String()))
	body := rr.Body.String()
	must.StrContains(t, body, "2 children, newest first: each is a job of its own, placed by gpushare as it comes.")
	newer := strings.Index(body, `<a href="/ui/jobs/nightly%2Fperiodic-1700086400?namespace=default">nightly/periodic-1700086400</a>`)
	older := strings.Index(body, `<a href="/ui/jobs/nightly%2Fperiodic-1700000000?namespace=default">nightly/periodic-1700000000</a>`)
	must.Positive(t, newer, must.Sprint(body))
	must.Greater(t, newer, older)
	must.StrContains(t, body[older:], "<td>1 running</td>")
	must.StrContains(t, body[newer:older], "<td>none<br><span class=\"reason\">waits: ")
	must.StrNotContains(t, body, "nightly/other")
	must.StrNotContains(t, body, "nightly/periodic-soon")
	// the reason reads as users write jobs: no escaped IDs
	must.StrNotContains(t, body, "%2Fperiodic-1700086400/g")

	rr = uiServe(s, "GET", "/ui/jobs/nightly%2Fperiodic-1700000000?namespace=default", "", nil)
	must.EqOp(t, http.StatusOK, rr.Code)
	must.StrContains(t, rr.Body.String(), `A child launched by <a href="/ui/jobs/nightly?namespace=default">nightly</a>.`)
	must.StrNotContains(t, rr.Body.String(), "<h2>Children</h2>")
	rr = uiServe(s, "GET", "/ui/jobs/daily%2Fperiodic-1700000000?namespace=default", "", nil)
	must.EqOp(t, http.StatusOK, rr.Code)
	must.StrNotContains(t, rr.Body.String(), "A child launched by")

	lonely := gated("weekly", 100)
	lonely.Type, lonely.Periodic = ptr("batch"), &api.PeriodicConfig{Enabled: ptr(true), Spec: ptr("@weekly")}
	f.put(lonely)
	must.NoError(t, s.watcher.resync(t.Context()))
	rr = uiServe(s, "GET", "/ui/jobs/weekly?namespace=default", "", nil)
	must.EqOp(t, http.StatusOK, rr.Code)
	must.StrContains(t, rr.Body.String(), "No child in Nomad now: none launched yet, or garbage-collected.")
}
