package cli

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/internal/usertext"
	"github.com/gpushare/gpushare/scheduler/gpumap"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/gpushare/gpushare/scheduler/service"
	"github.com/hashicorp/nomad/api"
)

// jobStatus prints what the scheduler says of a job's gpushare groups.
func jobStatus(args []string, io IO) int {
	fs := newFlags("job status", "job status [-json | -t TEMPLATE] [-scheduler URL] [Nomad flags: -namespace, -address, -token, -region, -ca-cert, ...] JOB", io)
	schedFlag := addSchedulerFlag(fs, "which this command reads")
	nf := addNomadFlags(fs, "to find the scheduler's service and whether the job is periodic or parameterized")
	out := addFormatFlags(fs, "the scheduler's status of the job (its /v1/jobs/<id>)")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if fs.NArg() != 1 {
		fmt.Fprintf(io.Err, "gpushare job status: takes one argument, the job's ID\n")
		fs.Usage()
		return exitUsage
	}
	if code, ok := out.check(io, "gpushare job status"); !ok {
		return code
	}
	sched := schedFlag.resolve(nf)
	if sched.addr == "" {
		fmt.Fprintln(io.Err, "gpushare job status: reads the scheduler: -scheduler must not be empty")
		return exitUsage
	}
	id, ns := fs.Arg(0), nf.ns()
	var st service.JobStatus
	if err := sched.get("/v1/jobs/"+url.PathEscape(id)+"?namespace="+url.QueryEscape(ns), &st); err != nil {
		var se *statusError
		if errors.As(err, &se) && se.code == http.StatusNotFound {
			// the scheduler's own words say which: no such job, or a
			// namespace it does not manage
			fmt.Fprintf(io.Err, "gpushare job status: job %q not found in namespace %q (the scheduler at %s, %s, answered %s): check the job ID, and the namespace (-namespace or NOMAD_NAMESPACE)\n",
				id, ns, sched.addr, sched.how, se.detail())
			return 1
		}
		fmt.Fprintf(io.Err, "gpushare job status: %s\n", sched.why(err))
		return 1
	}
	if out.set() {
		return out.write(io, "gpushare job status", st)
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
	fam := familyOf(nf, ns, st)
	kind := fam.kind
	where := gpuWhere{}
	for _, g := range st.Groups {
		if g.Placement != nil || len(g.Allocs) > 0 {
			where = fetchWhere(sched)
			break
		}
	}
	for _, g := range st.Groups {
		if kind != "" && (g.State == "template" || g.State == "pending") || g.State == "template" {
			printTemplate(io, st.ID, kind, g, where)
		} else if fam.dispatched && g.Placement != nil {
			printDispatchedChild(io, fam.parent, g, where)
		} else {
			fmt.Fprintf(io.Out, "  group %s: %s\n", g.Name, g.State)
			if g.Lifecycle != "" && g.Lifecycle != g.State {
				fmt.Fprintf(io.Out, "    lifecycle: %s: %s\n", g.Lifecycle, usertext.Reason(g.LifecycleWhy))
			}
			switch {
			case g.Placement != nil:
				p := g.Placement
				fmt.Fprintf(io.Out, "    pinned to %d node(s), %d GPU(s), %d share(s):\n", len(p.Nodes), len(p.GPUs), len(p.Shares))
				printPlacement(io, p, where)
			case g.Reason != "":
				fmt.Fprintf(io.Out, "    why: %s\n", usertext.Reason(g.Reason))
			}
		}
		printAllocs(io, g.Allocs, where)
		printTimeslice(io, g.Timeslice)
		if g.Profile != nil {
			name := g.Profile.Name
			if name == "" {
				name = "from the job's meta" // gpushare.sm_util / gpushare.mem_bw, no profile name
			}
			fmt.Fprintf(io.Out, "    interference profile: %s (sm %.2f, memory bandwidth %.2f)\n", name, g.Profile.SM, g.Profile.MemBW)
		}
		printExpected(io, g.Expected)
		printElastic(io, g.Elastic)
	}
	printChildren(io, fam)
	return 0
}

// Kinds of template job: a parent Nomad never places, whose children run.
const (
	kindPeriodic      = "periodic"
	kindParameterized = "parameterized"
)

// printTemplate says in plain words what a group of a periodic or
// parameterized job is: never placed itself, never decided; a
// parameterized parent is pinned to a pool of GPUs its dispatched
// children are placed in. kind is "" when Nomad did not say which.
func printTemplate(io IO, job, kind string, g service.GroupStatus, where gpuWhere) {
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
			fmt.Fprintf(io.Out, "    why: %s\n", usertext.Reason(g.Reason))
		}
	default:
		fmt.Fprintf(io.Out, "  group %s: the template of a periodic or parameterized job: never placed itself; its children are jobs of their own, each placed by gpushare as it comes "+
			"(a parameterized job is pinned to a pool of GPUs first: dispatch once this says pinned)\n", g.Name)
	}
	if pinned {
		p := g.Placement
		fmt.Fprintf(io.Out, "    pool: %d node(s), %d GPU(s), %d share(s):\n", len(p.Nodes), len(p.GPUs), len(p.Shares))
		printPlacement(io, p, where)
	}
}

