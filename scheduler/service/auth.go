package service

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/nomad/api"
)

// The HTTP API can require a Nomad ACL token (http_require_token): the
// caller's token must be one Nomad knows (else 401) and may read what is
// asked (else 403): the jobs of the namespace for /v1/jobs/<id>, the jobs
// of each namespace listed for /v1/groups, nodes for /v1/gpus (where the
// jobs, groups and allocations of namespaces the token may not read show
// as anonymous shares). Nomad answers the question, with the caller's
// token; answers are kept for authTTL. /v1/health and /metrics stay open
// (probes and scrapers); they name no job. A browser cannot send a
// header: the page's token form (/ui/login) keeps the token in a cookie,
// read wherever the token is. Unset, the token is required beyond
// loopback, and on loopback for every request a proxy forwarded
// (tokenRequired).

// Errors of authorize.
var (
	ErrNoToken   = errors.New("this API needs a Nomad ACL token (X-Nomad-Token header or Authorization: Bearer; in a browser, sign in at /ui/login)")
	ErrBadToken  = errors.New("Nomad does not know this ACL token")
	ErrForbidden = errors.New("this ACL token may not read it")
)

// authScope is what a caller asks to read: the jobs of a namespace, or
// nodes (Namespace "").
// authScope is what a request reads: jobs of Namespace (read-job), or the
// nodes; neither: only that the token is one Nomad knows.
type authScope struct {
	Namespace string
	Nodes     bool
}

const authTTL = 30 * time.Second

type authCache struct {
	mu      sync.Mutex
	answers map[string]authAnswer
}

type authAnswer struct {
	err error
	at  time.Time
}

// tokenCookie holds the token the page's form was given.
const tokenCookie = "gpushare_token"

// tokenOf is the caller's token: the X-Nomad-Token header, else a bearer
// token, else the page's cookie.
func tokenOf(r *http.Request) string {
	if t := r.Header.Get("X-Nomad-Token"); t != "" {
		return t
	}
	if t, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return strings.TrimSpace(t)
	}
	if c, err := r.Cookie(tokenCookie); err == nil {
		return c.Value
	}
	return ""
}

// visibility answers, for one request, which namespaces' jobs the caller
// may see: those the service manages and the caller's token may read,
// asking Nomad once per namespace. err is the first answer that was
// neither yes nor no (no token, a bad one, Nomad did not answer); after
// it nothing more is asked.
type visibility struct {
	s       *httpAPI
	r       *http.Request
	managed namespaces
	seen    map[string]bool
	err     error
}

func (s *httpAPI) visibility(r *http.Request) *visibility {
	return &visibility{s: s, r: r, managed: s.ns, seen: map[string]bool{}}
}

// can reports whether the caller may see namespace ns's jobs.
func (v *visibility) can(ns string) bool {
	if ns == "" {
		ns = "default"
	}
	if ok, seen := v.seen[ns]; seen {
		return ok
	}
	if v.err != nil {
		return false // the request fails anyway: ask Nomad no more
	}
	ok := false
	if v.managed.has(ns) {
		switch err := v.s.authorize(v.r, authScope{Namespace: ns}); {
		case err == nil:
			ok = true
		case errors.Is(err, ErrForbidden):
		default:
			if v.err == nil {
				v.err = err
			}
		}
	}
	v.seen[ns] = ok
	return ok
}

// tokenRequired says whether request r must carry a token:
// http_require_token when set; unset, whenever the API listens beyond
// loopback, and on loopback for a request a proxy forwarded. A reverse
// proxy on the same host connects from loopback and, with common
// defaults, passes Host 127.0.0.1 on: without this, whoever reaches the
// proxy would read the loopback API as a local program does.
func (s *httpAPI) tokenRequired(r *http.Request) bool {
	if s.cfg.HTTPRequireToken != nil {
		return *s.cfg.HTTPRequireToken
	}
	return s.cfg.RequireToken() || forwarded(r)
}

// forwardHeaders are the headers proxies add to a request they forward
// (RFC 7239's Forwarded, the de facto X-Forwarded-For/-Host/-Proto/...,
// RFC 9110's Via, nginx's X-Real-IP).
var forwardHeaders = []string{"Forwarded", "Via", "X-Real-Ip", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "X-Forwarded-Port", "X-Forwarded-Server", "X-Forwarded-Prefix"}

// forwarded reports whether a proxy forwarded r: it carries one of
// forwardHeaders, or any other X-Forwarded-* header.
func forwarded(r *http.Request) bool {
	for _, h := range forwardHeaders {
		if _, ok := r.Header[h]; ok {
			return true
		}
	}
	for h := range r.Header {
		if strings.HasPrefix(h, "X-Forwarded-") {
			return true
		}
	}
	return false
}

