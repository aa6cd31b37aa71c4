package service

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/scheduler/config"
	"github.com/gpushare/gpushare/scheduler/gpumap"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// fraction runs job id of namespace ns on shares [from, to) of the
// DGX-1's GPU gpu.
func fraction(t *testing.T, f *fakeNomad, ns, id string, gpu, from, to int) {
	t.Helper()
	job := gated(id, uint64(to-from))
	job.Namespace = ptr(ns)
	job.TaskGroups[0].Constraints = nil // placed already
	f.put(job)
	node, err := model.NodeOf(f.nodes[0])
	must.NoError(t, err)
	var shares []string
	for k := from; k < to; k++ {
		shares = append(shares, devicefn.ShareID{UUID: node.GPUs[gpu].UUID, Index: k}.String())
	}
	f.allocs = append(f.allocs, &api.Allocation{ID: "alloc-" + id, Namespace: ns, JobID: id, TaskGroup: "g", NodeID: node.ID,
		DesiredStatus: "run", ClientStatus: "running",
		AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{"t": {
			Cpu: api.AllocatedCpuResources{CpuShares: 100}, Memory: api.AllocatedMemoryResources{MemoryMB: 128},
			Devices: []*api.AllocatedDeviceResource{{Vendor: "nvidia", Type: "gpushare", DeviceIDs: shares}},
		}}}})
}

