package webui

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/gpushare/scheduler/gpumap"
	"github.com/shoenig/test/must"
)

func render(t *testing.T, page any) string {
	t.Helper()
	rr := httptest.NewRecorder()
	must.NoError(t, Render(rr, http.StatusOK, page))
	must.EqOp(t, http.StatusOK, rr.Code)
	return rr.Body.String()
}

// A GPU is a bar of its shares: each allocation's in its job's colour,
// other namespaces' hatched and anonymous, the free ones last.
func TestSegments(t *testing.T) {
	g := gpumap.GPU{Shares: 100, Used: 85, Users: []gpumap.Usage{
		{Shares: 10, Other: true},
		{AllocID: "0123456789", Namespace: "ml", Job: "train", Group: "g", Shares: 25},
		{AllocID: "abc", Namespace: "ml", Job: "tiny", Group: "g", Shares: 50},
	}}
	segs := segments(g, Links{})
	must.SliceLen(t, 4, segs)
	must.EqOp(t, "job", segs[0].Kind)
	must.EqOp(t, "train", segs[0].Label)
	must.EqOp(t, "/ui/jobs/train?namespace=ml", segs[0].Href)
	must.StrContains(t, string(segs[0].Style), "width:25.000%;background:hsl(")
	must.EqOp(t, "other", segs[2].Kind)
	must.EqOp(t, "", segs[2].Href)
	must.EqOp(t, "width:10.000%", string(segs[2].Style))
	must.EqOp(t, "free", segs[3].Kind)
	must.EqOp(t, "width:15.000%", string(segs[3].Style))
	// the same job has the same colour on every page
	must.EqOp(t, colour("ml", "train"), colour("ml", "train"))
	must.NotEq(t, colour("ml", "train"), colour("ml", "tiny"))
}

func TestOverviewEscapesWhatUsersNamed(t *testing.T) {
	evil := `"><script>alert(1)</script>`
	m := &gpumap.Map{Nodes: []gpumap.Node{{ID: "n1", Name: evil, Status: "ready", Model: "H100", GPUs: []gpumap.GPU{
		{Shares: 100, Used: 50, Healthy: true, Users: []gpumap.Usage{{AllocID: "a1", Namespace: evil, Job: evil, Group: evil, Shares: 50}}},
	}}}}
	body := render(t, Overview{Map: m, Refresh: 15, Now: time.Unix(0, 0), Links: Links{NomadUI: "https://nomad.example.com"},
		Waiting: []Group{{Namespace: "default", Job: evil, Group: "g", Reason: evil, Position: 1, Of: 1}}})
	must.StrNotContains(t, body, "<script>alert")
	must.StrContains(t, body, "&lt;script&gt;alert(1)&lt;/script&gt;")
	// in links too: the job's ID is a path segment, escaped
	must.StrContains(t, body, `href="/ui/jobs/%22%3E%3Cscript%3Ealert%281%29%3C%2Fscript%3E?namespace=`)
	must.StrContains(t, body, `<script src="/ui/static/refresh.js" defer></script>`) // ours only
	must.EqOp(t, 1, strings.Count(body, "<script"))
}

func TestOverviewWithoutAMap(t *testing.T) {
	body := render(t, Overview{MapNote: "This token may not read nodes.", Now: time.Unix(0, 0)})
	must.StrContains(t, body, "This token may not read nodes.")
	must.StrNotContains(t, body, "No node has gpushare devices")
	body = render(t, Overview{Map: &gpumap.Map{}, Now: time.Unix(0, 0)})
	must.StrContains(t, body, "No node has gpushare devices")
	must.StrNotContains(t, body, `http-equiv="refresh"`) // no period, no refresh
}

func TestRenderRefusesAnUnknownPage(t *testing.T) {
	rr := httptest.NewRecorder()
	must.Error(t, Render(rr, http.StatusOK, 42))
}

func TestLinks(t *testing.T) {
	l := Links{NomadUI: "https://nomad.example.com:4646/"}
	must.EqOp(t, "https://nomad.example.com:4646/ui/jobs/a%2Fb@team-a", l.NomadJob("team-a", "a/b"))
	must.EqOp(t, "https://nomad.example.com:4646/ui/allocations/x", l.NomadAlloc("x"))
	must.EqOp(t, "https://nomad.example.com:4646/ui/clients/n", l.NomadNode("n"))
	must.EqOp(t, "/ui/jobs/a%2Fb?namespace=team+a", l.Job("team a", "a/b"))
	must.EqOp(t, "", Links{}.NomadJob("default", "x"))
}

