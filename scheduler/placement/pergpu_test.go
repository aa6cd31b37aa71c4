package placement

import (
	"testing"

	"github.com/shoenig/test/must"
)

// Two allocations of one whole GPU each on one 8-GPU node: with a device
// group per GPU, Nomad takes each from one GPU, so every policy places
// both there, on two GPUs; with a group per model gpushare keeps the
// second off the node (OnePerNode) and the group waits.
func TestPerGPUGroupsPlaceWholeGPUsOnOneNode(t *testing.T) {
	for _, name := range PolicyNames() {
		t.Run(name, func(t *testing.T) {
			r := Request{ID: "r", Count: 2, Shares: 100}
			s := cluster(t, NodeSpec{ID: "a", GPUs: 8, PerGPU: true})
			d := place(t, s, policy(t, name, Options{}), r)
			must.SliceLen(t, 2, d.Placements)
			must.Eq(t, "a", d.Placements[1].Node)
			must.SliceLen(t, 1, d.Placements[0].GPUs)
			must.SliceLen(t, 1, d.Placements[1].GPUs)
			must.NotEq(t, d.Placements[0].GPUs[0], d.Placements[1].GPUs[0])
			must.Eq(t, "", OnePerNode(cluster(t, NodeSpec{ID: "a", GPUs: 8, PerGPU: true}), r))

			today := cluster(t, NodeSpec{ID: "a", GPUs: 8})
			must.False(t, policy(t, name, Options{}).Decide(today, r).Placed())
			must.StrContains(t, OnePerNode(today, r), "at most one whole-GPU allocation of a group per node")

			// the rule explains the wait where the job's own rules allow
			// one node of several
			three := cluster(t, NodeSpec{ID: "a", GPUs: 4}, NodeSpec{ID: "b", GPUs: 4}, NodeSpec{ID: "c", GPUs: 4})
			must.Eq(t, "", OnePerNode(three, r))
			only := r
			only.Allowed = []string{"b"}
			must.False(t, policy(t, name, Options{}).Decide(three, only).Placed())
			must.StrContains(t, OnePerNode(three, only), "its 2 allocations need 2 nodes and 1 can hold one")
		})
	}
}

// Fractions of a group of count > 1 no longer stack on one GPU of a node
// whose GPUs are groups: four halves fill two GPUs of one node (policies
// that take whole GPUs for a fraction aside).
func TestPerGPUGroupsSpreadFractions(t *testing.T) {
	for _, name := range PolicyNames() {
		if name == PolicyHived || name == PolicyNomadNative {
			continue
		}
		t.Run(name, func(t *testing.T) {
			r := Request{ID: "r", Count: 4, Shares: 50}
			s := cluster(t, NodeSpec{ID: "a", GPUs: 2, PerGPU: true})
			must.Nil(t, Impossible(s, r))
			d := place(t, s, policy(t, name, Options{}), r)
			must.SliceLen(t, 4, d.Placements)
			gpus := map[string]int{}
			for _, p := range d.Placements {
				must.SliceLen(t, 1, p.GPUs)
				gpus[p.GPUs[0]]++
			}
			must.MapLen(t, 2, gpus)

			today := cluster(t, NodeSpec{ID: "a", GPUs: 2})
			must.NotNil(t, Impossible(today, r))
		})
	}
}

// One allocation of two GPUs cannot be had of a node whose GPUs are
// groups and whose plugin does not compose them (Nomad takes a request
// from one group; multigpu_test.go has the nodes that do): refused for good, saying
// so, where no other node could hold it; placed on a node with a group per
// model beside it.
func TestPerGPUGroupsRefuseMultiGPUAllocations(t *testing.T) {
	r := Request{ID: "r", Count: 1, Shares: 200}
	s := cluster(t, NodeSpec{ID: "a", GPUs: 8, PerGPU: true})
	ref := Impossible(s, r)
	must.NotNil(t, ref)
	must.EqOp(t, RefusedTooLarge, ref.Code)
	must.StrContains(t, ref.Message, `device_groups = "gpu"`)
	must.StrContains(t, ref.Message, "at most 100 shares per allocation")
	for _, name := range PolicyNames() {
		d := policy(t, name, Options{}).Decide(s, r)
		must.False(t, d.Placed(), must.Sprint(name))
		must.StrContains(t, d.Refusal.Message, "one allocation holds at most one GPU", must.Sprint(name))
	}
	mixed := cluster(t, NodeSpec{ID: "a", GPUs: 8, PerGPU: true}, NodeSpec{ID: "b", GPUs: 2})
	d := place(t, mixed, policy(t, PolicyBestFit, Options{}), r)
	must.Eq(t, "b", d.Placements[0].Node)
}

