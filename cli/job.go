package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/gpushare/gpushare/internal/usertext"
	"os"
	"strings"
	"time"

	"github.com/gpushare/gpushare/jobspecs"
	"github.com/gpushare/gpushare/scheduler/feasible"
	"github.com/gpushare/gpushare/scheduler/gpumap"
	"github.com/gpushare/gpushare/scheduler/interference"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/hashicorp/nomad/api"
)

type varFlags []string

func (v *varFlags) String() string     { return strings.Join(*v, ",") }
func (v *varFlags) Set(s string) error { *v = append(*v, s); return nil }

const jobUsage = `Usage: gpushare job <subcommand>

  lint   [flags] FILE...   check how jobspecs ask for gpushare devices
  run    [flags] FILE      add the gate, check the request against the cluster, register
  status [flags] JOB       where each gpushare group of a job is pinned, or why it waits

Run 'gpushare job <subcommand> -h' for its flags.
`

func runJob(args []string, io IO) int {
	if len(args) == 0 || (args[0] != "lint" && args[0] != "run" && args[0] != "status") {
		fmt.Fprint(io.Err, jobUsage)
		if len(args) > 0 && isHelp(args[0]) {
			return 0
		}
		return exitUsage
	}
	switch args[0] {
	case "lint":
		return jobLint(args[1:], io)
	case "status":
		return jobStatus(args[1:], io)
	}
	return jobRun(args[1:], io)
}

// lintResult is what job lint found in one file (its -json).
type lintResult struct {
	File     string             `json:"file"`
	OK       bool               `json:"ok"`
	Error    string             `json:"error,omitempty"` // the jobspec did not parse
	Findings []jobspecs.Finding `json:"findings"`
}

func jobLint(args []string, io IO) int {
	fs := newFlags("job lint", "job lint [-json | -t TEMPLATE] [-for-job-run] [-var name=value]... [-shares-per-gpu N] [-scheduler URL] [Nomad flags: -address, -token, -ca-cert, ...] FILE...", io)
	var vars varFlags
	fs.Var(&vars, "var", "HCL2 variable name=value (repeatable)")
	spg := fs.Int("shares-per-gpu", 100, "the plugin's shares_per_gpu")
	forRun := fs.Bool("for-job-run", false, "check each file as `gpushare job run` registers it: with the gpushare gate added where a group lacks it (without this flag a group with no gate is an error: `nomad job run` would let Nomad place it)")
	schedFlag := addSchedulerFlag(fs, "to check gpushare.vc and profiles against its configuration and GPU requests against its largest node")
	nf := addNomadFlags(fs, "whose agent parses the jobspec (else the nomad binary on PATH)")
	out := addFormatFlags(fs, "the findings of each file")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(io.Err, "gpushare job lint: takes one or more jobspec files")
		fs.Usage()
		return exitUsage
	}
	if code, ok := out.check(io, "gpushare job lint"); !ok {
		return code
	}
	parser := jobspecs.Parser{}
	if c, err := nf.client(0); err == nil {
		parser.Nomad = c
	}
	sched := schedFlag.resolve(nf)
	nodes := clusterNodes(sched)
	profiles := schedulerProfiles(sched)
	code := 0
	var results []lintResult
	for _, file := range fs.Args() {
		res := lintResult{File: file, Findings: []jobspecs.Finding{}}
		src, err := os.ReadFile(file)
		var job *api.Job
		if err == nil {
			job, err = parser.Parse(file, src, vars)
		}
		if err != nil {
			res.Error = err.Error()
			results = append(results, res)
			if !out.set() {
				fmt.Fprintln(io.Err, err)
			}
			code = 1
			continue
		}
		var added []string
		if *forRun {
			added = pin.AddGate(job)
		}
		findings := append(jobspecs.LintWith(job, *spg, profiles), checkVC(job, sched)...)
		findings = append(findings, jobspecs.CheckSize(job, *spg, nodes)...)
		findings = append(findings, jobspecs.CheckModels(job, nodes)...)
		jobspecs.Locate(findings, jobspecs.IndexLines(file, src))
		res.Findings = append(res.Findings, findings...)
		res.OK = !jobspecs.HasErrors(findings)
		results = append(results, res)
		if !res.OK {
			code = 1
		}
		if out.set() {
			continue
		}
		if len(added) > 0 {
			fmt.Fprintf(io.Out, "%s: `gpushare job run` adds the gpushare gate to %s\n", file, strings.Join(added, ", "))
		}
		for _, f := range findings {
			fmt.Fprintln(io.Out, f.In(file))
		}
		if len(findings) == 0 {
			fmt.Fprintf(io.Out, "%s: ok\n", file)
		}
	}
	if out.set() {
		if c := out.write(io, "gpushare job lint", results); c != 0 {
			return c
		}
	}
	return code
}