// uiServe sends one request to the service's handler, with the token in
// the page's cookie when set.
func uiServe(s *Service, method, path, cookie string, form url.Values) *httptest.ResponseRecorder {
	var req *http.Request
	if form != nil {
		req = apiRequest(method, path, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	} else {
		req = apiRequest(method, path, nil)
	}
	if cookie != "" {
		req.AddCookie(&http.Cookie{Name: tokenCookie, Value: cookie})
	}
	rr := httptest.NewRecorder()
	s.Handler().ServeHTTP(rr, req)
	return rr
}

// The page shows each GPU as a bar of its shares by job, the queue with
// each group's reason and place, and escapes what users named.
func TestUIShowsTheMapAndTheQueue(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	fraction(t, f, "default", `train<script>alert(1)</script>`, 0, 0, 25)
	fraction(t, f, "default", "infer", 0, 25, 75)
	running(t, f, "whole", []int{1, 2, 3, 4, 5, 6, 7}, 0, "2h")
	f.put(gated("big", 800)) // the DGX-1's 8 GPUs: waits until they are free
	f.put(gated("quarter", 25))
	s := withConfig(t, f, func(c *config.Config) { c.Nomad.UIAddress = "https://nomad.example.com" })

	rr := uiServe(s, "GET", "/", "", nil)
	must.EqOp(t, http.StatusFound, rr.Code)
	must.EqOp(t, "/ui", rr.Header().Get("Location"))

	rr = uiServe(s, "GET", "/ui", "", nil)
	must.EqOp(t, http.StatusOK, rr.Code, must.Sprint(rr.Body.String()))
	body := rr.Body.String()
	must.StrContains(t, rr.Header().Get("Content-Type"), "text/html")
	must.StrContains(t, rr.Header().Get("Content-Security-Policy"), "script-src 'self'")
	must.StrContains(t, body, `<meta http-equiv="refresh" content="15">`)
	must.StrContains(t, body, "dgx1")
	must.StrContains(t, body, "75/100")                                                   // GPU0: two fractions
	must.StrContains(t, body, `title="default/infer/g: 50 shares (allocation alloc-in)"`) // its bar, by job
	must.StrContains(t, body, `href="/ui/jobs/infer?namespace=default"`)                  // our job page
	must.StrContains(t, body, `href="https://nomad.example.com/ui/jobs/infer@default"`)   // Nomad's
	must.StrContains(t, body, "train&lt;script&gt;alert(1)&lt;/script&gt;")               // escaped
	must.StrNotContains(t, body, "<script>alert")
	must.StrContains(t, body, "<td class=\"pos\">1 of 2</td>")
	must.StrContains(t, body, `<a href="/ui/jobs/big?namespace=default">big</a>/g`)
	must.StrContains(t, body, s.loop.answers.pending[key("big")])
	must.StrContains(t, body, "position 1 of 2") // the queue this pass decided: big, then quarter (placed)

	// /v1/groups says the place too
	var groups []Waiting
	must.NoError(t, json.Unmarshal(uiServe(s, "GET", "/v1/groups", "", nil).Body.Bytes(), &groups))
	must.SliceLen(t, 1, groups)
	must.EqOp(t, 1, groups[0].Position)
	must.EqOp(t, 2, groups[0].Of)

	// the job's page
	rr = uiServe(s, "GET", "/ui/jobs/big?namespace=default", "", nil)
	must.EqOp(t, http.StatusOK, rr.Code)
	must.StrContains(t, rr.Body.String(), "Why it waits")
	must.StrContains(t, rr.Body.String(), "position 1 of 2")
	must.StrContains(t, rr.Body.String(), `href="https://nomad.example.com/ui/jobs/big@default"`)
	rr = uiServe(s, "GET", "/ui/jobs/quarter", "", nil)
	must.EqOp(t, http.StatusOK, rr.Code)
	must.StrContains(t, rr.Body.String(), `<span class="badge pinned">pinned</span>`)
	// its GPU by index and node, the UUID in a title (issue 47 point 12)
	must.StrContains(t, rr.Body.String(), `node dgx1; 1 GPU (<span class="gpu-name" title="GPU-`)
	must.StrContains(t, rr.Body.String(), `">GPU 0 on dgx1</span>)`)
	must.StrContains(t, rr.Body.String(), "25 shares")
	slash := gated("a/b", 25)
	slash.TaskGroups[0].Name = ptr("c/d")
	f.put(slash)
	must.NoError(t, s.watcher.resync(t.Context()))
	rr = uiServe(s, "GET", "/ui/jobs/a%2Fb?namespace=default", "", nil)
	must.EqOp(t, http.StatusOK, rr.Code, must.Sprint(rr.Body.String()))
	must.StrContains(t, rr.Body.String(), "<h2>c/d")
	rr = uiServe(s, "GET", "/ui/jobs/nope", "", nil)
	must.EqOp(t, http.StatusNotFound, rr.Code)
	must.StrContains(t, rr.Body.String(), "No job nope in namespace default")

	// the stylesheet and the script are served
	must.EqOp(t, http.StatusOK, uiServe(s, "GET", "/ui/static/style.css", "", nil).Code)
	must.EqOp(t, http.StatusOK, uiServe(s, "GET", "/ui/static/refresh.js", "", nil).Code)
}

func TestUIWithZeroNodes(t *testing.T) {
	f := &fakeNomad{jobs: map[string]*api.Job{}}
	s := withConfig(t, f, nil)
	rr := uiServe(s, "GET", "/ui", "", nil)
	must.EqOp(t, http.StatusOK, rr.Code, must.Sprint(rr.Body.String()))
	must.StrContains(t, rr.Body.String(), "No node has gpushare devices")
	must.StrContains(t, rr.Body.String(), "No group waits for gpushare")
}

// A token sees the jobs, groups and allocations of the namespaces it may
// read, on the page and in /v1/gpus; another namespace's shares show as
// used, not by whom.
func TestUIAndGPUMapShowOnlyReadableNamespaces(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{},
		tokens: map[string][]string{"a": {"team-a", "nodes"}, "b": {"team-b", "nodes"}, "b-only": {"team-b"}}}
	fraction(t, f, "team-a", "secret-train", 0, 0, 40)
	wait := gated("secret-wait", 1600) // never fits
	wait.Namespace = ptr("team-a")
	f.put(wait)
	fraction(t, f, "team-b", "bees", 0, 40, 60)
	s := withConfig(t, f, func(c *config.Config) { c.HTTPRequireToken = ptr(true) })
	s.loop.intro.rec.noteUnpaired(model.AllocKey(f.allocs[0]), "secret-reason", s.loop.now())

	for _, c := range []struct {
		token string
		sees  bool
	}{{"a", true}, {"b", false}} {
		page := uiServe(s, "GET", "/ui", c.token, nil)
		must.EqOp(t, http.StatusOK, page.Code, must.Sprint(page.Body.String()))
		req := apiRequest("GET", "/v1/gpus", nil)
		req.Header.Set("X-Nomad-Token", c.token)
		gpus := httptest.NewRecorder()
		s.Handler().ServeHTTP(gpus, req)
		must.EqOp(t, http.StatusOK, gpus.Code)
		for body, secrets := range map[string][]string{
			page.Body.String(): {"secret-train", "alloc-se", "secret-wait", "secret-reason"},
			gpus.Body.String(): {"secret-train", "alloc-secret-train", "team-a"},
		} {
			for _, secret := range secrets {
				if c.sees {
					must.StrContains(t, body, secret, must.Sprintf("token %s", c.token))
				} else {
					must.StrNotContains(t, body, secret, must.Sprintf("token %s", c.token))
				}
			}
		}
		var m gpumap.Map
		must.NoError(t, json.Unmarshal(gpus.Body.Bytes(), &m))
		g := m.Nodes[0].GPUs[0]
		must.EqOp(t, 60, g.Used) // every namespace's shares are used
		must.SliceLen(t, 2, g.Users)
		if !c.sees {
			must.Eq(t, gpumap.Usage{Shares: 40, Other: true}, g.Users[1])
			must.StrContains(t, page.Body.String(), "40 shares used by another namespace")
			must.StrContains(t, page.Body.String(), "bees")
		}
	}

	// a token that may not read nodes sees its queue, not the map
	page := uiServe(s, "GET", "/ui", "b-only", nil)
	must.EqOp(t, http.StatusOK, page.Code)
	must.StrContains(t, page.Body.String(), "may not read nodes")
	// nor another namespace's job page
	page = uiServe(s, "GET", "/ui/jobs/secret-wait?namespace=team-a", "b", nil)
	must.EqOp(t, http.StatusForbidden, page.Code)
	must.StrContains(t, page.Body.String(), "this ACL token may not read it: it needs read-job in namespace team-a")
	must.StrNotContains(t, page.Body.String(), "1600")
}

