package pin

import (
	"reflect"
	"regexp"
	"testing"

	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// TestAPinWritesTheModelSoPerGPUGroupsMatch: a request by model, named in
// the device name or in a ${device.model} equality, is pinned as the
// regexp that matches the model's group and its per-GPU groups, never a
// shared MIG instance's group or another model; the request, Digest and
// Spec read it as the user wrote it, and the user's file registered again
// is pinned byte for byte.
func TestAPinWritesTheModelSoPerGPUGroupsMatch(t *testing.T) {
	const model = "Tesla V100-SXM2-16GB"
	re := regexp.MustCompile(ModelPattern(model))
	for _, name := range []string{model, model + " GPU 0", model + " GPU 12"} {
		must.True(t, re.MatchString(name), must.Sprint(name))
	}
	for _, name := range []string{model + " MIG 3g.20gb", "Tesla V100-SXM2-16GB2", "x" + model, model + " GPU "} {
		must.False(t, re.MatchString(name), must.Sprint(name))
	}

	byName := func() *api.Job {
		j := job(25)
		d := gpuTask(Group(j, "g")).Resources.Devices[0]
		d.Name, d.Constraints = "nvidia/gpushare/"+model, nil
		return j
	}
	byOp := func(op string) func() *api.Job {
		return func() *api.Job {
			j := job(25)
			gpuTask(Group(j, "g")).Resources.Devices[0].Constraints[0].Operand = op
			return j
		}
	}
	for _, tc := range []struct {
		name string
		user func() *api.Job
		as   string
	}{{"device name", byName, ModelFromName}, {"constraint =", byOp("="), ModelFromConstraint}, {"constraint ==", byOp("=="), ModelFromConstraint}} {
		t.Run(tc.name, func(t *testing.T) {
			user := tc.user()
			want, err := Request(user, "g", nil)
			must.NoError(t, err)
			must.Eq(t, []string{model}, want.Models)

			for _, d := range []*struct{ inPlace bool }{{true}, {false}} {
				j := tc.user()
				dec := inPlace("n1")
				dec.InPlace = d.inPlace
				rec, err := Pin(j, "g", dec)
				must.NoError(t, err)
				must.Eq(t, model, rec.Model)
				must.Eq(t, tc.as, rec.ModelAs)
				dev := devOf(j)
				must.Eq(t, "nvidia/gpushare", dev.Name)
				must.SliceContainsFunc(t, dev.Constraints, ModelConstraint(model), sameConstraint)
				for _, c := range dev.Constraints {
					must.False(t, c.LTarget == ModelTarget && isEquality(c.Operand), must.Sprint("the equality on ${device.model} stayed"))
				}
				got, err := Request(j, "g", nil)
				must.NoError(t, err)
				must.Eq(t, want.Models, got.Models)
				must.Eq(t, want.Shares, got.Shares)
				must.Eq(t, Digest(user, "g", "gpushare"), Digest(j, "g", "gpushare"))
				must.Eq(t, Spec(user, "g"), Spec(j, "g"))

				Sign(Group(j, "g"), "sig")
				again := tc.user()
				p, sig := Carried(Group(j, "g"))
				_, err = Repeat(again, "g", p, sig)
				must.NoError(t, err)
				must.True(t, reflect.DeepEqual(j.TaskGroups, again.TaskGroups), must.Sprint("written back byte for byte"))

				// unpinned, the block names the model as the user did (a
				// node pin's index affinities stay: written once)
				Unpin(again, "g")
				u, a := devOf(user), devOf(again)
				must.Eq(t, u.Name, a.Name)
				must.Eq(t, u.Constraints, a.Constraints)
			}
		})
	}
}

// TestASplitRequestByModelNamesItInEveryBlock: two GPUs of a model on
// per-GPU nodes: two blocks, each with the model's regexp.
func TestASplitRequestByModelNamesItInEveryBlock(t *testing.T) {
	j := job(200)
	rec, err := Pin(j, "g", multiGPU(2, "n1"))
	must.NoError(t, err)
	must.Eq(t, 2, rec.Blocks)
	devs := blocksOfJob(j)
	must.Len(t, 2, devs)
	for _, d := range devs {
		must.SliceContainsFunc(t, d.Constraints, ModelConstraint("Tesla V100-SXM2-16GB"), sameConstraint)
	}
	must.Eq(t, Spec(job(200), "g"), Spec(j, "g"))
	must.Eq(t, Digest(job(200), "g", "gpushare"), Digest(j, "g", "gpushare"))
}