// clusterNodes lists the nodes of the scheduler's GPU map (/v1/gpus) and
// their GPUs, or nil when the scheduler does not answer.
func clusterNodes(sched scheduler) []jobspecs.NodeGPUs {
	if sched.addr == "" {
		return nil
	}
	var m gpumap.Map
	if err := sched.get("/v1/gpus", &m); err != nil {
		return nil
	}
	out := []jobspecs.NodeGPUs{}
	for _, n := range m.Nodes {
		name := n.Name
		if name == "" {
			name = shortID(n.ID)
		}
		out = append(out, jobspecs.NodeGPUs{Name: name, GPUs: len(n.GPUs), Model: n.Model})
	}
	return out
}

func jobRun(args []string, io IO) int {
	fs := newFlags("job run", "job run [-var name=value]... [-detach] [-check] [-timeout D] [-scheduler URL] [Nomad flags: -address, -namespace, -token, -region, -ca-cert, ...] FILE", io)
	nf := addNomadFlags(fs, "")
	var vars varFlags
	fs.Var(&vars, "var", "HCL2 variable name=value (repeatable)")
	detach := fs.Bool("detach", false, "register and return without waiting for the placement")
	check := fs.Bool("check", false, "check against the cluster and stop before registering")
	timeout := fs.Duration("timeout", 5*time.Minute, "how long to wait for the job to run")
	schedFlag := addSchedulerFlag(fs, "to check gpushare.vc and profiles against its configuration")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(io.Err, "gpushare job run: takes one argument, the jobspec file")
		fs.Usage()
		return exitUsage
	}
	client, err := nf.client(0)
	if err != nil {
		fmt.Fprintf(io.Err, "gpushare job run: %v\n", err)
		return 1
	}
	file := fs.Arg(0)
	src, err := os.ReadFile(file)
	var job *api.Job
	if err == nil {
		job, err = jobspecs.Parser{Nomad: client}.Parse(file, src, vars)
	}
	if err != nil {
		fmt.Fprintln(io.Err, err)
		return 1
	}
	added := pin.AddGate(job)
	sched := schedFlag.resolve(nf)
	profiles := schedulerProfiles(sched)
	findings := append(jobspecs.LintWith(job, 0, profiles), checkVC(job, sched)...)
	jobspecs.Locate(findings, jobspecs.IndexLines(file, src))
	for _, f := range findings {
		fmt.Fprintln(io.Err, f.In(file))
	}
	if jobspecs.HasErrors(findings) {
		return 1
	}
	if len(added) > 0 {
		fmt.Fprintf(io.Out, "added the gpushare gate to %s\n", strings.Join(added, ", "))
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	// groups whose placement is carried over are not decided again: only
	// the others are checked against the cluster (and said to fit)
	carried := carryPins(client, job)
	if len(carried) > 0 {
		fmt.Fprintf(io.Out, "kept the existing placement of %s (request unchanged)\n", strings.Join(carried, ", "))
		if why := finishedBatch(client, job); why != "" {
			fmt.Fprintf(io.Err, "gpushare job run: %s\n", why)
			return 1
		}
	}
	if err := checkFit(ctx, client, job, profiles, io); err != nil {
		fmt.Fprintf(io.Err, "gpushare job run: %v\n", err)
		return 1
	}
	if *check {
		return 0
	}
	resp, _, err := client.Jobs().Register(job, nil)
	if err != nil {
		fmt.Fprintf(io.Err, "gpushare job run: registering %s: %v\n", *job.ID, err)
		return 1
	}
	if what := templateNext(job); what != "" {
		// Nomad makes no evaluation for a periodic or parameterized
		// parent, and never places it: nothing to wait for
		fmt.Fprintf(io.Out, "registered %s, %s\n", *job.ID, what)
		return 0
	}
	fmt.Fprintf(io.Out, "registered %s (evaluation %s)\n", *job.ID, resp.EvalID)
	if *detach {
		return 0
	}
	ns := ""
	if job.Namespace != nil {
		ns = *job.Namespace
	}
	return waitPlaced(ctx, client, ns, *job.ID, io)
}

// templateNext says what a periodic or parameterized job is and what
// happens after it is registered ("" for any other job): Nomad never
// places such a parent and makes no evaluation for it; its children run.
func templateNext(job *api.Job) string {
	id := *job.ID
	switch {
	case job.IsPeriodic():
		sched := ""
		if p := job.Periodic; p.Spec != nil && *p.Spec != "" {
			sched = fmt.Sprintf(" (cron %q)", *p.Spec)
		} else if len(p.Specs) > 0 {
			sched = fmt.Sprintf(" (crons %q)", strings.Join(p.Specs, `", "`))
		}
		return fmt.Sprintf("a periodic job%s: Nomad runs nothing for it now, and launches a child job (%s/periodic-<time>) on its schedule, "+
			"each placed by gpushare as it comes (`nomad job periodic force %s` launches one now; `gpushare job status <child>` says where it went)", sched, id, id)
	case job.IsParameterized():
		return fmt.Sprintf("a parameterized job: Nomad runs nothing for it; gpushare pins it to a pool of GPUs and Nomad places each child of `nomad job dispatch %s` inside the pool. "+
			"Dispatch once `gpushare job status %s` shows it pinned (state template, with a placement): a child dispatched before waits for good", id, id)
	}
	return ""
}

