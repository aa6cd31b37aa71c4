package pin

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

func ptr[T any](v T) *T { return &v }

func job(shares int64) *api.Job {
	return &api.Job{
		ID: ptr("train"), Namespace: ptr("default"),
		Meta: map[string]string{MetaVC: "research"},
		TaskGroups: []*api.TaskGroup{{
			Name: ptr("g"), Count: ptr(2),
			Constraints: []*api.Constraint{Gate()},
			Meta:        map[string]string{MetaClass: "production", MetaSMUtil: "0.8", MetaMemBW: "0.3"},
			Tasks: []*api.Task{
				{Name: "sidecar", Resources: &api.Resources{CPU: ptr(100), MemoryMB: ptr(64)}},
				{Name: "t", Resources: &api.Resources{CPU: ptr(500), MemoryMB: ptr(1024), Devices: []*api.RequestedDevice{
					{Name: "nvidia/gpushare", Count: ptr(uint64(shares)), Constraints: []*api.Constraint{{LTarget: "${device.model}", RTarget: "Tesla V100-SXM2-16GB", Operand: "="}}},
				}}},
			},
		}},
	}
}

func TestRequest(t *testing.T) {
	r, err := Request(job(25), "g", nil)
	must.NoError(t, err)
	must.Eq(t, "default/train/g", r.ID)
	must.Eq(t, 2, r.Count)
	must.Eq(t, 25, r.Shares)
	must.Eq(t, placement.Resources{CPU: 600, MemoryMiB: 1088}, r.Res)
	must.Eq(t, []string{"Tesla V100-SXM2-16GB"}, r.Models)
	must.Eq(t, "research", r.VC)
	must.Eq(t, placement.ClassProduction, r.Class)
	must.Eq(t, 0.8, r.Profile.SM)
	must.Eq(t, 0.3, r.Profile.MemBW)
	must.EqOp(t, 0, r.Expected) // not declared

	j := job(25)
	j.Meta[MetaExpected] = "90m"
	r, err = Request(j, "g", nil)
	must.NoError(t, err)
	must.EqOp(t, 90*time.Minute, r.Expected)
	must.False(t, r.Batch)

	// a batch or sysbatch job's allocations end by themselves: never staged
	for typ, batch := range map[string]bool{"batch": true, "sysbatch": true, "service": false, "system": false} {
		j := job(25)
		j.Type = &typ
		r, err := Request(j, "g", nil)
		must.NoError(t, err)
		must.Eq(t, batch, r.Batch, must.Sprint(typ))
	}
}

func TestRequestErrorsSayWhatToChange(t *testing.T) {
	cases := map[string]func(*api.Job){
		"no task asks for": func(j *api.Job) { j.TaskGroups[0].Tasks[1].Resources.Devices = nil },
		`asks only for a MIG instance ("nvidia/gpushare-mig/3g.20gb"), which Nomad places by itself; remove the gate`: func(j *api.Job) {
			j.TaskGroups[0].Tasks[1].Resources.Devices = []*api.RequestedDevice{{Name: "nvidia/gpushare-mig/3g.20gb", Count: ptr(uint64(1))}}
		},
		"put the GPU work in one": func(j *api.Job) {
			j.TaskGroups[0].Tasks[0].Resources.Devices = j.TaskGroups[0].Tasks[1].Resources.Devices
		},
		`want "production" or`:                   func(j *api.Job) { j.TaskGroups[0].Meta[MetaClass] = "gold" },
		"must be a number within 0..1":           func(j *api.Job) { j.TaskGroups[0].Meta[MetaSMUtil] = "lots" },
		`is not a known profile`:                 func(j *api.Job) { j.TaskGroups[0].Meta[MetaProfile] = "no-such-model" },
		`job "train" has no group`:               func(j *api.Job) { j.TaskGroups[0].Name = ptr("other") },
		`want a positive duration such as "90m"`: func(j *api.Job) { j.TaskGroups[0].Meta[MetaExpected] = "2 hours" },
		`expected_runtime = "-1h"`:               func(j *api.Job) { j.Meta[MetaExpected] = "-1h" },
	}
	for want, mutate := range cases {
		t.Run(want, func(t *testing.T) {
			j := job(25)
			mutate(j)
			_, err := Request(j, "g", nil)
			must.True(t, errors.Is(err, ErrNotPlaceable))
			must.ErrorContains(t, err, want)
		})
	}
}