func TestAgo(t *testing.T) {
	now := time.Unix(100000, 0)
	for _, c := range []struct {
		at   time.Time
		want string
	}{
		{now.Add(-42 * time.Second), "42s ago"},
		{now.Add(-5 * time.Minute), "5m ago"},
		{now.Add(-150 * time.Minute), "2h30m ago"},
		{now.Add(3 * time.Second), "0s ago"},
		{time.Time{}, ""},
		{time.Unix(0, 0), "27h46m ago"},
		{now.Add(-72 * time.Hour), "1969-12-30 03:46 UTC"},
	} {
		must.EqOp(t, c.want, ago(now, c.at))
	}
}

func TestSummaryCountsSharesNotMIGSlices(t *testing.T) {
	s := summarize(&gpumap.Map{Nodes: []gpumap.Node{
		{Sharing: "mps", GPUs: []gpumap.GPU{{Shares: 100, Used: 25, Healthy: true}}},
		{Sharing: "mig", GPUs: []gpumap.GPU{{Shares: 7, Used: 4, Healthy: true}}},
	}})
	must.Eq(t, summary{Nodes: 2, GPUs: 2, Used: 25, Shares: 100}, s)
}

// The page shows each MIG instance under its GPU: a bar of its shares when
// shared further, its slices when offered whole; shared instances count
// in shares.
func TestOverviewShowsMIGInstances(t *testing.T) {
	m := &gpumap.Map{Nodes: []gpumap.Node{
		{ID: "n1", Name: "a100", Status: "ready", Model: "A100", Sharing: "mps", MIG: "shared", GPUs: []gpumap.GPU{{Shares: 56, Used: 20, Healthy: true,
			Users: []gpumap.Usage{{AllocID: "a1", Namespace: "ml", Job: "infer", Group: "g", Shares: 20}},
			MIG: []gpumap.Instance{
				{UUID: "MIG-3", Profile: "3g.20gb", Slices: 3, Healthy: true, Shares: 42, Used: 20, Users: []gpumap.Usage{{AllocID: "a1", Namespace: "ml", Job: "infer", Group: "g", Shares: 20}}},
				{UUID: "MIG-1", Profile: "1g.5gb", Slices: 1, Healthy: false, Health: "XID 79", Shares: 14},
			}}}},
		{ID: "n2", Name: "b100", Status: "ready", Model: "A100", Sharing: "mig", MIG: "whole", GPUs: []gpumap.GPU{{Shares: 7, Used: 3, Healthy: true,
			MIG: []gpumap.Instance{{UUID: "MIG-9", Profile: "3g.20gb", Slices: 3, Healthy: true, Users: []gpumap.Usage{{AllocID: "b1", Namespace: "ml", Job: "big", Group: "g", Shares: 3}}}}}}},
	}}
	body := render(t, Overview{Map: m, Now: time.Unix(0, 0)})
	must.StrContains(t, body, `<span class="name" title="MIG-3">MIG 3g.20gb</span>`)
	must.StrContains(t, body, `aria-label="20 of 42 shares used"`)
	must.StrContains(t, body, `<span class="count">20/42</span>`)
	must.StrContains(t, body, `<span class="count">0/14</span>`)
	must.StrContains(t, body, `unhealthy: XID 79`)
	must.StrContains(t, body, `width:47.619%`) // 20 of 42
	must.StrContains(t, body, `3 slices, whole · in use`)
	must.Eq(t, summary{Nodes: 2, GPUs: 2, Used: 20, Shares: 56}, summarize(m))
	nv := nodeViews(m, Links{}, History{}, time.Time{})
	must.SliceLen(t, 2, nv[0].GPUs[0].Instances)
	must.SliceLen(t, 2, nv[0].GPUs[0].Instances[0].Segments)
}