// checkFit asks the placement core whether each gated group fits the
// cluster now; a group that does not fit is reported and waits at the gate.
func checkFit(ctx context.Context, client *api.Client, job *api.Job, profiles *interference.Model, io IO) error {
	nodes, allocs, err := listCluster(client)
	if err != nil {
		return err
	}
	st := model.New()
	names := map[string]string{} // node ID -> its name, else its ID's first 8 characters
	for _, n := range nodes {
		st.PutNode(n)
		names[n.ID] = n.Name
		if n.Name == "" {
			names[n.ID] = shortID(n.ID)
		}
	}
	for _, a := range allocs {
		st.PutAlloc(a)
	}
	snap := st.Snapshot(nil, nil).Snapshot
	policy, err := placement.New(placement.PolicyGpushare, placement.Options{})
	if err != nil {
		return err
	}
	for _, group := range pin.Gated(job) {
		req, err := pin.Request(job, group, profiles)
		if errors.Is(err, pin.ErrUnknownProfile) && profiles == nil {
			fmt.Fprintf(io.Err, "gpushare job run: group %s: %v; not checked against the cluster (the scheduler, which may define the profile, did not answer)\n", group, err)
			continue
		}
		if err != nil {
			return err
		}
		if never := placement.Impossible(snap, req); never != nil {
			return fmt.Errorf("group %s can never be placed on this cluster (%s): change the request", group, never)
		}
		// Nomad's rules of the job first, as the scheduler checks them
		rules, err := feasible.Compile(job, group, func(_ feasible.Level, c *api.Constraint) bool { return pin.IsGate(c) })
		if err != nil {
			return err
		}
		sel := rules.With(nil).Select(nodes)
		if len(sel.Allowed) == 0 {
			fmt.Fprintf(io.Out, "group %s does not fit now and will wait at the gate: no node its own rules allow (%s)\n", group, sel.Tally.String())
			continue
		}
		if len(sel.Allowed) < len(nodes) {
			req.Allowed = sel.Allowed
		}
		req.Models = sel.Narrow(req.Models)
		d := policy.Decide(snap, req)
		if d.Placed() {
			// a preview with the core's default policy on Nomad's view:
			// the scheduler decides with its own configuration and state
			p := d.Placements[0]
			fmt.Fprint(io.Out, fitsNow(group, names[p.Node], p.Reason))
		} else {
			fmt.Fprintf(io.Out, "group %s does not fit now and will wait at the gate: %s\n", group, usertext.Reason(fmt.Sprint(d.Refusal)))
		}
	}
	return nil
}

// carryPins copies the pins of the registered version into the new one
// for groups where nothing the scheduler decided on changed — the same
// request digest (resources, GPU request, gpushare.* meta and policy, at
// the count the pin was made for; pin.Record.ForRequest), and the same incarnation of
// the job — so they need no new decision. Any other group stays gated and
// is decided again.
func carryPins(client *api.Client, job *api.Job) []string {
	ns := ""
	if job.Namespace != nil {
		ns = *job.Namespace
	}
	old, _, err := client.Jobs().Info(*job.ID, &api.QueryOptions{Namespace: ns})
	if err != nil {
		return nil
	}
	// the new version as Nomad will hold it (its defaults filled in), to
	// compare with the version the pin was made for
	canon, err := canonical(job)
	if err != nil {
		return nil
	}
	var carried []string
	for _, group := range pin.Gated(job) {
		rec, ok := pin.ParseRecord(old, group)
		if !ok || !pin.Pinned(old, group) {
			continue
		}
		if rec.Request == "" || !rec.ForRequest(canon, group) || rec.Incarnation != pin.Incarnation(old) {
			continue
		}
		if deploysCanaries(canon, group) {
			// a changed version's canaries run beside the allocations they
			// replace and need shares of their own: carried, the pin left
			// them none and the deployment waited for ever. The scheduler
			// tells a version Nomad replaces (placed beside) from one it
			// updates in place (pinned as before), so it decides.
			continue
		}
		// the scheduler's signed placement, written back as it wrote it:
		// its constraints, device affinities, run-time environment and record
		placement, signature := pin.Carried(pin.Group(old, group))
		if _, err := pin.Repeat(job, group, placement, signature); err == nil {
			carried = append(carried, group)
			carryEnded(client, old, job, group) // a batch group's count without what ended
		}
	}
	return carried
}

