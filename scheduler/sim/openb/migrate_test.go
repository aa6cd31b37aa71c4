package openb

import (
	"testing"

	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/shoenig/test/must"
)

// TestMigrationMakesRoom: first-fit puts 0.2 GPU on node a (2 cores) and
// 0.8 GPU with 4 cores on node b (a lacks the CPU). A whole-GPU pod then
// finds no whole GPU: without migrations it is refused (50%); with one,
// the 0.2 pod moves to b's free 0.2 and the whole pod takes a's GPU.
func TestMigrationMakesRoom(t *testing.T) {
	nodes := []Node{{"a", 2000, 1 << 20, 1, "T4"}, {"b", 8000, 1 << 20, 1, "T4"}}
	pods := []Pod{{Name: "small", CPU: 1000, MemoryMiB: 1, NumGPU: 1, GPUMilli: 200}, {Name: "big", CPU: 4000, MemoryMiB: 1, NumGPU: 1, GPUMilli: 800},
		{Name: "whole", CPU: 1000, MemoryMiB: 1, NumGPU: 1, GPUMilli: 1000}}
	w := Workload{Pods: pods, NodeOrder: []int{0, 1}, CapacityMilli: 2000}
	plain, err := Replay("tiny", placement.PolicyFirstFit, 42, nodes, w, Mix(pods, 1), nil)
	must.NoError(t, err)
	must.EqOp(t, 2, plain.Placed)
	moved, err := replay("tiny", placement.PolicyFirstFit, 42, nodes, w, Mix(pods, 1), nil, 1, ContractModel)
	must.NoError(t, err)
	must.EqOp(t, 3, moved.Placed)
	must.EqOp(t, 1, moved.Migrations)
	must.Eq(t, 100.0, moved.Alloc[100])
	must.Eq(t, Stranding{}, moved.Stranded)
	// Without budget nothing moves: 3 pods x 1% rounds down to 0.
	zero, err := ReplayMigrate("tiny", placement.PolicyFirstFit, 42, nodes, w, Mix(pods, 1))
	must.NoError(t, err)
	must.EqOp(t, 0, zero.Migrations)
	must.EqOp(t, 2, zero.Placed)
}

func TestMigrationSummaries(t *testing.T) {
	res := func(policy string, seed int64, at float64, moved int) *Result {
		return &Result{Trace: "default", Policy: policy, Seed: seed, Pods: 1000, Alloc: curveAt(at, at), Frag: NewCurve(), Migrations: moved}
	}
	r := &Report{Results: []*Result{res("gpushare", 42, 95, 0), res("gpushare", 43, 96, 0)},
		Migrated: []*Result{res(PolicyMigrate, 42, 95.5, 4), res(PolicyMigrate, 43, 96.1, 6), res(PolicyMigrate, 44, 99, 9)}}
	ms := r.MigrationSummaries()
	must.SliceLen(t, 1, ms)
	must.Eq(t, Migration{Trace: "default", Seeds: 2, Gpushare: 95.5, Migrated: 95.8, Migrations: 5, Budget: 10}, ms[0])
	must.StrContains(t, MigrationTable(ms).Markdown(), "| default | 2 | 95.50 | 95.80 | +0.30 | 5.0 | 10.0 |")
}
