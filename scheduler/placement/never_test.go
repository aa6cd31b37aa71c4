package placement

import (
	"testing"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/shoenig/test/must"
)

func TestImpossible(t *testing.T) {
	s := cluster(t, NodeSpec{ID: "a", GPUs: 8, CPU: 96000, MemoryMiB: 393216}, NodeSpec{ID: "b", GPUs: 2, CPU: 16000, MemoryMiB: 122880, Model: "T4"})
	cases := []struct {
		name string
		r    Request
		code string // "" = may fit
	}{
		{"fits", Request{ID: "r", Count: 2, Shares: 200}, ""},
		{"more GPUs than any node", Request{ID: "r", Count: 1, Shares: 1600}, RefusedTooLarge},
		// one whole-GPU allocation of a group per node is gpushare's rule,
		// not the cluster's: it waits, saying why (OnePerNode)
		{"more whole-GPU allocations than nodes", Request{ID: "r", Count: 3, Shares: 200}, ""},
		{"more whole-GPU allocations than the GPUs hold", Request{ID: "r", Count: 6, Shares: 200}, RefusedTooLarge},
		{"fractions stack on one GPU per node", Request{ID: "r", Count: 8, Shares: 25}, ""},
		{"more fractions than one GPU per node holds", Request{ID: "r", Count: 9, Shares: 25}, RefusedTooLarge},
		{"model nobody has", Request{ID: "r", Count: 1, Shares: 100, Models: []string{"H100"}}, RefusedNoModel},
		{"more memory than any node", Request{ID: "r", Count: 1, Shares: 10, Res: Resources{MemoryMiB: 1 << 30}}, RefusedTooLarge},
		{"invalid", Request{ID: "r", Count: 0, Shares: 10}, RefusedInvalid},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ref := Impossible(s, c.r)
			if c.code == "" {
				must.Nil(t, ref)
				return
			}
			must.NotNil(t, ref)
			must.EqOp(t, c.code, ref.Code)
		})
	}
	must.StrContains(t, Impossible(s, Request{ID: "r", Count: 1, Shares: 1600}).Message, "the largest node has 8")
	// a busy cluster may fit later: Impossible ignores use
	place(t, s, policy(t, PolicyBestFit, Options{}), Request{ID: "busy", Count: 1, Shares: 800})
	must.False(t, s.Empty())
	must.Nil(t, Impossible(s, Request{ID: "r", Count: 1, Shares: 800}))
}