// gpuWhere says where GPUs and allocations are, from the scheduler's GPU
// map (/v1/gpus); empty when the scheduler did not give it, and then
// nodes are named by their ID's first 8 characters and GPUs by UUID.
type gpuWhere struct {
	nodeName map[string]string // node ID -> name
	gpu      map[string]gpuAt  // GPU or MIG instance UUID -> where
	alloc    map[string][]held // allocation ID -> the shares it holds
}

type gpuAt struct {
	node, label string
}

type held struct {
	gpu    gpuAt
	shares int
}

func fetchWhere(sched scheduler) gpuWhere {
	w := gpuWhere{nodeName: map[string]string{}, gpu: map[string]gpuAt{}, alloc: map[string][]held{}}
	var m gpumap.Map
	if err := sched.get("/v1/gpus", &m); err != nil {
		return w
	}
	for _, n := range m.Nodes {
		if n.Name != "" {
			w.nodeName[n.ID] = n.Name
		}
		for _, g := range n.GPUs {
			at := gpuAt{node: n.ID, label: fmt.Sprintf("GPU %d", g.Index)}
			w.gpu[g.UUID] = at
			for _, u := range g.Users {
				if u.AllocID != "" {
					w.alloc[u.AllocID] = append(w.alloc[u.AllocID], held{at, u.Shares})
				}
			}
			for _, in := range g.MIG {
				iat := gpuAt{node: n.ID, label: fmt.Sprintf("MIG %s of GPU %d", in.Profile, g.Index)}
				w.gpu[in.UUID] = iat
				for _, u := range in.Users {
					if u.AllocID != "" {
						w.alloc[u.AllocID] = append(w.alloc[u.AllocID], held{iat, u.Shares})
					}
				}
			}
		}
	}
	return w
}

// node names a node: its name, else its ID's first 8 characters.
func (w gpuWhere) node(id string) string {
	if n := w.nodeName[id]; n != "" {
		return n
	}
	return shortID(id)
}

func shortID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

// printPlacement prints a pin one line per node — its GPUs and the
// shares of each — then why, one line per allocation's placement.
func printPlacement(io IO, rec *pin.Record, w gpuWhere) {
	shares := map[string]int{} // GPU UUID -> shares of the pin
	for _, s := range rec.Shares {
		if id, err := devicefn.ParseShareID(s); err == nil {
			shares[id.UUID]++
		}
	}
	onNode := map[string][]string{}
	var unknown []string
	for _, g := range rec.GPUs {
		at, ok := w.gpu[g]
		switch {
		case ok:
		case len(rec.Nodes) == 1: // one node: every GPU of the pin is on it
			at = gpuAt{node: rec.Nodes[0], label: g}
		default:
			unknown = append(unknown, fmt.Sprintf("%s (%s)", g, nShares(shares[g])))
			continue
		}
		onNode[at.node] = append(onNode[at.node], fmt.Sprintf("%s (%s)", at.label, nShares(shares[g])))
	}
	for _, n := range rec.Nodes {
		gpus := "no GPU (cpu only, or GPUs of another node of the pin)"
		if len(onNode[n]) > 0 {
			gpus = strings.Join(onNode[n], ", ")
		}
		fmt.Fprintf(io.Out, "      on node %s: %s\n", w.node(n), gpus)
	}
	if len(unknown) > 0 {
		fmt.Fprintf(io.Out, "      on GPUs the scheduler's map does not show: %s\n", strings.Join(unknown, ", "))
	}
	for _, why := range splitReasons(rec.Reason) {
		fmt.Fprintf(io.Out, "    why: %s\n", usertext.Reason(why))
	}
}

// startsPlacement matches the part of a placement's reason that says
// where it is ("25 shares of GPU 0 on node a", "pool ...: GPU [0] of node
// b"): a pin's reason joins its placements' reasons, and each its own
// parts, with "; ".
var startsPlacement = regexp.MustCompile(`\b(on|of) node \S`)

// splitReasons cuts a pin's reason into one reason per placement.
func splitReasons(reason string) []string {
	if reason == "" {
		return nil
	}
	var out []string
	for _, part := range strings.Split(reason, "; ") {
		if len(out) == 0 || startsPlacement.MatchString(part) {
			out = append(out, part)
			continue
		}
		out[len(out)-1] += "; " + part
	}
	return out
}

// printAllocs prints one line per allocation: the node and the GPUs its
// shares are on.
func printAllocs(io IO, allocs []string, w gpuWhere) {
	for _, a := range allocs {
		hs := w.alloc[a]
		if len(hs) == 0 {
			fmt.Fprintf(io.Out, "    allocation %s: holds no shares the scheduler's map shows (not started, finished, or the map was not read)\n", shortID(a))
			continue
		}
		var parts []string
		node := hs[0].gpu.node
		for _, h := range hs {
			p := fmt.Sprintf("%s (%s)", h.gpu.label, nShares(h.shares))
			if h.gpu.node != node {
				p = "node " + w.node(h.gpu.node) + " " + p
			}
			parts = append(parts, p)
		}
		fmt.Fprintf(io.Out, "    allocation %s: node %s, %s\n", shortID(a), w.node(node), strings.Join(parts, ", "))
	}
}

func nShares(n int) string {
	if n == 1 {
		return "1 share"
	}
	return fmt.Sprintf("%d shares", n)
}

// printExpected says the run time the queue orders a group by, and where
// it comes from.
func printExpected(io IO, e *service.ExpectedRuntime) {
	if e != nil {
		fmt.Fprintf(io.Out, "    expected run time: %s\n", e)
	}
}