// authorize checks that the request's token may read scope; nil when
// tokens are not required.
func (s *httpAPI) authorize(r *http.Request, scope authScope) error {
	if !s.tokenRequired(r) {
		return nil
	}
	// no token is asked about too: on a cluster without ACLs Nomad answers
	// anyone, and so does the API; with ACLs it is refused (ErrNoToken)
	tok := tokenOf(r)
	key := tok + "\x00" + scope.Namespace
	if scope.Nodes {
		key += "\x00nodes"
	}
	s.auth.mu.Lock()
	if a, ok := s.auth.answers[key]; ok && time.Since(a.at) < authTTL {
		s.auth.mu.Unlock()
		return a.err
	}
	s.auth.mu.Unlock()
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	err := s.nomad.Authorize(ctx, tok, scope)
	if err != nil && !errors.Is(err, ErrBadToken) && !errors.Is(err, ErrForbidden) && !errors.Is(err, ErrNoToken) {
		return err // Nomad did not answer: not cached
	}
	if tok == "" && errors.Is(err, ErrBadToken) {
		err = ErrNoToken
	}
	s.auth.mu.Lock()
	if s.auth.answers == nil || len(s.auth.answers) > 10000 {
		s.auth.answers = map[string]authAnswer{}
	}
	s.auth.answers[key] = authAnswer{err: err, at: time.Now()}
	s.auth.mu.Unlock()
	return err
}

// authFailed writes the answer for a failed authorize.
func authFailed(w http.ResponseWriter, err error) {
	code := http.StatusServiceUnavailable
	switch {
	case errors.Is(err, ErrNoToken), errors.Is(err, ErrBadToken):
		code = http.StatusUnauthorized
	case errors.Is(err, ErrForbidden):
		code = http.StatusForbidden
	}
	writeJSON(w, code, map[string]string{"error": err.Error()})
}

// Authorize asks Nomad, with the caller's token, whether it may read
// scope: the token itself (401 from Nomad: ErrBadToken), then what the
// scope covers (403: ErrForbidden). Jobs are checked with read-job, the
// capability Nomad itself asks to read a job (not list-jobs): a job lookup
// in the namespace, whose permission Nomad checks before it looks (so the
// probe's ID need not exist). Without a token, it asks only whether Nomad
// has ACLs at all (with the scheduler's own token: the API client sends it
// whenever a request carries none).
func (n nomadClient) Authorize(ctx context.Context, token string, scope authScope) error {
	ctx, cancel := n.bound(ctx)
	defer cancel()
	if token == "" {
		self, _, err := n.c.ACLTokens().Self((&api.QueryOptions{}).WithContext(ctx))
		switch {
		// ACLs disabled: Nomad answers anyone (1.11 says so with a
		// pseudo-token, older versions with a 400)
		case err == nil && self != nil && self.AccessorID == aclsDisabledAccessor, isStatus(err, http.StatusBadRequest):
			return nil
		case err == nil, isForbidden(err), isStatus(err, http.StatusUnauthorized), isNotFound(err):
			return ErrNoToken
		}
		return err
	}
	q := func(ns string) *api.QueryOptions {
		return (&api.QueryOptions{AuthToken: token, Namespace: ns, PerPage: 1}).WithContext(ctx)
	}
	if _, _, err := n.c.ACLTokens().Self(q("")); err != nil {
		if isForbidden(err) || isStatus(err, http.StatusUnauthorized) || isNotFound(err) {
			return ErrBadToken
		}
		if !isStatus(err, http.StatusBadRequest) { // ACLs disabled: every token reads everything
			return err
		}
		return nil
	}
	var err error
	switch {
	case scope.Nodes:
		_, _, err = n.c.Nodes().List(q(""))
	case scope.Namespace != "":
		_, _, err = n.c.Jobs().Info(authProbeJob, q(scope.Namespace))
		if isNotFound(err) {
			err = nil // allowed to look: there is no such job
		}
	}
	if isForbidden(err) {
		return ErrForbidden
	}
	return err
}

// aclsDisabledAccessor is the accessor of the token Nomad (1.11) returns
// from /v1/acl/token/self when ACLs are disabled.
const aclsDisabledAccessor = "acls-disabled"

// authProbeJob is the job ID Authorize looks up to learn whether a token
// has read-job in a namespace; whether it exists does not matter.
const authProbeJob = "gpushare-read-job-probe"
