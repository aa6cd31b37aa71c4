package pin

import (
	"reflect"
	"slices"
	"testing"

	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// inPlace is a decision of count allocations of 25 shares, one per node,
// that may be pinned by node alone.
func inPlace(nodes ...string) *placement.Decision {
	d := &placement.Decision{Policy: "gpushare", InPlace: true}
	for i, n := range nodes {
		gpu := "GPU-" + n
		d.Placements = append(d.Placements, placement.Placement{Node: n, GPUs: []string{gpu},
			Shares: []string{gpu + ":0", gpu + ":1"}, AllocID: "a" + string(rune('0'+i))})
	}
	return d
}

func devOf(j *api.Job) *api.RequestedDevice { return device(Group(j, "g")) }

func TestANodePinNamesOnlyItsNodes(t *testing.T) {
	j := job(25)
	rec, err := Pin(j, "g", inPlace("n1", "n2"))
	must.NoError(t, err)
	must.Eq(t, ContractNode, rec.Contract)
	must.StrContains(t, rec.Summary(), "checked in place")
	tg := Group(j, "g")

	// the device block names no shares: the GPU is Nomad's, ranked by the
	// fixed cell-rank affinities (and the index, to break ties)
	dev := devOf(j)
	for _, c := range dev.Constraints {
		must.NotEq(t, DeviceAttribute, c.LTarget)
	}
	must.Eq(t, RankAffinities(), dev.Affinities)
	must.True(t, HasRankAffinities(tg))
	must.False(t, HasIndexAffinities(tg))
	// replicas spread over the pin's nodes, as the decision spread them
	must.SliceContainsFunc(t, tg.Spreads, nodeSpread(), func(a, b *api.Spread) bool { return isNodeSpread(a) && isNodeSpread(b) })
	// the group's node constraint, and the record carried in constraints
	// that always hold, not in the meta
	must.SliceContainsFunc(t, tg.Constraints, NodeConstraint(rec), sameConstraint)
	_, inMeta := tg.Meta[MetaPlacement]
	must.False(t, inMeta)
	got, ok := ParseRecord(j, "g")
	must.True(t, ok)
	must.Eq(t, []string{"n1", "n2"}, got.Nodes)
	must.True(t, Pinned(j, "g"))

	// signed where it is carried
	Sign(tg, "sig-1")
	p, sig := Carried(tg)
	must.Eq(t, "sig-1", sig)
	must.StrContains(t, p, `"contract":"node"`)
	_, inMeta = tg.Meta[MetaSignature]
	must.False(t, inMeta)
	for _, c := range tg.Constraints {
		if IsCarrier(c) {
			must.NotEq(t, c.LTarget, c.RTarget) // "!=" of two literals: always holds
		}
	}
}

// What Nomad treats as destructive (the device block, task env, meta) is
// the same from one node pin of a group to the next; only the group's
// constraints change.
func TestANodeRepinChangesOnlyWhatNomadChecksInPlace(t *testing.T) {
	j := job(25)
	j.TaskGroups[0].Meta[MetaClass] = "opportunistic"
	rt := Runtime{Sharing: "mps", SharesPerGPU: 100, ClientPriority: 1}
	_, err := PinWith(j, "g", inPlace("n1"), rt)
	must.NoError(t, err)
	Sign(Group(j, "g"), "sig-1")
	first := Writable(j)
	must.MapContainsKey(t, gpuTask(Group(first, "g")).Env, "CUDA_MPS_CLIENT_PRIORITY")

	// scaled, and pinned again onto two nodes, now on time-sliced GPUs:
	// a share pin would drop the MPS priority from the env
	next := Writable(j)
	next.TaskGroups[0].Count = ptr(2)
	rec, err := PinWith(next, "g", inPlace("n1", "n2"), Runtime{})
	must.NoError(t, err)
	Sign(Group(next, "g"), "sig-2")
	must.Eq(t, []string{"n1", "n2"}, rec.Nodes)

	a, b := Group(first, "g"), Group(next, "g")
	must.True(t, reflect.DeepEqual(a.Tasks, b.Tasks), must.Sprint("tasks (device block, env) changed"))
	must.Eq(t, a.Meta, b.Meta)
	must.Eq(t, first.Meta, next.Meta)
	must.NotEq(t, a.Constraints, b.Constraints)

	// the user's file again (gated, no affinities): the same Spec as the
	// pinned version, whose device block the pin wrote
	user := job(25)
	user.TaskGroups[0].Meta[MetaClass] = "opportunistic"
	must.Eq(t, Spec(first, "g"), Spec(user, "g"))
	// pinned again as it is: byte for byte
	again := Writable(next)
	p, sig := Carried(Group(next, "g"))
	_, err = Repeat(again, "g", p, sig)
	must.NoError(t, err)
	must.True(t, reflect.DeepEqual(next.TaskGroups, again.TaskGroups))
}

// A group a scheduler before node pins pinned by its shares keeps that pin
// as it is (an upgrade restarts nothing); pinned again, it moves to a node
// pin, and a node pin that can no longer be one moves back.
func TestASharePinMovesToANodePinOnlyWhenPinnedAgain(t *testing.T) {
	j := job(25)
	shares := inPlace("n1")
	shares.InPlace = false
	_, err := Pin(j, "g", shares)
	must.NoError(t, err)
	tg := Group(j, "g")
	Sign(tg, "old-sig")
	must.Eq(t, "old-sig", tg.Meta[MetaSignature])
	must.SliceContainsFunc(t, devOf(j).Constraints, &api.Constraint{LTarget: DeviceAttribute}, func(a, b *api.Constraint) bool { return a.LTarget == b.LTarget })

	// an upgraded scheduler reads it and, while it stands, writes it back
	// unchanged
	again := Writable(j)
	p, sig := Carried(tg)
	_, err = Repeat(again, "g", p, sig)
	must.NoError(t, err)
	must.True(t, reflect.DeepEqual(j.TaskGroups, again.TaskGroups))

	// pinned again: a node pin, the share constraint and the meta gone
	rec, err := Pin(again, "g", inPlace("n1", "n2"))
	must.NoError(t, err)
	must.Eq(t, ContractNode, rec.Contract)
	ntg := Group(again, "g")
	_, inMeta := ntg.Meta[MetaPlacement]
	must.False(t, inMeta)
	must.False(t, slices.ContainsFunc(devOf(again).Constraints, func(c *api.Constraint) bool { return c.LTarget == DeviceAttribute }))
	must.Eq(t, "research", again.Meta[MetaVC]) // the user's meta stays

	// and back to shares (a decision Nomad would not keep on one GPU)
	rec, err = Pin(again, "g", shares)
	must.NoError(t, err)
	must.Eq(t, "", rec.Contract)
	must.False(t, slices.ContainsFunc(Group(again, "g").Constraints, IsCarrier))
	must.NotEq(t, "", Group(again, "g").Meta[MetaPlacement])

	// unpinned: gated again, nothing of the pin left
	n := Writable(j)
	_, err = Pin(n, "g", inPlace("n1"))
	must.NoError(t, err)
	Unpin(n, "g")
	must.False(t, slices.ContainsFunc(Group(n, "g").Constraints, IsCarrier))
	must.False(t, Pinned(n, "g"))
	must.Eq(t, []string{"g"}, Gated(n))
}

// A dispatch pool's children take shares of the pool's GPUs: its pin
// names them, whatever the decision allows.
func TestAParameterizedJobKeepsASharePin(t *testing.T) {
	j := job(25)
	j.ParameterizedJob = &api.ParameterizedJobConfig{}
	rec, err := Pin(j, "g", inPlace("n1"))
	must.NoError(t, err)
	must.Eq(t, "", rec.Contract)
	must.SliceContainsFunc(t, devOf(j).Constraints, &api.Constraint{LTarget: DeviceAttribute}, func(a, b *api.Constraint) bool { return a.LTarget == b.LTarget })
}