// deploysCanaries reports whether a new version of a service job's group
// is deployed with canaries (its update block's canary, the job's when
// the group has none: canonical merges them).
func deploysCanaries(job *api.Job, group string) bool {
	tg := pin.Group(job, group)
	if tg == nil || tg.Update == nil || tg.Update.Canary == nil || *tg.Update.Canary == 0 {
		return false
	}
	return job.Type == nil || *job.Type == api.JobTypeService
}

// canonical is a copy of job with Nomad's defaults filled in.
func canonical(job *api.Job) (*api.Job, error) {
	b, err := json.Marshal(job)
	if err != nil {
		return nil, err
	}
	var c api.Job
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, err
	}
	c.Canonicalize()
	return &c, nil
}

// waitPlaced waits until no group of the job (in namespace ns) waits at
// the gate and one of its allocations runs or has finished.
func waitPlaced(ctx context.Context, client *api.Client, ns, id string, io IO) int {
	last := ""
	q := &api.QueryOptions{Namespace: ns}
	for {
		job, _, err := client.Jobs().Info(id, q)
		if err == nil {
			gated := pin.Gated(job)
			allocs, _, _ := client.Jobs().Allocations(id, false, q)
			running := 0
			for _, a := range allocs {
				if a.ClientStatus == "running" || a.ClientStatus == "complete" {
					running++
				}
			}
			line := fmt.Sprintf("%d group(s) waiting for gpushare, %d allocation(s) running or done", len(gated), running)
			if line != last {
				fmt.Fprintln(io.Err, line)
				last = line
			}
			if len(gated) == 0 && running > 0 {
				for _, tg := range job.TaskGroups {
					if rec, ok := pin.ParseRecord(job, *tg.Name); ok {
						fmt.Fprintf(io.Out, "group %s: %s\n", *tg.Name, rec.Summary())
					}
				}
				return 0
			}
		}
		select {
		case <-ctx.Done():
			fmt.Fprintf(io.Err, "gpushare job run: %s not running yet; `gpushare status` or the scheduler's /v1/jobs/%s says why\n", id, id)
			return 1
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// checkVC checks the job's gpushare.vc against the virtual clusters the
// scheduler at addr offers; a scheduler that does not answer gives a
// warning, not an error.
func checkVC(job *api.Job, sched scheduler) []jobspecs.Finding {
	named := false
	for _, tg := range job.TaskGroups {
		named = named || pin.Meta(job, tg)[pin.MetaVC] != ""
	}
	if !named || sched.addr == "" {
		return nil
	}
	var vcs []jobspecs.VC
	if err := sched.get("/v1/vcs", &vcs); err != nil {
		return []jobspecs.Finding{{Severity: jobspecs.Warning, Meta: pin.MetaVC, Message: fmt.Sprintf("%s not checked: %s", pin.MetaVC, sched.why(err))}}
	}
	return jobspecs.CheckVC(job, vcs)
}

// finishedBatch says why registering job would run nothing: it is a batch
// job that already completed and the jobspec changes nothing, so Nomad
// does not run it again ("" otherwise).
func finishedBatch(client *api.Client, job *api.Job) string {
	ns := ""
	if job.Namespace != nil {
		ns = *job.Namespace
	}
	old, _, err := client.Jobs().Info(*job.ID, &api.QueryOptions{Namespace: ns})
	if err != nil || old.Type == nil || *old.Type != api.JobTypeBatch || old.Status == nil || *old.Status != "dead" {
		return ""
	}
	plan, _, err := client.Jobs().Plan(job, true, &api.WriteOptions{Namespace: ns})
	if err != nil || plan.Diff == nil || plan.Diff.Type != "None" {
		return ""
	}
	return fmt.Sprintf("%s is a batch job that already completed, and this jobspec changes nothing: Nomad will not run it again; change it (a meta value will do) or purge it first (nomad job stop -purge %s)", *job.ID, *job.ID)
}

// schedulerProfiles returns the built-in interference profiles and those
// the scheduler at addr defines, or nil when it does not answer.
func schedulerProfiles(sched scheduler) *interference.Model {
	if sched.addr == "" {
		return nil
	}
	var ps []interference.Profile
	if err := sched.get("/v1/profiles", &ps); err != nil {
		return nil
	}
	m := interference.Default()
	for _, p := range ps {
		m.Profiles[strings.ToLower(p.Name)] = p
	}
	return m
}

// fitsNow is the preview's line for a group that fits: the placement's
// reason as users read it (allocations by the 8 characters Nomad's CLI
// shows, as gpushare job status names them).
func fitsNow(group, node, reason string) string {
	return fmt.Sprintf("group %s fits now, for example on node %s (%s); the scheduler decides when it places the job\n", group, node, usertext.Reason(reason))
}
