package pin

import (
	"reflect"
	"testing"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// The affinities a new node pin writes rank GPUs by cell rank first and
// index only to break a tie: Nomad's score of a GPU (the sum of the
// matched weights) orders every pair of ranks the same way whatever their
// indexes, and a node without ranks by index alone.
func TestRankAffinitiesOrderByRankThenIndex(t *testing.T) {
	list := RankAffinities()
	must.Len(t, 2*IndexAffinities, list)
	must.Eq(t, "${device.attr."+devicefn.AttrCellRank+"}", RankAttribute)
	score := func(rank, index int, ranked bool) int {
		total := 0
		for _, a := range list {
			v := index
			if a.LTarget == RankAttribute {
				if !ranked {
					continue // the attribute is missing: no match
				}
				v = rank
			}
			k := int(a.RTarget[0] - '0')
			if a.Operand == "<=" && v <= k {
				total += int(*a.Weight)
			}
		}
		return total
	}
	for r := range IndexAffinities {
		for i := range IndexAffinities + 1 {
			for j := range IndexAffinities + 1 {
				must.Greater(t, score(r+1, j, true), score(r, i, true), must.Sprintf("rank %d index %d over rank %d index %d", r, i, r+1, j))
			}
		}
	}
	for i := range IndexAffinities {
		must.Greater(t, score(0, i+1, false), score(0, i, false))
	}
}

// indexPinned is a group pinned by node before cell ranks: its device
// block carries the index affinities (what node pins wrote then), its
// record the node pin's.
func indexPinned(t *testing.T) *api.Job {
	t.Helper()
	j := job(25)
	_, err := Pin(j, "g", inPlace("n1"))
	must.NoError(t, err)
	dev := devOf(j)
	dev.Affinities = indexAffinities() // as an older scheduler wrote it
	Sign(Group(j, "g"), "sig-1")
	return j
}

// A group whose device block carries an older node pin's index
// affinities keeps them for its life: pinned again (Repeat) it is written
// byte for byte, pinned anew (scaled onto two nodes) its tasks are the
// same (Nomad updates it in place), its request asks Nomad's pick by
// index (NomadIndexOrder), and its Spec and Digest are the user's file's;
// a new group gets the cell-rank affinities and is decided by rank.
func TestAnOldNodePinKeepsItsIndexAffinities(t *testing.T) {
	j := indexPinned(t)
	tg := Group(j, "g")
	must.True(t, HasIndexAffinities(tg))
	must.False(t, HasRankAffinities(tg))

	again := Writable(j)
	p, sig := Carried(tg)
	_, err := Repeat(again, "g", p, sig)
	must.NoError(t, err)
	must.True(t, reflect.DeepEqual(j.TaskGroups, again.TaskGroups), must.Sprint("a repeated old pin is written byte for byte"))

	next := Writable(j)
	next.TaskGroups[0].Count = ptr(2)
	_, err = Pin(next, "g", inPlace("n1", "n2"))
	must.NoError(t, err)
	must.True(t, reflect.DeepEqual(Group(j, "g").Tasks, Group(next, "g").Tasks), must.Sprint("the device block changed: a restart"))
	must.Eq(t, indexAffinities(), devOf(next).Affinities)

	req, err := Request(next, "g", nil)
	must.NoError(t, err)
	must.True(t, req.NomadIndexOrder)
	user := job(25)
	must.Eq(t, Spec(user, "g"), Spec(j, "g"))
	must.Eq(t, Digest(user, "g", "gpushare"), Digest(j, "g", "gpushare"))

	fresh := job(25)
	_, err = Pin(fresh, "g", inPlace("n1"))
	must.NoError(t, err)
	must.Eq(t, RankAffinities(), devOf(fresh).Affinities)
	req, err = Request(fresh, "g", nil)
	must.NoError(t, err)
	must.False(t, req.NomadIndexOrder)
	must.Eq(t, Spec(user, "g"), Spec(fresh, "g"))
	must.Eq(t, Digest(user, "g", "gpushare"), Digest(fresh, "g", "gpushare"))
}

// A user's own affinity on the same attributes, of another weight, is the
// user's: it stays in the Spec, and a node pin adds its list beside it.
func TestAUsersRankAffinityIsNotThePins(t *testing.T) {
	mine := &api.Affinity{LTarget: RankAttribute, Operand: "<=", RTarget: "1", Weight: ref(int8(20))}
	j := job(25)
	devOf(j).Affinities = []*api.Affinity{mine}
	user := job(25)
	devOf(user).Affinities = []*api.Affinity{mine}
	_, err := Pin(j, "g", inPlace("n1"))
	must.NoError(t, err)
	must.Eq(t, append([]*api.Affinity{mine}, RankAffinities()...), devOf(j).Affinities)
	must.Eq(t, Spec(user, "g"), Spec(j, "g"))
	must.NotEq(t, Spec(job(25), "g"), Spec(j, "g"))
}