func TestNamedProfile(t *testing.T) {
	j := job(25)
	delete(j.TaskGroups[0].Meta, MetaSMUtil)
	delete(j.TaskGroups[0].Meta, MetaMemBW)
	j.Meta[MetaProfile] = "resnet-50 (batch size 64)"
	r, err := Request(j, "g", nil)
	must.NoError(t, err)
	must.Eq(t, "ResNet-50 (batch size 64)", r.Profile.Name)
}

func TestPinAndUnpin(t *testing.T) {
	j := job(25)
	must.Eq(t, []string{"g"}, Gated(j))
	d := &placement.Decision{Policy: "gpushare", Placements: []placement.Placement{
		{Node: "n1", GPUs: []string{"GPU-a"}, Shares: []string{"GPU-a:0", "GPU-a:1"}, Cell: "gpu 0", Reason: "packs GPU-a"},
		{Node: "n1", GPUs: []string{"GPU-a"}, Shares: []string{"GPU-a:2", "GPU-a:3"}, Cell: "gpu 0", Reason: "packs GPU-a"},
	}}
	rec, err := Pin(j, "g", d)
	must.NoError(t, err)
	must.SliceEmpty(t, Gated(j))
	must.True(t, Pinned(j, "g"))
	tg := j.TaskGroups[0]
	must.Eq(t, &api.Constraint{LTarget: NodeAttribute, Operand: OpSetContains, RTarget: "n1"}, tg.Constraints[0])
	dev := tg.Tasks[1].Resources.Devices[0]
	must.SliceLen(t, 2, dev.Constraints) // the model constraint stays
	must.Eq(t, "GPU-a:0,GPU-a:1,GPU-a:2,GPU-a:3", dev.Constraints[1].RTarget)
	var stored Record
	must.NoError(t, json.Unmarshal([]byte(tg.Meta[MetaPlacement]), &stored))
	must.Eq(t, "packs GPU-a", rec.Reason) // said to the caller, never written
	must.Eq(t, "", stored.Reason)
	rec.Reason = ""
	must.Eq(t, *rec, stored)

	// pinning again replaces, never stacks, the pins
	_, err = Pin(j, "g", d)
	must.NoError(t, err)
	must.SliceLen(t, 1, tg.Constraints)
	must.SliceLen(t, 2, dev.Constraints)

	Unpin(j, "g")
	must.Eq(t, []string{"g"}, Gated(j))
	must.SliceLen(t, 1, dev.Constraints)
	must.MapNotContainsKey(t, tg.Meta, MetaPlacement)
}

func TestJobLevelGateMovesToOtherGroups(t *testing.T) {
	j := job(25)
	other := *j.TaskGroups[0]
	other.Name = ptr("h")
	other.Constraints = nil
	j.TaskGroups = append(j.TaskGroups, &other)
	j.TaskGroups[0].Constraints = nil
	j.Constraints = []*api.Constraint{Gate()}
	must.Eq(t, []string{"g", "h"}, Gated(j))
	_, err := Pin(j, "g", &placement.Decision{Placements: []placement.Placement{{Node: "n", Shares: []string{"G:0"}}}})
	must.NoError(t, err)
	must.Eq(t, []string{"h"}, Gated(j))
}

func TestAddGate(t *testing.T) {
	j := job(25)
	j.TaskGroups[0].Constraints = nil
	must.Eq(t, []string{"g"}, AddGate(j))
	must.SliceEmpty(t, AddGate(j))
}

