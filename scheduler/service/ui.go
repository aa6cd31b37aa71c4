package service

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/gpushare/gpushare/scheduler/gpuhistory"
	"github.com/gpushare/gpushare/scheduler/gpumap"
	"github.com/gpushare/gpushare/scheduler/webui"
)

// The web page (package webui draws it): /ui shows the GPU map, the
// queue, refused groups and recent moves; /ui/jobs/<id> one job. Both show
// what the caller's token may read, as the API does; with
// http_require_token, a browser signs in with a token at /ui/login, kept
// in an HttpOnly, SameSite=Strict cookie that tokenOf reads.

// uiRefresh is the page's meta refresh period, in seconds.
const uiRefresh = 15

// maxTokenForm bounds the body of the token form.
const maxTokenForm = 4 << 10

func (s *httpAPI) uiRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ui", http.StatusFound)
	})
	mux.HandleFunc("GET /ui", s.handleUI)
	mux.HandleFunc("GET /ui/{$}", s.handleUI)
	mux.HandleFunc("GET /ui/jobs/{id}", s.handleUIJob)
	mux.HandleFunc("GET /ui/login", s.handleUILoginForm)
	mux.HandleFunc("POST /ui/login", s.handleUILogin)
	mux.HandleFunc("POST /ui/logout", s.handleUILogout)
	mux.Handle("GET /ui/static/", webui.Static())
}

func (s *httpAPI) session(r *http.Request) webui.Session {
	_, err := r.Cookie(tokenCookie)
	return webui.Session{Required: s.tokenRequired(r), SignedIn: err == nil}
}

func (s *httpAPI) links() webui.Links { return webui.Links{NomadUI: s.cfg.Nomad.UIAddress} }

func (s *httpAPI) render(w http.ResponseWriter, code int, page any) {
	if err := webui.Render(w, code, page); err != nil {
		s.log.Warn("cannot render the web page", "error", err)
	}
}

// uiAuthFailed answers a page whose token check failed: the token form
// for a missing or unknown token (its cookie cleared), else a page that
// says what is wrong.
func (s *httpAPI) uiAuthFailed(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, ErrNoToken):
		s.render(w, http.StatusUnauthorized, webui.Login{})
	case errors.Is(err, ErrBadToken):
		clearToken(w, r)
		s.render(w, http.StatusUnauthorized, webui.Login{Error: "Nomad does not know this token (expired or deleted?): sign in with another one."})
	case errors.Is(err, ErrForbidden):
		s.render(w, http.StatusForbidden, webui.Problem{Session: s.session(r), Title: "Not allowed", Message: err.Error()})
	default:
		s.render(w, http.StatusServiceUnavailable, webui.Problem{Session: s.session(r), Title: "Nomad did not answer",
			Message: "The scheduler could not check the token with Nomad: " + err.Error() + ". Try again in a moment."})
	}
}

// handleUI serves the overview: the GPU map (when the token may read
// nodes), the queue, refused groups and recent moves of the namespaces it
// may read.
func (s *httpAPI) handleUI(w http.ResponseWriter, r *http.Request) {
	if err := s.authorize(r, authScope{}); err != nil { // nothing shown before authentication
		s.uiAuthFailed(w, r, err)
		return
	}
	page := webui.Overview{Session: s.session(r), Links: s.links(), Refresh: uiRefresh, Now: s.now()}
	h := s.view.health()
	page.Leader, page.Index, page.Synced = h.Leader, h.Index, h.Synced
	see := s.visibility(r)
	switch err := s.authorize(r, authScope{Nodes: true}); {
	case err == nil:
		page.Map, page.MIGLayouts = s.view.gpuMap(see.can), s.view.migLayouts()
		page.History = s.uiHistory(page.Map, see.can)
	case errors.Is(err, ErrForbidden):
		page.MapNote = "This token may not read nodes (it needs node { policy = \"read\" }): the GPU map is not shown."
	default:
		s.uiAuthFailed(w, r, err)
		return
	}
	for _, g := range s.view.waiting() {
		if !see.can(g.Namespace) {
			continue
		}
		wg := webui.Group{Namespace: g.Namespace, Job: g.Job, Group: g.Group, Reason: g.Reason, Position: g.Position, Of: g.Of}
		if g.State == "refused" {
			page.Refused = append(page.Refused, wg)
		} else {
			page.Waiting = append(page.Waiting, wg)
		}
	}
	// queue order: groups with a place first, by place; then the others
	slices.SortStableFunc(page.Waiting, func(a, b webui.Group) int {
		switch {
		case a.Position == 0 && b.Position == 0:
			return 0
		case a.Position == 0:
			return 1
		case b.Position == 0:
			return -1
		}
		return a.Position - b.Position
	})
	unpairs := s.view.unpaired()
	slices.SortFunc(unpairs, func(a, b Unpaired) int {
		if c := b.At.Compare(a.At); c != 0 {
			return c
		}
		return strings.Compare(a.Job, b.Job)
	})
	for _, u := range unpairs {
		if see.can(u.Namespace) {
			page.Unpairs = append(page.Unpairs, webui.Event{Namespace: u.Namespace, Job: u.Job, Group: u.Group, Reason: u.Reason, At: u.At})
		}
	}
	for _, p := range s.preemptionsFor(see) {
		why := "preempted for a guaranteed group of another namespace"
		if p.For != "" {
			why = "preempted for the guaranteed group " + p.For
		}
		page.Preemptions = append(page.Preemptions, webui.Event{Namespace: p.Namespace, Job: p.Job, Group: p.Group,
			Reason: fmt.Sprintf("%s (%d allocation(s) stopped)", why, len(p.Allocations)), At: p.At})
	}
	if see.err != nil {
		s.uiAuthFailed(w, r, see.err)
		return
	}
	s.render(w, http.StatusOK, page)
}

