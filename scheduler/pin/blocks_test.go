package pin

import (
	"reflect"
	"testing"

	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// multiGPU is a node-pinnable decision of one allocation per node of k
// whole GPUs (100 shares each) on each of nodes.
func multiGPU(k int, nodes ...string) *placement.Decision {
	d := &placement.Decision{Policy: "gpushare", InPlace: true}
	for _, n := range nodes {
		p := placement.Placement{Node: n}
		for g := range k {
			gpu := "GPU-" + n + "-" + string(rune('0'+g))
			p.GPUs = append(p.GPUs, gpu)
			for s := range 100 {
				p.Shares = append(p.Shares, gpu+":"+itoa(s))
			}
		}
		d.Placements = append(d.Placements, p)
	}
	return d
}

func itoa(i int) string { return string(rune('0'+i/10)) + string(rune('0'+i%10)) }

func blocksOfJob(j *api.Job) []*api.RequestedDevice { return gpuBlocks(Group(j, "g")) }

// TestANodePinOfSeveralGPUsAsksOneBlockPerGPU: on nodes where each GPU is
// a device group of its own, an allocation of two whole GPUs is asked as
// two copies of the user's block of 100 shares each, each with the
// cell-rank affinities; the group's request, Digest and Spec are the user's block's.
func TestANodePinOfSeveralGPUsAsksOneBlockPerGPU(t *testing.T) {
	user := job(200)
	want, err := Request(user, "g", nil)
	must.NoError(t, err)
	j := job(200)
	rec, err := Pin(j, "g", multiGPU(2, "n1", "n2"))
	must.NoError(t, err)
	must.Eq(t, ContractNode, rec.Contract)
	must.Eq(t, 2, rec.Blocks)
	must.StrContains(t, rec.Summary(), "asked as 2 device blocks of one GPU each")

	devs := blocksOfJob(j)
	must.Len(t, 2, devs)
	for _, d := range devs {
		must.Eq(t, uint64(100), *d.Count)
		must.Eq(t, "nvidia/gpushare", d.Name)
		must.Eq(t, RankAffinities(), d.Affinities)
		must.SliceContainsFunc(t, d.Constraints, &api.Constraint{LTarget: "${device.model}"}, func(a, b *api.Constraint) bool { return a.LTarget == b.LTarget })
	}
	must.True(t, devs[0] != devs[1]) // copies, not one block twice
	must.True(t, HasRankAffinities(Group(j, "g")))

	got, err := Request(j, "g", nil)
	must.NoError(t, err)
	must.Eq(t, want.Shares, got.Shares)
	must.Eq(t, want.Models, got.Models)
	must.Eq(t, Digest(user, "g", "gpushare"), Digest(j, "g", "gpushare"))
	must.Eq(t, Spec(user, "g"), Spec(j, "g"))
	p, ok := ParseRecord(j, "g")
	must.True(t, ok)
	must.True(t, p.ForRequest(user, "g"))
}

// TestASplitPinIsWrittenBackAndMovedInPlace: the user's file registered
// again (one block) gets the same two blocks byte for byte; a re-pin that
// keeps two GPUs per allocation changes only the group's constraints; a
// share pin after it joins the blocks into one again.
func TestASplitPinIsWrittenBackAndMovedInPlace(t *testing.T) {
	j := job(200)
	_, err := Pin(j, "g", multiGPU(2, "n1"))
	must.NoError(t, err)
	Sign(Group(j, "g"), "sig-1")

	again := job(200) // the pipeline's file: gated, one block
	p, sig := Carried(Group(j, "g"))
	_, err = Repeat(again, "g", p, sig)
	must.NoError(t, err)
	must.True(t, reflect.DeepEqual(j.TaskGroups, again.TaskGroups), must.Sprint("written back byte for byte"))

	next := Writable(j)
	next.TaskGroups[0].Count = ptr(3)
	_, err = Pin(next, "g", multiGPU(2, "n1", "n2", "n3"))
	must.NoError(t, err)
	must.True(t, reflect.DeepEqual(Group(j, "g").Tasks, Group(next, "g").Tasks), must.Sprint("the device blocks changed on a re-pin that keeps 2 GPUs each"))
	must.NotEq(t, Group(j, "g").Constraints, Group(next, "g").Constraints)

	shares := multiGPU(2, "n1")
	shares.InPlace = false
	_, err = Pin(next, "g", shares)
	must.NoError(t, err)
	devs := blocksOfJob(next)
	must.Len(t, 1, devs)
	must.Eq(t, uint64(200), *devs[0].Count)
	must.SliceContainsFunc(t, devs[0].Constraints, &api.Constraint{LTarget: DeviceAttribute}, func(a, b *api.Constraint) bool { return a.LTarget == b.LTarget })

	// unpinned, the split stays one request
	n2 := job(200)
	_, err = Pin(n2, "g", multiGPU(2, "n1"))
	must.NoError(t, err)
	Unpin(n2, "g")
	r, err := Request(n2, "g", nil)
	must.NoError(t, err)
	must.Eq(t, 200, r.Shares)
}

// TestBlocksThatAreNotCopiesAreStillRefused: two different gpushare
// blocks in one task are not one request.
func TestBlocksThatAreNotCopiesAreStillRefused(t *testing.T) {
	j := job(100)
	tk := gpuTask(Group(j, "g"))
	tk.Resources.Devices = append(tk.Resources.Devices, &api.RequestedDevice{Name: "nvidia/gpushare", Count: ptr(uint64(50))})
	_, err := Request(j, "g", nil)
	must.ErrorIs(t, err, ErrNotPlaceable)
	must.ErrorContains(t, err, "2 device blocks")

	// copies written by hand are the request they copy
	tk.Resources.Devices[1] = cloneDevice(tk.Resources.Devices[0])
	r, err := Request(j, "g", nil)
	must.NoError(t, err)
	must.Eq(t, 200, r.Shares)
}

// TestASplitThatDoesNotDivideIsAnError: shares that are not k equal parts.
func TestASplitThatDoesNotDivideIsAnError(t *testing.T) {
	j := job(250)
	_, err := Pin(j, "g", multiGPU(3, "n1"))
	must.ErrorContains(t, err, "do not split into 3 device blocks")
}

// TestAParameterizedJobsSplitPinNamesItsSharesInEveryBlock: a dispatch
// pool keeps a share pin (its children must stay on its GPUs); on nodes
// where each GPU is a device group, its allocation of two GPUs is two
// blocks, each naming the shares of both, so each takes one of them.
func TestAParameterizedJobsSplitPinNamesItsSharesInEveryBlock(t *testing.T) {
	j := job(200)
	j.ParameterizedJob = &api.ParameterizedJobConfig{}
	rec, err := Pin(j, "g", multiGPU(2, "n1"))
	must.NoError(t, err)
	must.Eq(t, "", rec.Contract)
	must.Eq(t, 2, rec.Blocks)
	devs := blocksOfJob(j)
	must.Len(t, 2, devs)
	for _, d := range devs {
		must.SliceContainsFunc(t, d.Constraints, shareConstraint(rec), sameConstraint)
		must.Eq(t, uint64(100), *d.Count)
	}
	r, err := Request(j, "g", nil)
	must.NoError(t, err)
	must.Eq(t, 200, r.Shares)
	user := job(200)
	user.ParameterizedJob = &api.ParameterizedJobConfig{}
	must.Eq(t, Spec(user, "g"), Spec(j, "g"))
	must.Eq(t, Digest(user, "g", "gpushare"), Digest(j, "g", "gpushare"))
}

// TestASharePinOnPerGPUNodesIsSplitToo: with node pins turned off
// (in_place_pins = false) a decision of two GPUs per allocation on nodes
// whose GPUs are each a device group is a share pin of two blocks, each
// naming the shares; on other nodes one block.
func TestASharePinOnPerGPUNodesIsSplitToo(t *testing.T) {
	d := multiGPU(2, "n1")
	d.InPlace, d.PerGPU = false, true
	j := job(200)
	rec, err := Pin(j, "g", d)
	must.NoError(t, err)
	must.Eq(t, "", rec.Contract)
	must.Eq(t, 2, rec.Blocks)
	must.Len(t, 2, blocksOfJob(j))

	d.PerGPU = false
	j = job(200)
	rec, err = Pin(j, "g", d)
	must.NoError(t, err)
	must.Eq(t, 0, rec.Blocks)
	must.Len(t, 1, blocksOfJob(j))
}