// A request whose GPU model the cluster has, but whose CPU or memory no
// node with that model has, is too large, not a missing model: the refusal
// names the resource that is short and the largest node's figure.
func TestImpossibleNamesTheShortResource(t *testing.T) {
	s := cluster(t, NodeSpec{ID: "a", GPUs: 8, CPU: 96000, MemoryMiB: 393216}, NodeSpec{ID: "b", GPUs: 2, CPU: 16000, MemoryMiB: 122880, Model: "T4"})
	for _, c := range []struct {
		name string
		r    Request
		code string
		want []string
		not  []string
	}{
		{"memory", Request{ID: "r", Count: 1, Shares: 10, Res: Resources{MemoryMiB: 1 << 20}}, RefusedTooLarge,
			[]string{"needs memory 1048576 MiB per allocation, and the largest of the 2 node(s) with GPUs of any model has 393216 MiB (node a)"},
			[]string{"cpu", "no node has GPUs"}},
		{"cpu of the model's nodes", Request{ID: "r", Count: 1, Shares: 10, Models: []string{"T4"}, Res: Resources{CPU: 32000}}, RefusedTooLarge,
			[]string{"needs cpu 32000 MHz per allocation, and the largest of the 1 node(s) with GPUs of T4 has 16000 MHz (node b)"},
			[]string{"memory", "no node has GPUs"}},
		{"both", Request{ID: "r", Count: 1, Shares: 10, Res: Resources{CPU: 200000, MemoryMiB: 1 << 20}}, RefusedTooLarge,
			[]string{"needs cpu 200000 MHz per allocation", "; needs memory 1048576 MiB per allocation", "lower the task's resources"}, nil},
		{"each on a node, never both", Request{ID: "r", Count: 1, Shares: 10, Res: Resources{CPU: 96000, MemoryMiB: 393216 + 1}}, RefusedTooLarge,
			[]string{"needs memory 393217 MiB"}, nil},
		{"the model nobody has", Request{ID: "r", Count: 1, Shares: 10, Models: []string{"H100"}, Res: Resources{CPU: 1 << 20}}, RefusedNoModel,
			[]string{"no node has GPUs of H100 (the cluster has "}, []string{"cpu"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ref := Impossible(s, c.r)
			must.NotNil(t, ref)
			must.EqOp(t, c.code, ref.Code, must.Sprint(ref.Message))
			for _, w := range c.want {
				must.StrContains(t, ref.Message, w)
			}
			for _, n := range c.not {
				must.StrNotContains(t, ref.Message, n)
			}
		})
	}
	two := cluster(t, NodeSpec{ID: "cpu", GPUs: 1, CPU: 64000, MemoryMiB: 1024}, NodeSpec{ID: "mem", GPUs: 1, CPU: 1000, MemoryMiB: 65536})
	ref := Impossible(two, Request{ID: "r", Count: 1, Shares: 10, Res: Resources{CPU: 32000, MemoryMiB: 32768}})
	must.NotNil(t, ref)
	must.EqOp(t, RefusedTooLarge, ref.Code)
	must.StrContains(t, ref.Message, "none of the 2 node(s) with GPUs of any model has both (the most cpu: 64000 MHz, node cpu; the most memory: 65536 MiB, node mem)")
}

// The rule that keeps a second whole-GPU allocation of a group off a node
// is explained when it is what stops the group, and only then.
func TestOnePerNode(t *testing.T) {
	s := cluster(t, NodeSpec{ID: "a", GPUs: 8})
	must.StrContains(t, OnePerNode(s, Request{ID: "r", Count: 2, Shares: 100}), "its 2 allocations need 2 nodes and 1 can hold one")
	must.Eq(t, "", OnePerNode(s, Request{ID: "r", Count: 1, Shares: 200}))
	must.Eq(t, "", OnePerNode(s, Request{ID: "r", Count: 4, Shares: 25}))
	must.Nil(t, Impossible(s, Request{ID: "r", Count: 2, Shares: 100}))
	two := cluster(t, NodeSpec{ID: "a", GPUs: 8}, NodeSpec{ID: "b", GPUs: 8})
	must.Eq(t, "", OnePerNode(two, Request{ID: "r", Count: 2, Shares: 100}))
}

func TestReservableAndOnGPU(t *testing.T) {
	s := cluster(t, NodeSpec{ID: "a", GPUs: 4})
	n, _ := s.Node("a")
	sh := func(g, k int) string { return devicefn.ShareID{UUID: n.GPUs[g].UUID, Index: k}.String() }
	must.True(t, s.Reservable([]string{sh(0, 0), sh(0, 1)}))  // a fraction of one GPU
	must.False(t, s.Reservable([]string{sh(0, 0), sh(1, 0)})) // a fraction over two
	var whole []string
	for k := range 100 {
		whole = append(whole, sh(2, k), sh(3, k))
	}
	must.True(t, s.Reservable(whole))                              // two whole GPUs
	must.False(t, s.Reservable(append(whole[:150:150], sh(0, 0)))) // not whole GPUs
	must.NoError(t, s.AddAlloc(Alloc{ID: "x", Node: "a", Shares: []string{sh(1, 3)}}))
	must.Eq(t, []string{"x"}, s.OnGPU(n.GPUs[1].UUID))
	must.SliceEmpty(t, s.OnGPU(n.GPUs[0].UUID))
}