// The gate written before (${node.unique.id} = gpushare:pending) still
// gates, is removed by a pin, and AddGate replaces it with today's, on the
// job and on a group: Nomad re-evaluates a group behind a unique attribute
// on every freed allocation, and never one behind a meta key.
func TestLegacyGate(t *testing.T) {
	legacy := func() *api.Constraint {
		return &api.Constraint{LTarget: "${node.unique.id}", Operand: "=", RTarget: "gpushare:pending"}
	}
	must.True(t, IsLegacyGate(legacy()))
	must.False(t, IsLegacyGate(Gate()))
	must.NotEq(t, "${node.unique.id}", Gate().LTarget)
	must.False(t, strings.Contains(Gate().LTarget, "unique"))

	j := job(25)
	j.TaskGroups[0].Constraints = []*api.Constraint{legacy()}
	must.Eq(t, []string{"g"}, Gated(j))
	must.True(t, IsGate(j.TaskGroups[0].Constraints[0]))
	_, err := Pin(j, "g", &placement.Decision{Placements: []placement.Placement{{Node: "n", Shares: []string{"G:0"}}}})
	must.NoError(t, err)
	must.SliceEmpty(t, Gated(j))
	for _, c := range j.TaskGroups[0].Constraints {
		must.False(t, IsLegacyGate(c))
	}

	j = job(25)
	j.TaskGroups[0].Constraints = []*api.Constraint{legacy()}
	must.SliceEmpty(t, AddGate(j)) // gated already: replaced, not added
	must.Eq(t, []*api.Constraint{Gate()}, j.TaskGroups[0].Constraints)

	j = job(25)
	j.TaskGroups[0].Constraints = nil
	j.Constraints = []*api.Constraint{legacy()}
	AddGate(j)
	must.Eq(t, []*api.Constraint{Gate()}, j.Constraints)
	must.Eq(t, []string{"g"}, Gated(j))
}

// A record lists its shares GPU by GPU in index order (:2 before :10).
func TestRecordSharesInIndexOrder(t *testing.T) {
	job := &api.Job{ID: ptrTo("j"), TaskGroups: []*api.TaskGroup{{Name: ptrTo("g"), Tasks: []*api.Task{{Name: "t", Resources: &api.Resources{
		Devices: []*api.RequestedDevice{{Name: "nvidia/gpushare"}}}}}}}}
	rec, err := Pin(job, "g", &placement.Decision{Placements: []placement.Placement{{Node: "n", GPUs: []string{"GPU-a"},
		Shares: []string{"GPU-a:10", "GPU-a:2", "GPU-a:1"}}}})
	must.NoError(t, err)
	must.Eq(t, []string{"GPU-a:1", "GPU-a:2", "GPU-a:10"}, rec.Shares)
}

// A share, node or GPU named twice in a decision is recorded once, in
// order, even beside a share ID that does not parse.
func TestRecordNamesEachShareOnce(t *testing.T) {
	for _, extra := range [][]string{nil, {"not-a-share"}} {
		job := &api.Job{ID: ptrTo("j"), TaskGroups: []*api.TaskGroup{{Name: ptrTo("g"), Tasks: []*api.Task{{Name: "t", Resources: &api.Resources{
			Devices: []*api.RequestedDevice{{Name: "nvidia/gpushare"}}}}}}}}
		rec, err := Pin(job, "g", &placement.Decision{Placements: []placement.Placement{
			{Node: "n2", GPUs: []string{"GPU-b", "GPU-a"}, Shares: append([]string{"GPU-b:3", "GPU-a:10", "GPU-a:2"}, extra...)},
			{Node: "n1", GPUs: []string{"GPU-a"}, Shares: append([]string{"GPU-a:2", "GPU-a:10"}, extra...)},
			{Node: "n2", GPUs: []string{"GPU-b"}, Shares: []string{"GPU-b:3"}},
		}})
		must.NoError(t, err)
		must.Eq(t, []string{"n1", "n2"}, rec.Nodes)
		must.Eq(t, []string{"GPU-a", "GPU-b"}, rec.GPUs)
		want := []string{"GPU-a:2", "GPU-a:10", "GPU-b:3"}
		if extra != nil {
			must.SliceContainsAll(t, append(want, extra...), rec.Shares)
			continue
		}
		must.Eq(t, want, rec.Shares)
	}
}

