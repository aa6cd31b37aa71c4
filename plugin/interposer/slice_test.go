package interposer

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shoenig/test/must"
)

// Time-slicing (src/slice.c; README, "Time-slicing"): the time-sliced tasks
// of a GPU take turns of a quantum, the holder running with the pool of
// their compute caps. On the simulated clock, over the fake GPU, with the
// fake driver's launch log (FAKECUDA_LOG: the pid of every kernel, in
// submission order) and the rotation's own counters.

// sliceFile makes a GPU's time-slice rotation (as the plugin does:
// plugin/slice.go) and links it into each reservation directory as
// "slice".
func sliceFile(t testing.TB, dirs ...string) string {
	t.Helper()
	data := make([]byte, 4096)
	binary.LittleEndian.PutUint32(data, 0x67737473)
	binary.LittleEndian.PutUint32(data[4:], 1)
	path := filepath.Join(t.TempDir(), "slice")
	must.NoError(t, os.WriteFile(path, data, 0o666))
	for _, d := range dirs {
		must.NoError(t, os.Link(path, filepath.Join(d, "slice")))
	}
	return path
}

// sliceMember is a member's entry in the rotation (src/gpushare.h,
// struct gs_slice_member: 64 bytes from offset 96).
type sliceMember struct {
	id, quantum, suspended, turns uint64
	share                         uint32
}

func sliceMembers(t testing.TB, path string) map[uint64]sliceMember {
	t.Helper()
	data, err := os.ReadFile(path)
	must.NoError(t, err)
	out := map[uint64]sliceMember{}
	for off := 96; off+64 <= len(data) && off < 96+48*64; off += 64 {
		m := data[off : off+64]
		id := binary.LittleEndian.Uint64(m)
		if id == 0 {
			continue
		}
		out[id] = sliceMember{id: id, share: binary.LittleEndian.Uint32(m[8:]), quantum: binary.LittleEndian.Uint64(m[16:]),
			suspended: binary.LittleEndian.Uint64(m[40:]), turns: binary.LittleEndian.Uint64(m[48:])}
	}
	return out
}

// launchRuns reads the launch log: the runs of consecutive kernels of one
// process, in order, as (pid, kernels).
func launchRuns(t testing.TB, path string) (runs [][2]int, perPid map[int]int) {
	t.Helper()
	data, err := os.ReadFile(path)
	must.NoError(t, err)
	perPid = map[int]int{}
	for _, l := range strings.Fields(string(data)) {
		var pid int
		_, err := fmt.Sscanf(l, "%d", &pid)
		must.NoError(t, err)
		perPid[pid]++
		if n := len(runs); n > 0 && runs[n-1][0] == pid {
			runs[n-1][1]++
		} else {
			runs = append(runs, [2]int{pid, 1})
		}
	}
	return runs, perPid
}

// slicedPair runs two tasks of the given limits on one GPU and rotation,
// each launching kernUs kernels for ms, measured over [from, ms]; quantum
// "" leaves GPUSHARE_TIMESLICE_QUANTUM_MS unset. Returns the windows, the
// launch log's runs and per-process counts, and the rotation's members.
func slicedPair(t *testing.T, b *binaries, limA, limB, quantum string, kernUs, ms, from int) ([]window, [][2]int, map[int]int, map[uint64]sliceMember) {
	t.Helper()
	a, c := reservation(t, limA), reservation(t, limB)
	rot := sliceFile(t, a, c)
	log := filepath.Join(t.TempDir(), "log")
	env := append(gpuEnv(t), "FAKECUDA_LOG="+log)
	if quantum != "" {
		env = append(env, "GPUSHARE_TIMESLICE_QUANTUM_MS="+quantum)
	}
	args := []string{fmt.Sprintf("kern:%d", kernUs), fmt.Sprintf("run:%d:%d:%d", ms, from, ms)}
	ws := together(t, b,
		kernRun{run{limits: a, program: b.kdirect, mode: "direct", env: env}, args},
		kernRun{run{limits: c, program: b.kdirect, mode: "direct", env: env}, args})
	runs, per := launchRuns(t, log)
	return ws, runs, per, sliceMembers(t, rot)
}

