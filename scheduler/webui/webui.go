package webui

import (
	"bytes"
	"embed"
	"fmt"
	"hash/fnv"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gpushare/gpushare/internal/usertext"
	"github.com/gpushare/gpushare/scheduler/gpuhistory"
	"github.com/gpushare/gpushare/scheduler/gpumap"
	"github.com/gpushare/gpushare/scheduler/miglayout"
)

//go:embed templates/*.html static/*
var files embed.FS

var pages = template.Must(template.New("").Funcs(template.FuncMap{
	"ago":   ago,
	"short": short,
	"pct":   pct,
	"words": stateWords,
	// reasons as users read them: job IDs unescaped, 8-character
	// allocation IDs, no internal names (the API keeps them as composed)
	"reason": usertext.Reason,
	"head": func(title string, refresh int, script bool) headData {
		return headData{Title: title, Refresh: refresh, Script: script}
	},
}).ParseFS(files, "templates/*.html"))

// headData is what the head of every page reads.
type headData struct {
	Title   string
	Refresh int
	Script  bool
}

// Session is what the page says of the caller's token.
type Session struct {
	// Required: the scheduler's http_require_token is on.
	Required bool
	// SignedIn: the token comes from the page's cookie (it can sign out).
	SignedIn bool
}

// Links makes the page's links: to the page's own job view, and to
// Nomad's UI when one is configured (NomadUI, its base address).
type Links struct {
	NomadUI string
}

// Job is the page's own view of a job.
func (Links) Job(namespace, id string) string {
	return "/ui/jobs/" + url.PathEscape(id) + "?namespace=" + url.QueryEscape(namespace)
}

// NomadJob is the job's page in Nomad's UI, "" without one.
func (l Links) NomadJob(namespace, id string) string {
	if l.NomadUI == "" {
		return ""
	}
	return strings.TrimSuffix(l.NomadUI, "/") + "/ui/jobs/" + url.PathEscape(id+"@"+namespace)
}

// NomadAlloc is the allocation's page in Nomad's UI, "" without one.
func (l Links) NomadAlloc(id string) string {
	if l.NomadUI == "" {
		return ""
	}
	return strings.TrimSuffix(l.NomadUI, "/") + "/ui/allocations/" + url.PathEscape(id)
}

// NomadNode is the client's page in Nomad's UI, "" without one.
func (l Links) NomadNode(id string) string {
	if l.NomadUI == "" {
		return ""
	}
	return strings.TrimSuffix(l.NomadUI, "/") + "/ui/clients/" + url.PathEscape(id)
}

// Overview is the main page.
type Overview struct {
	Session
	Links
	// Index is the model's index: the script reloads when it changes.
	Index          uint64
	Leader, Synced bool
	// Map is the GPU map, other namespaces' usage anonymous; nil with
	// MapNote saying why it is not shown.
	Map     *gpumap.Map
	MapNote string
	// Waiting are the groups that wait, in queue order; Refused those
	// refused for good.
	Waiting, Refused []Group
	// Unpairs and Preemptions are the recent moves, newest first.
	Unpairs, Preemptions []Event
	// MIGLayouts are the layouts the scheduler recommends for the nodes'
	// MIG GPUs (shown with the map: nil without it).
	MIGLayouts []miglayout.Recommendation
	// History is what the GPUs and the jobs did (sparklines).
	History History
	// Refresh is the meta refresh period, in seconds.
	Refresh int
	Now     time.Time
}

// Group is a group that waits or was refused, and why.
type Group struct {
	Namespace, Job, Group string
	Reason                string
	// Position of Of in the queue; 0 when the group was not queued.
	Position, Of int
}

// Event is a group moved off its GPU (an unpair or a preemption).
type Event struct {
	Namespace, Job, Group string
	Reason                string
	At                    time.Time
}

// Job is the page of one job.
type Job struct {
	Session
	Links
	Namespace, ID string
	Groups        []JobGroup
	// Family: its parent, or its children (family.go).
	Family
	// Utilization is the job's utilisation over Span (percent of one
	// GPU, summed over its GPUs).
	Utilization []gpuhistory.Point
	Span        time.Duration
	// Interval is how often the GPUs are sampled (observe_interval): a
	// pinned job without a sample yet says when its utilisation appears.
	Interval time.Duration
	Now      time.Time
	// GPUNames names the GPUs of the map by UUID ("GPU 2 on node-a",
	// GPUNamesOf): the page shows them by name, the UUID in a title. Nil
	// when the token may not read nodes: the UUIDs are shown, shortened.
	GPUNames map[string]string
}

// Pending is the hint a job's page shows before its first utilisation
// sample: "" once it has one, or when it has no group pinned.
func (j Job) Pending() string {
	if len(j.Utilization) > 0 || j.Span <= 0 {
		return ""
	}
	for _, g := range j.Groups {
		if g.State == "pinned" {
			return firstSampleHint(j.Interval)
		}
	}
	return ""
}

// GPUName is the name the page gives the GPU uuid: its index on its
// node, or its UUID shortened when the map does not have it.
func (j Job) GPUName(uuid string) string {
	if n, ok := j.GPUNames[uuid]; ok {
		return n
	}
	if strings.HasPrefix(uuid, "GPU-") || strings.HasPrefix(uuid, "MIG-") {
		return uuid[:4] + short(uuid[4:])
	}
	return short(uuid)
}