func ptrTo[T any](v T) *T { return &v }

// The pin writes what the decision is, never why: the same decision on a
// group re-registered unchanged is the same meta, byte for byte, whatever
// the reason was (scores, neighbours, predictions change with the cluster).
func TestPinIsStableAcrossReasons(t *testing.T) {
	place := func(reason string) *api.Job {
		j := job(25)
		j.CreateIndex = ptr(uint64(7))
		d := &placement.Decision{Policy: "gpushare", Placements: []placement.Placement{
			{Node: "n1", GPUs: []string{"GPU-a"}, Shares: []string{"GPU-a:0", "GPU-a:1"}, Cell: "gpu 0", Reason: reason, Score: float64(len(reason))},
		}}
		_, err := Pin(j, "g", d)
		must.NoError(t, err)
		return j
	}
	a, b := place("packs GPU-a next to train-7 (fragmentation 0.12)"), place("fits GPU-a alone (fragmentation 0.40)")
	must.Eq(t, a.TaskGroups[0].Meta[MetaPlacement], b.TaskGroups[0].Meta[MetaPlacement])
	must.Eq(t, a.TaskGroups[0].Constraints, b.TaskGroups[0].Constraints)
	rec, ok := ParseRecord(a, "g")
	must.True(t, ok)
	must.Eq(t, uint64(7), rec.Incarnation)
	must.Eq(t, Digest(job(25), "g", "gpushare"), rec.Request)
}

// Repeat writes an earlier version's pin back unchanged: the job it makes
// is the one the earlier pin made, constraint for constraint and byte for
// byte in the meta and the signature.
func TestRepeatWritesTheEarlierPinUnchanged(t *testing.T) {
	first := job(25)
	first.TaskGroups[0].Meta[MetaClass] = "opportunistic"
	d := &placement.Decision{Policy: "gpushare", Placements: []placement.Placement{
		{Node: "n1", GPUs: []string{"GPU-a"}, Shares: []string{"GPU-a:0", "GPU-a:1"}, Cell: "gpu 0"},
	}}
	_, err := PinWith(first, "g", d, Runtime{Sharing: "mps", ClientPriority: 1})
	must.NoError(t, err)
	first.TaskGroups[0].Meta[MetaSignature] = "sig"

	again := job(25) // the same file registered again: gated, no pin
	again.TaskGroups[0].Meta[MetaClass] = "opportunistic"
	rec, err := Repeat(again, "g", first.TaskGroups[0].Meta[MetaPlacement], "sig")
	must.NoError(t, err)
	must.Eq(t, []string{"GPU-a:0", "GPU-a:1"}, rec.Shares)
	must.Eq(t, first.TaskGroups, again.TaskGroups)
	must.SliceEmpty(t, Gated(again))

	_, err = Repeat(job(25), "g", "{not json", "sig")
	must.ErrorIs(t, err, ErrNotPlaceable)
}

// Constraints the user wrote stay as written: the pin only adds its own,
// and pinning again removes only what the earlier pin wrote.
func TestPinKeepsTheUsersConstraints(t *testing.T) {
	j := job(25)
	users := &api.Constraint{LTarget: NodeAttribute, Operand: OpSetContains, RTarget: "n1,n2"}
	usersShares := &api.Constraint{LTarget: DeviceAttribute, Operand: OpSetContains, RTarget: "GPU-a:0,GPU-a:1,GPU-a:2"}
	tg := j.TaskGroups[0]
	tg.Constraints = append(tg.Constraints, users)
	dev := tg.Tasks[1].Resources.Devices[0]
	dev.Constraints = append(dev.Constraints, usersShares)
	d := &placement.Decision{Policy: "gpushare", Placements: []placement.Placement{
		{Node: "n1", GPUs: []string{"GPU-a"}, Shares: []string{"GPU-a:0", "GPU-a:1"}},
	}}
	for range 2 { // pinning twice stacks nothing
		_, err := Pin(j, "g", d)
		must.NoError(t, err)
		must.SliceContains(t, tg.Constraints, users)
		must.SliceContains(t, dev.Constraints, usersShares)
		must.SliceLen(t, 2, tg.Constraints)
		must.SliceLen(t, 3, dev.Constraints)
	}
	Unpin(j, "g")
	must.SliceContains(t, tg.Constraints, users)
	must.SliceContains(t, dev.Constraints, usersShares)
	must.Eq(t, []string{"g"}, Gated(j))
}