// With http_require_token a browser signs in with the token form: the
// token is checked with Nomad and kept in an HttpOnly, SameSite=Strict
// cookie that the page and the API read; signing out drops it.
func TestUITokenForm(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{},
		tokens: map[string][]string{"a": {"team-a"}}}
	s := withConfig(t, f, func(c *config.Config) { c.HTTPRequireToken = ptr(true) })

	rr := uiServe(s, "GET", "/ui", "", nil)
	must.EqOp(t, http.StatusUnauthorized, rr.Code)
	must.StrContains(t, rr.Body.String(), `<form method="post" action="/ui/login">`)

	rr = uiServe(s, "POST", "/ui/login", "", url.Values{"token": {"bogus"}})
	must.EqOp(t, http.StatusUnauthorized, rr.Code)
	must.StrContains(t, rr.Body.String(), "Nomad does not know this token")
	must.SliceEmpty(t, rr.Result().Cookies())

	rr = uiServe(s, "POST", "/ui/login", "", url.Values{"token": {"a\"; x=y"}})
	must.EqOp(t, http.StatusBadRequest, rr.Code)

	rr = uiServe(s, "POST", "/ui/login", "", url.Values{"token": {"a"}})
	must.EqOp(t, http.StatusSeeOther, rr.Code)
	cookies := rr.Result().Cookies()
	must.SliceLen(t, 1, cookies)
	c := cookies[0]
	must.EqOp(t, tokenCookie, c.Name)
	must.EqOp(t, "a", c.Value)
	must.True(t, c.HttpOnly)
	must.EqOp(t, http.SameSiteStrictMode, c.SameSite)

	rr = uiServe(s, "GET", "/ui", "a", nil)
	must.EqOp(t, http.StatusOK, rr.Code)
	must.StrContains(t, rr.Body.String(), "Sign out")
	must.EqOp(t, http.StatusOK, uiServe(s, "GET", "/v1/groups", "a", nil).Code) // the API reads the cookie too
	rr = uiServe(s, "GET", "/ui", "gone", nil)                                  // a token Nomad forgot
	must.EqOp(t, http.StatusUnauthorized, rr.Code)
	must.StrContains(t, rr.Body.String(), "Nomad does not know this token")

	rr = uiServe(s, "POST", "/ui/logout", "a", nil)
	must.EqOp(t, http.StatusSeeOther, rr.Code)
	must.EqOp(t, -1, rr.Result().Cookies()[0].MaxAge)

	// a form sent from another site is refused
	req := apiRequest("POST", "/ui/login", strings.NewReader("token=a"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "https://evil.example.com")
	rr = httptest.NewRecorder()
	s.Handler().ServeHTTP(rr, req)
	must.EqOp(t, http.StatusForbidden, rr.Code)
}

// Preemptions are recorded and shown, on the page and at
// /v1/preemptions, to the tokens that may read the preempted group's
// namespace; the group it was for is named only to those that may read
// that one's too.
func TestPreemptionsAreShownToWhoMayReadThem(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{},
		tokens: map[string][]string{"a": {"team-a", "nodes"}, "ab": {"team-a", "team-b", "nodes"}, "b": {"team-b"}}}
	fraction(t, f, "team-a", "scavenger", 0, 0, 50)
	s := withConfig(t, f, func(c *config.Config) { c.HTTPRequireToken = ptr(true) })
	urgent := model.AllocKey(&api.Allocation{Namespace: "team-b", JobID: "urgent", TaskGroup: "g"})
	must.NoError(t, s.loop.preempt(t.Context(), []string{"alloc-scavenger"}, urgent))
	must.Eq(t, []string{"g"}, pin.Gated(f.jobs["scavenger"])) // gated again

	list := func(token string) []Preemption {
		req := apiRequest("GET", "/v1/preemptions", nil)
		req.Header.Set("X-Nomad-Token", token)
		rr := httptest.NewRecorder()
		s.Handler().ServeHTTP(rr, req)
		must.EqOp(t, http.StatusOK, rr.Code)
		var out []Preemption
		must.NoError(t, json.Unmarshal(rr.Body.Bytes(), &out))
		return out
	}
	got := list("ab")
	must.SliceLen(t, 1, got)
	must.EqOp(t, "scavenger", got[0].Job)
	must.EqOp(t, "team-b/urgent/g", got[0].For)
	must.Eq(t, []string{"alloc-scavenger"}, got[0].Allocations)
	got = list("a")
	must.SliceLen(t, 1, got)
	must.EqOp(t, "", got[0].For) // team-b's job is not named
	must.SliceEmpty(t, list("b"))

	page := uiServe(s, "GET", "/ui", "a", nil).Body.String()
	must.StrContains(t, page, "preempted for a guaranteed group of another namespace (1 allocation(s) stopped)")
	must.StrNotContains(t, page, "urgent")
	page = uiServe(s, "GET", "/ui", "ab", nil).Body.String()
	must.StrContains(t, page, "preempted for the guaranteed group team-b/urgent/g")
	must.StrNotContains(t, uiServe(s, "GET", "/ui", "b", nil).Body.String(), "scavenger")
}
