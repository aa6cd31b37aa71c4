package service

import (
	"slices"
	"testing"

	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// racked are three DGX-1s of dc1: node-1 and node-2 in rack r1, node-3 in
// r2 (node meta "rack").
func racked(t *testing.T) []*api.Node {
	nodes := []*api.Node{dgx1As(t, "node-1", "dc1"), dgx1As(t, "node-2", "dc1"), dgx1As(t, "node-3", "dc1")}
	for i, r := range []string{"r1", "r1", "r2"} {
		nodes[i].Meta["rack"] = r
	}
	return nodes
}

// TestDistinctPropertyKeepsEveryAllocationApart: a group of count 2 with
// distinct_property on the rack is pinned to nodes of two racks, as Nomad
// would place it — even when the group asks to pack (which alone would
// put both on one node); a count the racks can never hold is refused,
// saying why, and holds nothing.
func TestDistinctPropertyKeepsEveryAllocationApart(t *testing.T) {
	rackOf := map[string]string{"node-1": "r1", "node-2": "r1", "node-3": "r2"}
	for _, level := range []string{"group", "job"} {
		t.Run(level, func(t *testing.T) {
			j := gated("web", 25)
			j.TaskGroups[0].Count = ptr(2)
			j.TaskGroups[0].Meta = map[string]string{pin.MetaReplicas: "pack"}
			c := &api.Constraint{Operand: "distinct_property", LTarget: "${meta.rack}"}
			if level == "group" {
				j.TaskGroups[0].Constraints = append(j.TaskGroups[0].Constraints, c)
			} else {
				j.Constraints = append(j.Constraints, c)
			}
			f, _, rec := placedFirst(t, j, racked(t)...)
			must.Eq(t, 2, len(rec.Nodes), must.Sprintf("pinned to %v", rec.Nodes))
			racks := []string{rackOf[rec.Nodes[0]], rackOf[rec.Nodes[1]]}
			slices.Sort(racks)
			must.Eq(t, []string{"r1", "r2"}, racks)
			_ = f
		})
	}
	t.Run("more than the racks hold", func(t *testing.T) {
		j := gated("web", 25)
		j.TaskGroups[0].Count = ptr(3)
		j.TaskGroups[0].Constraints = append(j.TaskGroups[0].Constraints, &api.Constraint{Operand: "distinct_property", LTarget: "${meta.rack}"})
		f := &fakeNomad{nodes: racked(t), jobs: map[string]*api.Job{}}
		f.put(j)
		s := loadedService(t, f)
		s.loop.reconcile(t.Context())
		_, ok := pin.ParseRecord(f.jobs["web"], "g")
		must.False(t, ok)
		must.StrContains(t, s.loop.answers.pending[key("web")], "distinct_property ${meta.rack} allows 1 allocation(s) per value")
	})
}

// TestReplicasOfAGroupSpreadOverNodes: three replicas of a service are
// pinned to three nodes while three nodes have room (Nomad's job
// anti-affinity), not packed onto one GPU of one node, so one node's or
// GPU's fault does not take them all; gpushare.replicas = "pack" packs them.
func TestReplicasOfAGroupSpreadOverNodes(t *testing.T) {
	for _, pack := range []bool{false, true} {
		j := gated("web", 25)
		j.TaskGroups[0].Count = ptr(3)
		if pack {
			j.TaskGroups[0].Meta = map[string]string{pin.MetaReplicas: "pack"}
		}
		_, _, rec := placedFirst(t, j, racked(t)...)
		want := 3
		if pack {
			want = 1
		}
		must.Eq(t, want, len(rec.Nodes), must.Sprintf("pack=%v: pinned to %v", pack, rec.Nodes))
		gpus := map[string]bool{}
		for _, g := range rec.GPUs {
			gpus[g] = true
		}
		must.Eq(t, want, len(gpus), must.Sprintf("pack=%v: on GPUs %v", pack, rec.GPUs))
	}
}