// handleUIJob serves one job's page: each group's placement, or why it
// waits.
func (s *httpAPI) handleUIJob(w http.ResponseWriter, r *http.Request) {
	ns := r.URL.Query().Get("namespace")
	if ns == "" {
		ns = "default"
	}
	id := r.PathValue("id")
	// authorised first: the managed namespaces are said only to a caller
	// who may read the one it asked about
	if err := s.authorize(r, authScope{Namespace: ns}); err != nil {
		if errors.Is(err, ErrForbidden) {
			err = fmt.Errorf("%w: it needs read-job in namespace %s to see job %s", err, ns, id)
		}
		s.uiAuthFailed(w, r, err)
		return
	}
	if managed := s.ns; !managed.has(ns) {
		s.render(w, http.StatusNotFound, webui.Problem{Session: s.session(r), Title: "Namespace not managed",
			Message: fmt.Sprintf("Namespace %s is not managed by this scheduler: it manages %s (nomad.namespaces).", ns, managed)})
		return
	}
	st, found := s.view.jobStatus(ns, id, ns)
	if !found {
		s.render(w, http.StatusNotFound, webui.Problem{Session: s.session(r), Title: "No such job",
			Message: fmt.Sprintf("No job %s in namespace %s (this scheduler sees the jobs of %s).", id, ns, s.ns)})
		return
	}
	page := webui.Job{Session: s.session(r), Links: s.links(), Namespace: ns, ID: id, Now: s.now()}
	if hist := s.historyStore(); s.authorize(r, authScope{Nodes: true}) == nil { // GPU use is read like the map
		page.Utilization, page.Span = hist.Job(gpuhistory.JobKey{Namespace: ns, Job: id}, page.Now), hist.Span()
		page.Interval = hist.Interval()
		page.GPUNames = webui.GPUNamesOf(s.view.gpuMap(func(string) bool { return false }))
	}
	positions := map[string]queuePos{}
	for _, g := range s.view.waiting() {
		if g.Namespace == ns && g.Job == id && g.Position > 0 {
			positions[g.Group] = queuePos{g.Position, g.Of}
		}
	}
	for _, g := range st.Groups {
		jg := webui.JobGroup{Name: g.Name, State: g.State, Reason: g.Reason, Allocs: g.Allocs, Lifecycle: g.Lifecycle, LifecycleWhy: g.LifecycleWhy}
		if p := g.Placement; p != nil {
			jg.Nodes, jg.GPUs, jg.Shares = s.view.nodeNames(p.Nodes), p.GPUs, len(p.Shares)
			jg.Cell, jg.Policy, jg.Class, jg.VC, jg.Reason = p.Cell, p.Policy, p.Class, p.VC, p.Reason
		}
		if g.Expected != nil {
			jg.Expected = g.Expected.String()
		}
		if g.Profile != nil {
			jg.Profile = fmt.Sprintf("%s (SM %.2f, memory bandwidth %.2f)", cmp.Or(g.Profile.Name, "declared"), g.Profile.SM, g.Profile.MemBW)
		}
		if u := g.Unpaired; u != nil {
			jg.Unpaired = &webui.Event{Namespace: u.Namespace, Job: u.Job, Group: u.Group, Reason: u.Reason, At: u.At}
		}
		if e := g.Elastic; e != nil {
			jg.Elastic = &webui.Elastic{Managed: e.Managed, Min: e.Min, Max: e.Max, Registered: e.Registered, Count: e.Count, Why: e.Why}
			if l := e.Last; l != nil {
				jg.Elastic.Last = &webui.Event{Namespace: ns, Job: id, Group: g.Name, Reason: l.Reason, At: l.At}
			}
		}
		for _, t := range g.Timeslice {
			jg.Timeslice = append(jg.Timeslice, webui.Timeslice{Alloc: t.Alloc, Turns: t.Turns,
				Quantum:   time.Duration(t.QuantumSeconds * float64(time.Second)).Round(time.Millisecond),
				Suspended: time.Duration(t.SuspendedSeconds * float64(time.Second)).Round(time.Millisecond)})
		}
		if p, ok := positions[g.Name]; ok && g.State == "pending" {
			jg.Position, jg.Of = p.Position, p.Of
		}
		page.Groups = append(page.Groups, jg)
	}
	s.uiFamily(&page) // a dispatched child's own allocations; a parent's children
	s.render(w, http.StatusOK, page)
}