// A node sharing with MPS whose plugin reports its MPS daemon missing is
// not shown "sharing mps": the page says the daemon is missing and tasks
// are time-sliced, on the node and on each of its GPUs.
func TestPageSaysMPSDaemonMissing(t *testing.T) {
	m := &gpumap.Map{Nodes: []gpumap.Node{
		{ID: "n1", Name: "gpu-a", Status: "ready", Model: "H100", Sharing: "mps", MPSDaemon: "not found at /tmp/nvidia-mps",
			GPUs: []gpumap.GPU{{Shares: 100, Healthy: true}}},
		{ID: "n2", Name: "gpu-b", Status: "ready", Model: "H100", Sharing: "mps", MPSDaemon: "running",
			GPUs: []gpumap.GPU{{Shares: 100, Healthy: true}}},
	}}
	body := render(t, Overview{Map: m, Now: time.Unix(0, 0)})
	must.StrContains(t, body, "sharing: MPS daemon missing (not found at /tmp/nvidia-mps), tasks time-sliced")
	must.StrContains(t, body, "time-sliced, no MPS")
	must.EqOp(t, 1, strings.Count(body, "sharing mps")) // gpu-b only
	must.EqOp(t, 1, strings.Count(body, "time-sliced, no MPS"))
}

// Names where names would do: the node's name (its ID in a title), "GPU
// 2" (its UUID in a title), 8-character allocation IDs beside their
// job/group; on a job's page its GPUs by index and node, not UUID.
func TestPageShowsNamesNotIDs(t *testing.T) {
	const node = "5f0c1e2d-aaaa-bbbb-cccc-000000000001"
	const uuid = "GPU-d1000000-0000-4000-8000-000000000002"
	const alloc = "0123456789abcdef-0000-1111-2222"
	m := &gpumap.Map{Nodes: []gpumap.Node{{ID: node, Name: "gpu-a", Status: "ready", Model: "H100", Sharing: "mps",
		GPUs: []gpumap.GPU{{Index: 2, UUID: uuid, Shares: 100, Used: 50, Healthy: true,
			Users: []gpumap.Usage{{AllocID: alloc, Namespace: "ml", Job: "train", Group: "workers", Shares: 50}}}}}}}
	body := render(t, Overview{Map: m, Now: time.Unix(0, 0)})
	must.StrContains(t, body, `<h3 title="node `+node+`">gpu-a`)
	must.StrContains(t, body, `<span class="name" title="`+uuid+`">GPU 2</span>`)
	must.StrContains(t, body, `/workers <span class="quiet">ml</span> · 50 shares · <span class="quiet">01234567</span>`)
	must.EqOp(t, 1, strings.Count(body, uuid)) // in the title only
	must.EqOp(t, 1, strings.Count(body, node)) // in the title only
	must.StrNotContains(t, body, alloc)

	job := Job{Namespace: "ml", ID: "train", Now: time.Unix(0, 0), GPUNames: GPUNamesOf(m), Groups: []JobGroup{
		{Name: "workers", State: "pinned", Nodes: []string{"gpu-a"}, GPUs: []string{uuid, "GPU-ffffffff-0000-4000-8000-000000000009"}, Shares: 50, Allocs: []string{alloc}}}}
	body = render(t, job)
	must.StrContains(t, body, `<span class="gpu-name" title="`+uuid+`">GPU 2 on gpu-a</span>`)
	must.StrContains(t, body, `title="GPU-ffffffff-0000-4000-8000-000000000009">GPU-ffffffff</span>`) // not in the map: shortened
	must.StrContains(t, body, `<span title="allocation `+alloc+`">01234567</span>`)
}

// A group's expected run time is on its page, with where it comes from.
func TestPageSaysTheExpectedRunTime(t *testing.T) {
	job := Job{Namespace: "ml", ID: "etl", Now: time.Unix(0, 0), Groups: []JobGroup{
		{Name: "g", State: "pending", Reason: "waits", Expected: "2h13m0s, learned: the median of its last 4 runs"},
		{Name: "h", State: "pending", Reason: "waits"}}}
	body := render(t, job)
	must.StrContains(t, body, "<dt>Expected run time</dt><dd>2h13m0s, learned: the median of its last 4 runs</dd>")
	must.EqOp(t, 1, strings.Count(body, "Expected run time"), must.Sprint("none for a group without one"))
}