// Two time-sliced tasks on one GPU alternate: their kernels come in runs
// of about a quantum's worth (100 ms of 1 ms kernels), never interleaved
// within one; each gets about half the kernels, each was given turns and
// was suspended. Without the quantum in their environment the same two
// interleave kernel by kernel.
func TestTimeSlicedTasksAlternate(t *testing.T) {
	b := build(t)
	ws, runs, per, members := slicedPair(t, b, "compute_pct=100\ntimeslice_id=11\n", "compute_pct=100\ntimeslice_id=12\n", "100", 1000, 2000, 500)
	total := 0
	for _, n := range per {
		total += n
	}
	t.Logf("time-sliced: %d kernels in %d runs, per process %v; windows %.2f%% / %.2f%%; members %+v",
		total, len(runs), per, ws[0].share(), ws[1].share(), members)
	must.MapLen(t, 2, per)
	for _, n := range per {
		must.Greater(t, total*2/5, n) // fair: each about half
	}
	// 2 s of 100 ms quanta: about 20 turns, a run each
	must.Between(t, 10, len(runs), 30)
	for _, r := range runs[1 : len(runs)-1] { // the first and last are cut by the start and end
		must.Between(t, 80, r[1], 101, must.Sprintf("a run of %d kernels of a 100 ms quantum: %v", r[1], runs))
	}
	must.MapLen(t, 2, members)
	for _, id := range []uint64{11, 12} {
		m := members[id]
		must.Eq(t, uint64(100_000_000), m.quantum)
		must.Eq(t, uint32(1000), m.share)
		must.Greater(t, 5, m.turns)
		// suspended about half the run: each waited for the other's turns
		must.Between(t, 800_000_000, m.suspended, 1_200_000_000)
	}

	_, runs, per, members = slicedPair(t, b, "compute_pct=100\ntimeslice_id=11\n", "compute_pct=100\ntimeslice_id=12\n", "", 1000, 2000, 500)
	t.Logf("not time-sliced: %d runs, per process %v", len(runs), per)
	must.Greater(t, 1000, len(runs))
	must.MapEmpty(t, members)
}

// The pool: two time-sliced tasks capped at 30% each run, in turn, at
// 60%, so each gets its 30% over the round (alone in its quantum at its own
// cap it would get 15%), and together they never exceed the 60% of their
// caps. One alone has a pool of its own cap: 30%.
func TestTimeSlicePoolsCaps(t *testing.T) {
	b := build(t)
	ws, runs, _, members := slicedPair(t, b, "compute_pct=30\ntimeslice_id=21\n", "compute_pct=30\ntimeslice_id=22\n", "200", 2000, 4000, 1000)
	t.Logf("caps 30+30, quantum 200 ms: %.2f%% + %.2f%% of the GPU, %d runs, members %+v", ws[0].share(), ws[1].share(), len(runs), members)
	for _, w := range ws {
		must.Between(t, 27, w.share(), 33)
	}
	must.Less(t, 62, ws[0].share()+ws[1].share())
	must.Between(t, 10, len(runs), 30) // they alternated: 4 s of 200 ms quanta

	dir := reservation(t, "compute_pct=30\ntimeslice_id=23\n")
	sliceFile(t, dir)
	w := together(t, b, kernRun{run{limits: dir, program: b.kdirect, mode: "direct",
		env: append(gpuEnv(t), "GPUSHARE_TIMESLICE_QUANTUM_MS=200")}, []string{"kern:2000", "run:3000:500:3000"}})[0]
	t.Logf("alone at 30%%, time-sliced: %.2f%%", w.share())
	must.Between(t, 28, w.share(), 32)
}