// uiHistory is the history of the map's GPUs and of the visible jobs.
func (s *httpAPI) uiHistory(m *gpumap.Map, visible func(ns string) bool) webui.History {
	st, now := s.historyStore(), s.now()
	h := webui.History{Span: st.Span(), Interval: st.Interval(), GPUs: map[string][]gpuhistory.Point{}, Jobs: map[gpuhistory.JobKey][]gpuhistory.Point{}}
	if m == nil {
		return h
	}
	for _, n := range m.Nodes {
		for _, g := range n.GPUs {
			h.GPUs[g.UUID] = st.GPU(g.UUID, now)
		}
	}
	for _, k := range st.Jobs() {
		if visible(k.Namespace) {
			h.Jobs[k] = st.Job(k, now)
		}
	}
	return h
}

func (s *httpAPI) handleUILoginForm(w http.ResponseWriter, r *http.Request) {
	if !s.tokenRequired(r) {
		http.Redirect(w, r, "/ui", http.StatusSeeOther)
		return
	}
	s.render(w, http.StatusOK, webui.Login{})
}

// handleUILogin checks the token with Nomad and keeps it in the page's
// cookie. A token Nomad knows is taken even when it may not read nodes:
// the page then shows what it may read.
func (s *httpAPI) handleUILogin(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		http.Error(w, "the token form must be sent from this scheduler's own page", http.StatusForbidden)
		return
	}
	if !s.tokenRequired(r) {
		http.Redirect(w, r, "/ui", http.StatusSeeOther)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxTokenForm)
	if err := r.ParseForm(); err != nil {
		s.render(w, http.StatusBadRequest, webui.Login{Error: "The form could not be read: " + err.Error()})
		return
	}
	tok := strings.TrimSpace(r.PostFormValue("token"))
	switch {
	case tok == "":
		s.render(w, http.StatusBadRequest, webui.Login{Error: "Paste a Nomad ACL token's Secret ID."})
		return
	case !validCookieValue(tok):
		s.render(w, http.StatusBadRequest, webui.Login{Error: "This is not a Nomad ACL token: paste its Secret ID (a UUID)."})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	switch err := s.nomad.Authorize(ctx, tok, authScope{Nodes: true}); {
	case err == nil, errors.Is(err, ErrForbidden):
	case errors.Is(err, ErrBadToken):
		s.render(w, http.StatusUnauthorized, webui.Login{Error: "Nomad does not know this token: check its Secret ID (nomad acl token self)."})
		return
	default:
		s.render(w, http.StatusServiceUnavailable, webui.Login{Error: "The scheduler could not check the token with Nomad: " + err.Error()})
		return
	}
	http.SetCookie(w, &http.Cookie{Name: tokenCookie, Value: tok, Path: "/", HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/ui", http.StatusSeeOther)
}

func (s *httpAPI) handleUILogout(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		http.Error(w, "sign out from this scheduler's own page", http.StatusForbidden)
		return
	}
	clearToken(w, r)
	http.Redirect(w, r, "/ui", http.StatusSeeOther)
}

func clearToken(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: tokenCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
}

// sameOrigin reports whether a form was sent from this host's pages (an
// Origin header, when the browser sends one, names this host).
func sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	return err == nil && u.Host == r.Host
}

// validCookieValue reports whether a token can be kept in a cookie as is
// (Nomad's Secret IDs are UUIDs).
func validCookieValue(v string) bool {
	if len(v) > 512 {
		return false
	}
	for _, c := range v {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-._~+/=", c)) {
			return false
		}
	}
	return true
}
