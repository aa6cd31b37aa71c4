package service

import (
	"testing"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/scheduler/config"
	"github.com/gpushare/gpushare/scheduler/nomadattr"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// interposerNode is perGPUNode whose plugin runs the interposer: one task
// may hold several of its per-GPU groups (multi_gpu = "interposer"), so a
// group asking for more than one GPU's shares is pinned as one device
// block per GPU (a split).
func interposerNode(t *testing.T, id string) *api.Node {
	n := perGPUNode(t, id)
	for _, d := range n.NodeResources.Devices {
		attrs := nomadattr.FromAPI(d.Attributes)
		attrs[devicefn.AttrMultiGPU] = devicefn.StringAttr(devicefn.MultiGPUInterposer)
		d.Attributes = nomadattr.ToAPI(attrs)
	}
	return n
}

// The pins that rewrite what the user wrote, each read back by a replica
// that takes over: a group of two GPUs' shares split into one device
// block per GPU, a request by model whose device name lost its model to a
// constraint, and an opportunistic group whose MPS thread percentage was
// lowered (opportunistic.active_thread_scale). The new leader trusts each
// pin (its signed record verifies against the request as the user wrote
// it), registers nothing and changes nothing Nomad treats as destructive,
// with the allocations running and after a pass with none yet.
func TestASecondReplicaKeepsSplitModelAndLoweredPins(t *testing.T) {
	g, err := nomadattr.DecodeGroup(dgx1(t).NodeResources.Devices[0])
	must.NoError(t, err)
	f := &fakeNomad{nodes: []*api.Node{interposerNode(t, "node-1")}, jobs: map[string]*api.Job{}}
	f.put(gated("split", 200))
	byModel := gated("model", 25)
	byModel.TaskGroups[0].Tasks[0].Resources.Devices[0].Name = pin.DeviceName + "/" + g.Model
	f.put(byModel)
	low := gated("low", 25)
	low.TaskGroups[0].Meta[pin.MetaClass] = "opportunistic"
	f.put(low)
	cfg := config.Default()
	cfg.Opportunistic = &config.Opportunistic{ActiveThreadScale: 0.5}

	first := loadedServiceWith(t, f, cfg)
	first.loop.reconcile(t.Context())
	ids := []string{"split", "model", "low"}
	recs := map[string]*pin.Record{}
	before := map[string]string{}
	for _, id := range ids {
		rec, ok := pin.ParseRecord(f.jobs[id], "g")
		must.True(t, ok, must.Sprintf("%s: %s", id, first.loop.answers.pending[key(id)]))
		recs[id], before[id] = rec, destructive(f.jobs[id])
	}
	// each is the kind of pin the test is about
	must.Greater(t, 1, len(pin.Group(f.jobs["split"], "g").Tasks[0].Resources.Devices), must.Sprint("the split's device blocks"))
	must.SliceLen(t, 2, recs["split"].GPUs)
	must.Eq(t, pin.ModelFromName, recs["model"].ModelAs)
	must.Eq(t, pin.DeviceName, pin.Group(f.jobs["model"], "g").Tasks[0].Resources.Devices[0].Name)
	must.MapContainsKey(t, recs["low"].Env, pin.EnvMPSThreads)

	registered := f.registers
	second := loadedServiceWith(t, f, cfg)
	second.loop.reconcile(t.Context())
	for _, id := range ids {
		f.runningAt(id, "alloc-"+id, "node-1", recs[id].Shares)
	}
	must.NoError(t, second.watcher.resync(t.Context()))
	second.loop.reconcile(t.Context())
	second.loop.reconcile(t.Context())
	must.Eq(t, registered, f.registers, must.Sprint("the new leader registered a job again"))
	for _, id := range ids {
		trusted, ok := second.state.Record(f.jobs[id], "g")
		must.True(t, ok, must.Sprintf("%s: the new leader does not trust the pin", id))
		must.Eq(t, recs[id].Shares, trusted.Shares, must.Sprint(id))
		must.Eq(t, before[id], destructive(f.jobs[id]), must.Sprintf("%s: the new leader changed what Nomad treats as destructive", id))
		st, ok := second.view.jobStatus("default", id, "default")
		must.True(t, ok)
		must.Eq(t, "pinned", st.Groups[0].State, must.Sprint(id))
	}
}
