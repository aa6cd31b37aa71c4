package cli

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/gpushare/gpushare/internal/usertext"
	"github.com/gpushare/gpushare/scheduler/gpumap"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/gpushare/gpushare/scheduler/service"
	"github.com/hashicorp/nomad/api"
)

func runStatus(args []string, io IO) int {
	fs := newFlags("status", "status [-json | -t TEMPLATE] [-scheduler URL] [Nomad flags: -address, -token, -region, -ca-cert, ...]", io)
	nf := addNomadFlags(fs, "")
	schedFlag := addSchedulerFlag(fs, "for the groups that wait and why and the MIG layouts it recommends")
	out := addFormatFlags(fs, "the GPU map")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(io.Err, "gpushare status: takes no arguments, got %q\n", fs.Arg(0))
		fs.Usage()
		return exitUsage
	}
	if code, ok := out.check(io, "gpushare status"); !ok {
		return code
	}
	client, err := nf.client(0)
	if err != nil {
		fmt.Fprintf(io.Err, "gpushare status: %v\n", err)
		return 1
	}
	m, err := fetchMap(client)
	if err != nil {
		fmt.Fprintf(io.Err, "gpushare status: %v\n", err)
		return 1
	}
	if out.set() {
		return out.write(io, "gpushare status", m)
	}
	if err := gpumap.Render(io.Out, m); err != nil {
		return 1
	}
	sched := schedFlag.resolve(nf)
	if sched.addr == "" {
		return 0
	}
	if !renderWaiting(io, sched) {
		return 1
	}
	renderUnpairs(io, sched)
	renderMIGLayouts(io, sched)
	return 0
}

// renderWaiting prints the groups the scheduler says wait or were refused
// for good, with why. A scheduler that cannot be reached is said on stderr
// and makes it return false: the status is then incomplete, and the
// command fails (-scheduler "" skips the scheduler).
func renderWaiting(io IO, sched scheduler) bool {
	var groups []service.Waiting
	if err := sched.get("/v1/groups", &groups); err != nil {
		fmt.Fprintf(io.Err, "gpushare status: waiting groups not shown: %s (-scheduler \"\" skips them)\n", sched.why(err))
		return false
	}
	if len(groups) == 0 {
		fmt.Fprintln(io.Out, "\nno group waits for gpushare")
		return true
	}
	// waiting and refused are told apart: a refused group never runs as
	// it is, a waiting one runs once there is room
	var waiting, refused []service.Waiting
	for _, g := range groups {
		if g.State == "refused" {
			refused = append(refused, g)
		} else {
			waiting = append(waiting, g)
		}
	}
	for _, part := range []struct {
		groups []service.Waiting
		head   string
	}{
		{waiting, "%d group(s) wait for gpushare:"},
		{refused, "%d group(s) refused for good (they never run as they are: change them):"},
	} {
		if len(part.groups) == 0 {
			continue
		}
		fmt.Fprintf(io.Out, "\n"+part.head+"\n", len(part.groups))
		for _, g := range part.groups {
			fmt.Fprintf(io.Out, "  %s/%s/%s  %s: %s\n", g.Namespace, g.Job, g.Group, g.State, usertext.Reason(g.Reason))
		}
	}
	return true
}

// fetchMap reads nodes and allocations from Nomad and builds the GPU map.
func fetchMap(client *api.Client) (*gpumap.Map, error) {
	nodes, allocs, err := listCluster(client)
	if err != nil {
		return nil, err
	}
	return gpumap.Build(nodes, allocs), nil
}

// listCluster reads every node in full and every allocation with its
// resources, in one listing.
func listCluster(client *api.Client) ([]*api.Node, []*api.Allocation, error) {
	stubs, _, err := client.Nodes().List(nil)
	if err != nil {
		return nil, nil, fmt.Errorf("listing nodes at %s: %w (%s)", client.Address(), err, nomadHint(err, "node { policy = \"read\" }"))
	}
	var nodes []*api.Node
	for _, s := range stubs {
		n, _, err := client.Nodes().Info(s.ID, nil)
		if err != nil {
			return nil, nil, fmt.Errorf("reading node %s: %w", s.Name, err)
		}
		nodes = append(nodes, n)
	}
	stubsA, _, err := client.Allocations().List(&api.QueryOptions{Params: map[string]string{"resources": "true"}})
	if err != nil {
		return nil, nil, fmt.Errorf("listing allocations: %w (%s)", err, nomadHint(err, "read-job in the namespaces to show"))
	}
	allocs := make([]*api.Allocation, 0, len(stubsA))
	for _, s := range stubsA {
		allocs = append(allocs, model.FromStub(s))
	}
	return nodes, allocs, nil
}

// renderUnpairs prints the groups the scheduler last moved off a GPU they
// shared because a pairing ran slower than a production job's bound.
func renderUnpairs(io IO, sched scheduler) {
	var list []service.Unpaired
	if err := sched.get("/v1/unpairs", &list); err != nil || len(list) == 0 {
		return // a scheduler that cannot be reached was noted above
	}
	fmt.Fprintf(io.Out, "\n%d group(s) unpaired (moved off a shared GPU, newest first):\n", len(list))
	for _, u := range list {
		fmt.Fprintf(io.Out, "  %s/%s/%s  %s: %s\n", u.Namespace, u.Job, u.Group, u.At.UTC().Format(time.RFC3339), usertext.Reason(u.Reason))
	}
}

// nomadHint says what to do about an error from Nomad: a refusal is about
// the token (need: the capability it lacks), anything else about reaching
// Nomad.
func nomadHint(err error, need string) string {
	var ue api.UnexpectedResponseError
	if errors.As(err, &ue) {
		switch ue.StatusCode() {
		case http.StatusForbidden, http.StatusUnauthorized:
			return fmt.Sprintf("Nomad refused the token (%d %s): set NOMAD_TOKEN or -token to a token with %s", ue.StatusCode(), nomadError(ue), need)
		}
		return "Nomad answered with an error"
	}
	return "is Nomad running? set -address or NOMAD_ADDR"
}
