package cli

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gpushare/gpushare/scheduler/service"
	"github.com/hashicorp/nomad/api"
)

// jobStatus prints what the scheduler says of a job's gpushare groups.
func jobStatus(args []string, io IO) int {
	fs := newFlags("job status", "job status [-scheduler URL] [-address URL] [-namespace NS] JOB", io)
	schedFlag := addSchedulerFlag(fs, "which this command reads")
	addr := fs.String("address", "", "Nomad HTTP address, to find the scheduler's service and whether the job is periodic or parameterized (default: $NOMAD_ADDR or http://127.0.0.1:4646)")
	ns := fs.String("namespace", "", "the job's namespace (default: default)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	sched := schedFlag.resolve(*addr)
	if sched.addr == "" {
		fmt.Fprintln(io.Err, "gpushare job status: reads the scheduler: -scheduler must not be empty")
		return 2
	}
	u := strings.TrimSuffix(sched.addr, "/") + "/v1/jobs/" + url.PathEscape(fs.Arg(0))
	if *ns != "" {
		u += "?namespace=" + url.QueryEscape(*ns)
	}
	var st service.JobStatus
	if err := getJSON(u, &st); err != nil {
		fmt.Fprintf(io.Err, "gpushare job status: %v (%s)\n", err, sched.hint())
		return 1
	}
	fmt.Fprintf(io.Out, "job %s (namespace %s)\n", st.ID, st.Namespace)
	switch {
	case st.Status == "dead" && st.Type == api.JobTypeBatch:
		fmt.Fprintln(io.Out, "  status dead: the batch job has finished (or was stopped); its allocations hold no shares any more")
	case st.Status == "dead":
		fmt.Fprintln(io.Out, "  status dead: the job is stopped; its allocations hold no shares any more")
	case st.Status != "":
		fmt.Fprintf(io.Out, "  status %s\n", st.Status)
	}
	kind := templateKindOf(*addr, *ns, st)
	for _, g := range st.Groups {
		if kind != "" && (g.State == "template" || g.State == "pending") || g.State == "template" {
			printTemplate(io, st.ID, kind, g)
		} else {
			fmt.Fprintf(io.Out, "  group %s: %s\n", g.Name, g.State)
			if g.Lifecycle != "" && g.Lifecycle != g.State {
				fmt.Fprintf(io.Out, "    lifecycle: %s: %s\n", g.Lifecycle, g.LifecycleWhy)
			}
			switch {
			case g.Placement != nil:
				fmt.Fprintf(io.Out, "    pinned to %d node(s), %d GPU(s), %d share(s): %s\n", len(g.Placement.Nodes), len(g.Placement.GPUs), len(g.Placement.Shares), g.Placement.Reason)
			case g.Reason != "":
				fmt.Fprintf(io.Out, "    why: %s\n", g.Reason)
			}
		}
		if len(g.Allocs) > 0 {
			fmt.Fprintf(io.Out, "    allocations: %s\n", strings.Join(g.Allocs, ", "))
		}
		if g.Profile != nil {
			name := g.Profile.Name
			if name == "" {
				name = "from the job's meta" // gpushare.sm_util / gpushare.mem_bw, no profile name
			}
			fmt.Fprintf(io.Out, "    interference profile: %s (sm %.2f, memory bandwidth %.2f)\n", name, g.Profile.SM, g.Profile.MemBW)
		}
	}
	return 0
}

// Kinds of template job: a parent Nomad never places, whose children run.
const (
	kindPeriodic      = "periodic"
	kindParameterized = "parameterized"
)

// templateKindOf asks Nomad (at nomadAddr) whether the job is periodic or
// parameterized, when a group of st is a template or waits ("": neither,
// or Nomad did not say). A scheduler that says a parent waits "for the
// next decision" (one older than template states) is then not believed:
// Nomad never places such a parent and gpushare never decides it.
func templateKindOf(nomadAddr, ns string, st service.JobStatus) string {
	ask := false
	for _, g := range st.Groups {
		ask = ask || g.State == "template" || g.State == "pending"
	}
	if !ask {
		return ""
	}
	cfg := api.DefaultConfig()
	if nomadAddr != "" {
		cfg.Address = nomadAddr
	}
	cfg.HttpClient = &http.Client{Timeout: 10 * time.Second}
	client, err := api.NewClient(cfg)
	if err != nil {
		return ""
	}
	job, _, err := client.Jobs().Info(st.ID, &api.QueryOptions{Namespace: ns})
	switch {
	case err != nil:
		return ""
	case job.IsPeriodic():
		return kindPeriodic
	case job.IsParameterized():
		return kindParameterized
	}
	return ""
}

// printTemplate says in plain words what a group of a periodic or
// parameterized job is: never placed itself, never decided; a
// parameterized parent is pinned to a pool of GPUs its dispatched
// children are placed in. kind is "" when Nomad did not say which.
func printTemplate(io IO, job, kind string, g service.GroupStatus) {
	pinned := g.Placement != nil
	switch {
	case kind == kindPeriodic:
		fmt.Fprintf(io.Out, "  group %s: the template of a periodic job: never placed itself; Nomad launches a child job (%s/periodic-<time>) on its schedule, "+
			"and gpushare places each child as it comes (`gpushare job status %s/periodic-<time>` says where)\n", g.Name, job, job)
	case pinned:
		fmt.Fprintf(io.Out, "  group %s: the template of a parameterized job, pinned to a pool of GPUs: dispatch children now (`nomad job dispatch %s`); Nomad places each inside the pool\n", g.Name, job)
	case kind == kindParameterized:
		fmt.Fprintf(io.Out, "  group %s: the template of a parameterized job, not pinned to a pool of GPUs yet: do not dispatch yet (a child dispatched now waits for good)\n", g.Name)
		if g.State == "pending" && g.Reason != "" && g.Reason != "waiting for the next decision" {
			fmt.Fprintf(io.Out, "    why: %s\n", g.Reason)
		}
	default:
		fmt.Fprintf(io.Out, "  group %s: the template of a periodic or parameterized job: never placed itself; its children are jobs of their own, each placed by gpushare as it comes "+
			"(a parameterized job is pinned to a pool of GPUs first: dispatch once this says pinned)\n", g.Name)
	}
	if pinned {
		p := g.Placement
		fmt.Fprintf(io.Out, "    pool: %d node(s), %d GPU(s), %d share(s): %s\n", len(p.Nodes), len(p.GPUs), len(p.Shares), p.Reason)
	}
}