// A member that dies (its process exits holding the turn) is skipped: the
// other is not kept waiting for it, and once the dead one is absent (1 s
// unseen) its cap leaves the pool: the survivor, capped at 30%, runs at
// 30% again, not at the 60% of the pool it shared.
func TestTimeSliceSkipsADeadMember(t *testing.T) {
	b := build(t)
	a, c := reservation(t, "compute_pct=30\ntimeslice_id=31\n"), reservation(t, "compute_pct=30\ntimeslice_id=32\n")
	rot := sliceFile(t, a, c)
	env := append(gpuEnv(t), "GPUSHARE_TIMESLICE_QUANTUM_MS=200")
	ws := together(t, b,
		kernRun{run{limits: a, program: b.kdirect, mode: "direct", env: env}, []string{"kern:2000", "run:5000:3000:5000"}},
		kernRun{run{limits: c, program: b.kdirect, mode: "direct", env: env}, []string{"kern:2000", "run:1000:0:1000"}})
	members := sliceMembers(t, rot)
	t.Logf("survivor after the other died: %.2f%% of the GPU; members %+v", ws[0].share(), members)
	must.Between(t, 28, ws[0].share(), 32)
	must.Greater(t, 0, members[32].turns)
	// the survivor waited only while the other lived (1 s, half of it)
	must.Less(t, 700_000_000, members[31].suspended)
}

// The quantum is clamped (5 ms -> 10 ms); a malformed one leaves the task
// not time-sliced, with a line on stderr; without the rotation file the
// task is not time-sliced either, and says so.
func TestTimeSliceQuantumChecked(t *testing.T) {
	b := build(t)
	dir := reservation(t, "compute_pct=100\ntimeslice_id=41\n")
	rot := sliceFile(t, dir)
	one := func(dir, q string) string {
		_, stderr := runOne(t, b, kernRun{run{limits: dir, program: b.kdirect, mode: "direct",
			env: append(gpuEnv(t), "GPUSHARE_TIMESLICE_QUANTUM_MS="+q)}, []string{"kern:1000", "run:100:0:100"}})
		return stderr
	}
	must.Eq(t, "", one(dir, "5"))
	must.Eq(t, uint64(10_000_000), sliceMembers(t, rot)[41].quantum)

	dir = reservation(t, "compute_pct=100\ntimeslice_id=42\n")
	rot = sliceFile(t, dir)
	must.StrContains(t, one(dir, "2s"), "GPUSHARE_TIMESLICE_QUANTUM_MS=2s: not a whole number of milliseconds")
	must.MapEmpty(t, sliceMembers(t, rot))

	must.StrContains(t, one(reservation(t, "compute_pct=100\n"), "100"), "launches are not time-sliced")
}

// A time-sliced task that queues many kernels between waits (a framework)
// keeps to its quantum: in its turn it is paced at the pool (at most 99.9%
// of the GPU), its queue at most two kernels ahead and never past the
// turn's end. Two at 100% launching 64 kernels of 2 ms per wait, quantum
// 100 ms: once they know their kernels' length, every run in the launch log
// is about a quantum's worth (50 kernels, and at most the two ahead);
// unpaced, a holder queued its whole 64 (128 ms) in each turn.
func TestTimeSlicedDeepQueueKeepsItsQuantum(t *testing.T) {
	g := newGPUChecker(t, false)
	l, err := g.fieldsOn(g.clock(1)(0), "", "calib:2000")
	must.NoError(t, err)
	a, c := reservation(t, "compute_pct=100\ntimeslice_id=81\n"), reservation(t, "compute_pct=100\ntimeslice_id=82\n")
	sliceFile(t, a, c)
	log := filepath.Join(t.TempDir(), "log")
	args := []string{"spin:" + l[0][2] + ":3000:500:0:64"}
	runs, err := g.pair(g.clockOn(), [2]string{a, c}, [2][]string{args, args}, "GPUSHARE_TIMESLICE_QUANTUM_MS=100", "FAKECUDA_LOG="+log)
	must.NoError(t, err)
	got, per := launchRuns(t, log)
	longest := 0
	must.Greater(t, 20, len(got)) // they alternated: 3 s of 100 ms quanta
	// the first runs are launched before the tasks know their kernels'
	// length (charged nothing until then), and the last is cut by the end
	for _, r := range got[4 : len(got)-1] {
		longest = max(longest, r[1])
	}
	t.Logf("%d runs, the longest %d kernels of 2 ms after the first 4; per process %v; %v %v; runs %v", len(got), longest, per, runs[0], runs[1], got)
	must.Between(t, 40, longest, 54)
}