// GPUNamesOf names each GPU (and MIG instance) of m by its UUID: "GPU 2
// on node-a", "GPU 2 MIG 3g.40gb on node-a".
func GPUNamesOf(m *gpumap.Map) map[string]string {
	out := map[string]string{}
	if m == nil {
		return out
	}
	for _, n := range m.Nodes {
		for _, g := range n.GPUs {
			out[g.UUID] = fmt.Sprintf("GPU %d on %s", g.Index, n.Name)
			for _, inst := range g.MIG {
				out[inst.UUID] = fmt.Sprintf("GPU %d MIG %s on %s", g.Index, inst.Profile, n.Name)
			}
		}
	}
	return out
}

// JobGroup is one group of a job: where it is pinned, or why it waits.
type JobGroup struct {
	Name  string
	State string // "pinned", "pending", "refused", "template" or "not-gpushare"
	// Lifecycle is where the scheduler's last pass found the group in its
	// job's life (lifecycle.State) and LifecycleWhy why: the page says
	// them in plain words (stateWords).
	Lifecycle, LifecycleWhy string
	// Reason is why it waits, or why it was placed where it is.
	Reason string
	// Where it is pinned.
	Nodes, GPUs         []string
	Shares              int
	Cell, Policy, Class string
	VC                  string
	Allocs              []string
	Profile             string
	// Expected is the run time the queue orders it by, and where it
	// comes from (declared, or learned from its runs); "" when none.
	Expected     string
	Unpaired     *Event
	Position, Of int
	// Elastic, for a group that opted in to elastic resizing
	// (gpushare.elastic): whether the scheduler resizes it, why it does or
	// does not now, and its last resize.
	Elastic *Elastic
	// Own, for a child dispatched into its parent's pool (Family.Dispatched):
	// where each of its allocations runs or ran, the live ones first;
	// Nodes and GPUs are the pool's.
	Own []AllocPlace
	// Timeslice, for a time-sliced group (gpushare.timeslice), is each
	// allocation's quantum, suspended time and turns.
	Timeslice []Timeslice
}

// Timeslice is what the page says of a time-sliced allocation: the
// quantum it runs per turn, the time its launches waited for their turn
// in all, and its turns.
type Timeslice struct {
	Alloc              string
	Quantum, Suspended time.Duration
	Turns              uint64
}

// Elastic is what the page says of an elastic group.
type Elastic struct {
	Managed                     bool
	Min, Max, Registered, Count int
	Why                         string
	// Last is the last resize (its Reason says from what to what, and
	// why); nil when there was none.
	Last *Event
}

// jobPage is what the job template reads.
type jobPage struct {
	Job
	Spark template.HTML
}

// Problem is a page that says what is wrong and what to do.
type Problem struct {
	Session
	Title, Message string
}

// Login is the token form.
type Login struct {
	Error string
}

// headers are the security headers of every page: no script but ours,
// no framing, no caching of what a token may read.
func headers(h http.Header) {
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; connect-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
}

// Render writes page (an Overview, Job, Problem or Login) with status
// code. The page is rendered whole before anything is written: a template
// error is a 500, never half a page.
func Render(w http.ResponseWriter, code int, page any) error {
	var name string
	var data any
	switch p := page.(type) {
	case Overview:
		name, data = "overview", overviewPage{Overview: p, Nodes: nodeViews(p.Map, p.Links, p.History, p.Now), Summary: summarize(p.Map)}
	case Job:
		name, data = "job", jobPage{Job: p, Spark: sparkline(p.Utilization, p.Now, p.Span, "job's GPU utilisation")}
	case Problem:
		name, data = "problem", p
	case Login:
		name, data = "login", p
	default:
		err := fmt.Errorf("webui: no page for %T", page)
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return err
	}
	var b bytes.Buffer
	if err := pages.ExecuteTemplate(&b, name, data); err != nil {
		http.Error(w, "rendering the page: "+err.Error(), http.StatusInternalServerError)
		return err
	}
	headers(w.Header())
	w.WriteHeader(code)
	_, err := w.Write(b.Bytes())
	return err
}

// Static serves the stylesheet and the script, under /ui/static/.
func Static() http.Handler {
	sub, _ := fs.Sub(files, "static")
	return http.StripPrefix("/ui/static/", http.FileServerFS(sub))
}

func ago(now, t time.Time) string {
	if t.IsZero() {
		return ""
	}
	d := max(now.Sub(t).Round(time.Second), 0) // clocks of two replicas may disagree
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm ago", int(d.Hours()), int(d.Minutes())%60)
	}
	return t.UTC().Format("2006-01-02 15:04 UTC")
}

func short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

func pct(a, b int) string {
	if b == 0 {
		return "0%"
	}
	return fmt.Sprintf("%.0f%%", 100*float64(a)/float64(b))
}

// hue is a job's colour, the same on every page and every refresh.
func hue(namespace, job string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(namespace + "\x00" + job))
	return int(h.Sum32() % 360)
}