// On a node the service can stage (SetStaging: it holds GPUs while Nomad
// places the group's allocations one after the other), every policy puts
// two whole-GPU allocations of one group on one 8-GPU node, each on GPUs
// of its own, and the rule of one per node no longer explains a wait;
// nodes not marked keep the rule.
func TestStagedNodesHoldSeveralWholeGPUAllocations(t *testing.T) {
	for _, name := range PolicyNames() {
		t.Run(name, func(t *testing.T) {
			for _, shares := range []int{100, 200} {
				r := Request{ID: "r", Count: 2, Shares: shares}
				s := cluster(t, NodeSpec{ID: "a", GPUs: 8})
				s.SetStaging(func(id string) bool { return id == "a" })
				must.Eq(t, "", OnePerNode(s, r))
				d := place(t, s, policy(t, name, Options{}), r)
				must.SliceLen(t, 2, d.Placements)
				seen := map[string]bool{}
				for _, p := range d.Placements {
					must.Eq(t, "a", p.Node)
					must.SliceLen(t, shares/100, p.GPUs)
					for _, g := range p.GPUs {
						must.MapNotContainsKey(t, seen, g, must.Sprint("a GPU given to two allocations"))
						seen[g] = true
					}
				}
				s.SetStaging(nil)
				must.StrContains(t, OnePerNode(s, Request{ID: "r2", Count: 2, Shares: shares}), "neither the raw_exec nor the exec driver")
			}
			// spread first: with a second node, one allocation each
			two := cluster(t, NodeSpec{ID: "a", GPUs: 8}, NodeSpec{ID: "b", GPUs: 8})
			two.SetStaging(func(string) bool { return true })
			d := place(t, two, policy(t, name, Options{}), Request{ID: "r", Count: 2, Shares: 100})
			must.NotEq(t, d.Placements[0].Node, d.Placements[1].Node)
		})
	}
}

// A batch group's allocations end by themselves, so the service never
// stages them (Request.Batch): on a staged node its whole GPUs keep the
// rule of one per node and its fractions stack on one GPU, as on a node
// the service cannot stage.
func TestBatchRequestsAreNotStaged(t *testing.T) {
	for _, name := range PolicyNames() {
		t.Run(name, func(t *testing.T) {
			s := cluster(t, NodeSpec{ID: "a", GPUs: 8})
			s.SetStaging(func(string) bool { return true })
			whole := Request{ID: "w", Count: 2, Shares: 100, Batch: true}
			must.StrContains(t, OnePerNode(s, whole), "batch group")
			must.False(t, policy(t, name, Options{}).Decide(s, whole).Placed())
			frac := Request{ID: "f", Count: 3, Shares: 60, Batch: true}
			must.NotNil(t, Impossible(s, frac), must.Sprint("one GPU holds one 60-share fraction and a batch group's stack on one GPU"))
			must.False(t, policy(t, name, Options{}).Decide(s, frac).Placed())
			// on two nodes, one whole-GPU allocation each
			two := cluster(t, NodeSpec{ID: "a", GPUs: 8}, NodeSpec{ID: "b", GPUs: 8})
			two.SetStaging(func(string) bool { return true })
			d := place(t, two, policy(t, name, Options{}), Request{ID: "w2", Count: 2, Shares: 100, Batch: true, Pack: true})
			must.NotEq(t, d.Placements[0].Node, d.Placements[1].Node)
		})
	}
}

// Fractions of a group that one GPU cannot hold together: on a staged
// node, the next goes to another GPU of the node once the first is full
// (never two GPUs for one allocation); elsewhere they stack on one GPU
// and the rest wait.
func TestStagedNodesTakeFractionsOnSeveralGPUs(t *testing.T) {
	for _, name := range PolicyNames() {
		t.Run(name, func(t *testing.T) {
			r := Request{ID: "r", Count: 3, Shares: 60}
			s := cluster(t, NodeSpec{ID: "a", GPUs: 4})
			must.False(t, policy(t, name, Options{}).Decide(s, r).Placed())
			s.SetStaging(func(string) bool { return true })
			must.Nil(t, Impossible(s, r))
			d := place(t, s, policy(t, name, Options{}), r)
			seen := map[string]bool{}
			for _, p := range d.Placements {
				must.SliceLen(t, 1, p.GPUs)
				must.True(t, len(p.Shares) >= 60)
				seen[p.GPUs[0]] = true
			}
			must.MapLen(t, 3, seen)
			// fractions that fit one GPU still stack on it
			fresh := cluster(t, NodeSpec{ID: "a", GPUs: 4})
			fresh.SetStaging(func(string) bool { return true })
			d = place(t, fresh, policy(t, name, Options{}), Request{ID: "two", Count: 2, Shares: 20})
			if len(d.Placements[0].Shares) == 20 { // policies that take whole GPUs (hived) do not stack
				must.Eq(t, d.Placements[0].GPUs, d.Placements[1].GPUs)
			}
		})
	}
}