// The digest changes with everything the decision depends on, and with
// nothing else.
func TestDigest(t *testing.T) {
	base := Digest(job(25), "g", "gpushare")
	must.NotEq(t, "", base)
	same := job(25)
	same.TaskGroups[0].Tasks[0].Config = map[string]any{"command": "other"}
	same.Meta["owner"] = "team-a" // not gpushare meta
	must.Eq(t, base, Digest(same, "g", "gpushare"))
	changes := map[string]func(j *api.Job){
		"shares":   func(j *api.Job) { j.TaskGroups[0].Tasks[1].Resources.Devices[0].Count = ptr(uint64(50)) },
		"count":    func(j *api.Job) { j.TaskGroups[0].Count = ptr(3) },
		"class":    func(j *api.Job) { j.TaskGroups[0].Meta[MetaClass] = "opportunistic" },
		"vc":       func(j *api.Job) { j.TaskGroups[0].Meta[MetaVC] = "team-b" },
		"profile":  func(j *api.Job) { j.TaskGroups[0].Meta[MetaSMUtil] = "0.9" },
		"bound":    func(j *api.Job) { j.Meta[MetaMaxSlowdown] = "0.2" },
		"memory":   func(j *api.Job) { j.TaskGroups[0].Tasks[1].Resources.MemoryMB = ptr(4096) },
		"model":    func(j *api.Job) { j.TaskGroups[0].Tasks[1].Resources.Devices[0].Name = DeviceName + "/Tesla V100" },
		"dev rule": func(j *api.Job) { j.TaskGroups[0].Tasks[1].Resources.Devices[0].Constraints = nil },
	}
	for name, change := range changes {
		t.Run(name, func(t *testing.T) {
			j := job(25)
			change(j)
			must.NotEq(t, base, Digest(j, "g", "gpushare"))
		})
	}
	must.NotEq(t, base, Digest(job(25), "g", "best-fit"))
}

// GroupKey names one group: job "a/b" group "c" is not job "a" group
// "b/c"; plain names are as they were.
func TestGroupKeyIsUnambiguous(t *testing.T) {
	job := func(id, group string) *api.Job {
		return &api.Job{ID: &id, TaskGroups: []*api.TaskGroup{{Name: &group}}}
	}
	must.Eq(t, "default/train/g", GroupKey(job("train", "g"), "g"))
	must.NotEq(t, GroupKey(job("a/b", "c"), "c"), GroupKey(job("a", "b/c"), "b/c"))
	must.Eq(t, "default/a%2Fb/c", GroupKey(job("a/b", "c"), "c"))
}

// A user's node constraint that says exactly what the pin says (the user
// allows node n1, and the pin chose n1) stays when the pin goes: only the
// pin's own copy is removed.
func TestUnpinKeepsTheUsersEqualConstraint(t *testing.T) {
	j := job(25)
	tg := j.TaskGroups[0]
	users := &api.Constraint{LTarget: NodeAttribute, Operand: OpSetContains, RTarget: "n1"}
	tg.Constraints = append(tg.Constraints, users)
	d := &placement.Decision{Policy: "gpushare", Placements: []placement.Placement{
		{Node: "n1", GPUs: []string{"GPU-a"}, Shares: []string{"GPU-a:0", "GPU-a:1"}},
	}}
	for range 2 {
		_, err := Pin(j, "g", d)
		must.NoError(t, err)
		must.SliceLen(t, 2, tg.Constraints) // the user's and the pin's
	}
	Unpin(j, "g")
	must.SliceContains(t, tg.Constraints, users)
	must.Eq(t, []string{"g"}, Gated(j))
}
