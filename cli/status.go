package cli

import (
	"encoding/json"
	"fmt"

	"github.com/gpushare/gpushare/scheduler/gpumap"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/hashicorp/nomad/api"
)

func runStatus(args []string, io IO) int {
	fs := newFlags("status", "status [-address URL] [-json]", io)
	addr := fs.String("address", "", "Nomad HTTP address (default: $NOMAD_ADDR or http://127.0.0.1:4646); the token comes from $NOMAD_TOKEN")
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
	return 0
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
		return nil, nil, fmt.Errorf("listing nodes at %s: %w (is Nomad running? set -address or NOMAD_ADDR)", client.Address(), err)
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
		return nil, nil, fmt.Errorf("listing allocations: %w", err)
	}
	allocs := make([]*api.Allocation, 0, len(stubsA))
	for _, s := range stubsA {
		allocs = append(allocs, model.FromStub(s))
	}
	return nodes, allocs, nil
}
