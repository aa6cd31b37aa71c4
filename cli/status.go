package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/gpushare/gpushare/scheduler/gpumap"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/gpushare/gpushare/scheduler/service"
	"github.com/hashicorp/nomad/api"
)

func runStatus(args []string, io IO) int {
	fs := newFlags("status", "status [-address URL] [-scheduler URL] [-json]", io)
	addr := fs.String("address", "", "Nomad HTTP address (default: $NOMAD_ADDR or http://127.0.0.1:4646); the token comes from $NOMAD_TOKEN")
	schedFlag := addSchedulerFlag(fs, "for the groups that wait and why and the MIG layouts it recommends")
	asJSON := fs.Bool("json", false, "print the map as JSON")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	m, err := FetchMap(*addr)
	if err != nil {
		fmt.Fprintf(io.Err, "gpushare status: %v\n", err)
		return 1
	}
	if *asJSON {
		enc := json.NewEncoder(io.Out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(m); err != nil {
			return 1
		}
		return 0
	}
	if err := gpumap.Render(io.Out, m); err != nil {
		return 1
	}
	sched := schedFlag.resolve(*addr)
	if sched.addr == "" {
		return 0
	}
	if !renderWaiting(io, sched) {
		return 1
	}
	renderUnpairs(io, sched.addr)
	renderMIGLayouts(io, sched.addr)
	return 0
}

// renderWaiting prints the groups the scheduler says wait or were refused
// for good, with why. A scheduler that cannot be reached is said on stderr
// and makes it return false: the status is then incomplete, and the
// command fails (-scheduler "" skips the scheduler).
func renderWaiting(io IO, sched scheduler) bool {
	var groups []service.Waiting
	if err := getJSON(strings.TrimSuffix(sched.addr, "/")+"/v1/groups", &groups); err != nil {
		fmt.Fprintf(io.Err, "gpushare status: waiting groups not shown: %s: %v (-scheduler \"\" skips them)\n", sched.hint(), err)
		return false
	}
	if len(groups) == 0 {
		fmt.Fprintln(io.Out, "\nno group waits for gpushare")
		return true
	}
	fmt.Fprintf(io.Out, "\n%d group(s) wait for gpushare:\n", len(groups))
	for _, g := range groups {
		fmt.Fprintf(io.Out, "  %s/%s/%s  %s: %s\n", g.Namespace, g.Job, g.Group, g.State, g.Reason)
	}
	return true
}

// FetchMap reads nodes and allocations from Nomad and builds the GPU map.
func FetchMap(addr string) (*gpumap.Map, error) {
	cfg := api.DefaultConfig()
	if addr != "" {
		cfg.Address = addr
	}
	client, err := api.NewClient(cfg)
	if err != nil {
		return nil, err
	}
	return fetchMap(client)
}

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
func renderUnpairs(io IO, addr string) {
	var list []service.Unpaired
	if err := getJSON(strings.TrimSuffix(addr, "/")+"/v1/unpairs", &list); err != nil || len(list) == 0 {
		return // a scheduler that cannot be reached was noted above
	}
	fmt.Fprintf(io.Out, "\n%d group(s) unpaired (moved off a shared GPU, newest first):\n", len(list))
	for _, u := range list {
		fmt.Fprintf(io.Out, "  %s/%s/%s  %s: %s\n", u.Namespace, u.Job, u.Group, u.At.UTC().Format(time.RFC3339), u.Reason)
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
			return "Nomad refused the token: set NOMAD_TOKEN to a token with " + need
		}
		return "Nomad answered with an error"
	}
	return "is Nomad running? set -address or NOMAD_ADDR"
}
