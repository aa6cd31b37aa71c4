package placement

import (
	"sync"
	"testing"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/devicefn/topologies"
	"github.com/shoenig/test/must"
)

var servers sync.Map // topology name -> topologies.Topology

// server is a real server of package topologies, parsed once.
func server(name string) topologies.Topology {
	if t, ok := servers.Load(name); ok {
		return t.(topologies.Topology)
	}
	t := topologies.MustGet(name)
	servers.Store(name, t)
	return t
}

// links and numa give a NodeSpec the wiring of a named real server; ""
// keeps the default (every pair NV1, NUMA node 0).
func links(name string) devicefn.Matrix {
	if name == "" {
		return nil
	}
	return server(name).Links
}

func numa(name string) []int {
	if name == "" {
		return nil
	}
	return server(name).NUMA
}

func cluster(t testing.TB, specs ...NodeSpec) *Snapshot {
	t.Helper()
	s := NewSnapshot()
	for _, sp := range specs {
		if sp.CPU == 0 {
			sp.CPU = 64000
		}
		if sp.MemoryMiB == 0 {
			sp.MemoryMiB = 512 * 1024
		}
		n, err := NodeFromSpec(sp)
		must.NoError(t, err)
		must.NoError(t, s.AddNode(n))
	}
	return s
}

func policy(t testing.TB, name string, opts Options) Policy {
	t.Helper()
	p, err := New(name, opts)
	must.NoError(t, err)
	return p
}

// place decides and applies, failing the test on a refusal.
func place(t testing.TB, s *Snapshot, p Policy, r Request) *Decision {
	t.Helper()
	if r.Count == 0 {
		r.Count = 1
	}
	d := p.Decide(s, r)
	must.True(t, d.Placed(), must.Sprintf("%s refused: %s", r.ID, d.Refusal))
	must.NoError(t, s.Apply(d))
	must.NoError(t, s.Check())
	return d
}

// gpuIdx returns the local indices of a placement's GPUs on a spec-built node.
func gpuIdx(p Placement) []int {
	var out []int
	for _, u := range p.GPUs {
		i := len(u) - 1
		for i > 0 && u[i-1] != '-' {
			i--
		}
		v := 0
		for _, c := range u[i:] {
			v = v*10 + int(c-'0')
		}
		out = append(out, v)
	}
	return out
}
