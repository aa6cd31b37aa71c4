package pin

import (
	"slices"
	"testing"

	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

func limitsOf(tg *api.TaskGroup) []*api.Constraint {
	var out []*api.Constraint
	for _, c := range tg.Constraints {
		if c.Operand == OpDistinctProperty {
			out = append(out, c)
		}
	}
	return out
}

// A node pin of a group whose replicas spread limits each node to the
// allocations its decision put there, so that Nomad cannot stack a scale
// past the pin onto the pinned nodes: the limit moves with each pin, in
// place (a group constraint), is written once, written back by Repeat,
// gone with Unpin, and a user's own identical rule stays.
func TestANodePinLimitsAllocationsPerNode(t *testing.T) {
	j := job(25)
	rec, err := Pin(j, "g", inPlace("n1", "n2"))
	must.NoError(t, err)
	must.Eq(t, 1, rec.PerNode)
	tg := Group(j, "g")
	must.Eq(t, []*api.Constraint{{LTarget: NodeAttribute, Operand: OpDistinctProperty, RTarget: "1"}}, limitsOf(tg))
	before := Spec(j, "g")
	placement, signature := Carried(tg)

	// pinned again with two on n1: the limit follows, once
	rec, err = Pin(j, "g", inPlace("n1", "n1", "n2"))
	must.NoError(t, err)
	must.Eq(t, 2, rec.PerNode)
	must.Eq(t, []*api.Constraint{{LTarget: NodeAttribute, Operand: OpDistinctProperty, RTarget: "2"}}, limitsOf(tg))
	must.Eq(t, before, Spec(j, "g"), must.Sprint("the limit is a group constraint: nothing destructive changed"))

	// the first version written back byte for byte
	_, err = Repeat(j, "g", placement, signature)
	must.NoError(t, err)
	must.Eq(t, []*api.Constraint{{LTarget: NodeAttribute, Operand: OpDistinctProperty, RTarget: "1"}}, limitsOf(tg))

	// a user's own rule that says the same stays through pins and Unpin
	own := &api.Constraint{LTarget: NodeAttribute, Operand: OpDistinctProperty, RTarget: "1"}
	tg.Constraints = slices.Insert(tg.Constraints, 0, own)
	_, err = Pin(j, "g", inPlace("n3"))
	must.NoError(t, err)
	must.Len(t, 2, limitsOf(tg))
	Unpin(j, "g")
	must.Eq(t, []*api.Constraint{own}, limitsOf(tg))
}

// Packed replicas, groups that deploy canaries (which run beside the
// allocations they replace) and share pins get no limit.
func TestPerNodeLimitOnlyWhereReplicasSpreadWithoutCanaries(t *testing.T) {
	packed := job(25)
	Group(packed, "g").Meta = map[string]string{MetaReplicas: "pack"}
	canary := job(25)
	Group(canary, "g").Update = &api.UpdateStrategy{Canary: ref(1)}
	canaryJob := job(25)
	canaryJob.Update = &api.UpdateStrategy{Canary: ref(2)}
	for name, j := range map[string]*api.Job{"packed": packed, "group canary": canary, "job canary": canaryJob} {
		rec, err := Pin(j, "g", inPlace("n1", "n2"))
		must.NoError(t, err)
		must.Eq(t, ContractNode, rec.Contract)
		must.Eq(t, 0, rec.PerNode, must.Sprint(name))
		must.SliceEmpty(t, limitsOf(Group(j, "g")), must.Sprint(name))
	}
	share := job(25)
	d := inPlace("n1", "n2")
	d.InPlace = false
	rec, err := Pin(share, "g", d)
	must.NoError(t, err)
	must.Eq(t, 0, rec.PerNode)
	must.SliceEmpty(t, limitsOf(Group(share, "g")))
}
