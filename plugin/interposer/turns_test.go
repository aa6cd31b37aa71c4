package interposer

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/shoenig/test/must"
)

// Side by side (src/slice.c, issue 46 part 3): capped tasks of one GPU,
// each linked to the GPU's rotation as the plugin links every
// reservation, take turns of their share of a round (turn_ms) instead of
// launching at once, so that a real GPU switches between their contexts
// once a turn, not at every kernel (make gpu-check measures what that
// changes on a GPU; the fake one has no switch cost). On the simulated
// clock, over the fake GPU, with its launch log.

// cappedPair runs two capped tasks with the given limits on one GPU and
// rotation, 1 ms kernels for 3 s, measured over the last 2 s.
func cappedPair(t *testing.T, b *binaries, limA, limB string) ([]window, [][2]int, map[uint64]sliceMember) {
	t.Helper()
	a, c := reservation(t, limA), reservation(t, limB)
	rot := sliceFile(t, a, c)
	log := filepath.Join(t.TempDir(), "log")
	env := append(gpuEnv(t), "FAKECUDA_LOG="+log)
	args := []string{"kern:1000", "run:3000:1000:3000"}
	ws := together(t, b,
		kernRun{run{limits: a, program: b.kdirect, mode: "direct", env: env}, args},
		kernRun{run{limits: c, program: b.kdirect, mode: "direct", env: env}, args})
	runs, _ := launchRuns(t, log)
	return ws, runs, sliceMembers(t, rot)
}

// Caps of 30% and 70%: each task's kernels come in runs of its turn (30
// and 70 kernels of 1 ms in a round of 100 ms), each gets its cap, and the
// rotation knows them as capped members with their turns. With turn_ms=0
// the same two are paced each on its own: their kernels interleave and
// the rotation has no member.
func TestCappedTasksSideBySideTakeTurns(t *testing.T) {
	b := build(t)
	ws, runs, members := cappedPair(t, b, "compute_pct=30\ntimeslice_id=51\n", "compute_pct=70\ntimeslice_id=52\n")
	t.Logf("in turns: %.2f%% and %.2f%%, %d runs, members %+v", ws[0].share(), ws[1].share(), len(runs), members)
	must.Between(t, 27, ws[0].share(), 33)
	must.Between(t, 66, ws[1].share(), 74)
	// 3 s of 100 ms rounds: about 30 turns each, a run each
	must.Between(t, 30, len(runs), 90)
	long := 0
	for _, r := range runs {
		if r[1] >= 20 {
			long++
		}
	}
	must.Greater(t, len(runs)*3/4, long, must.Sprintf("runs of a turn's kernels: %v", runs))
	must.MapLen(t, 2, members)
	for id, turn := range map[uint64]uint64{51: 30_000_000, 52: 70_000_000} {
		m := members[id]
		must.Eq(t, turn, m.quantum)
		must.Between(t, 15, m.turns, 45)
	}

	ws, runs, members = cappedPair(t, b, "compute_pct=30\ntimeslice_id=51\nturn_ms=0\n", "compute_pct=70\ntimeslice_id=52\nturn_ms=0\n")
	t.Logf("turn_ms=0: %.2f%% and %.2f%%, %d runs", ws[0].share(), ws[1].share(), len(runs))
	must.Greater(t, 500, len(runs))
	must.MapEmpty(t, members)
}

// A capped task's turn runs at the pool of the caps of the members that
// want the GPU: beside a neighbour that has gone (it ran its first 500 ms
// and exited), it is back at its own cap within a round, not at the pool
// of both for as long as the other counts as present (1 s): capped tasks
// in turns are held to their caps as they are alone.
func TestCappedTurnsKeepTheCapBesideAGoneNeighbour(t *testing.T) {
	b := build(t)
	a, c := reservation(t, "compute_pct=30\ntimeslice_id=61\n"), reservation(t, "compute_pct=70\ntimeslice_id=62\n")
	rot := sliceFile(t, a, c)
	env := gpuEnv(t)
	ws := together(t, b,
		kernRun{run{limits: a, program: b.kdirect, mode: "direct", env: env}, []string{"kern:1000", "run:3000:700:1700"}},
		kernRun{run{limits: c, program: b.kdirect, mode: "direct", env: env}, []string{"kern:1000", "run:500:0:500"}})
	members := sliceMembers(t, rot)
	t.Logf("after the neighbour left: %.2f%%; members %+v", ws[0].share(), members)
	must.Between(t, 27, ws[0].share(), 34)
	must.Greater(t, 0, members[62].turns) // they took turns while both ran
}

// A framework queues many kernels between synchronisations. A capped task
// in its turn is paced even when the pool is the whole GPU, so that what it
// queues ahead stays within two kernels (2 ms at least) and never runs
// past its turn; and while it waits for its pacer it asks again often
// enough (4 ms) not to count as idle and lose the turn. Caps of 30% and
// 70%, 16 and 64 kernels of 2 ms launched before each wait: each gets its
// cap. (Unpaced at the whole GPU both got 50%, each turn a batch; with the
// pacer's 20 ms sleeps the 70% task lost every turn and got nothing.)
func TestCappedTurnsBoundADeepQueue(t *testing.T) {
	g := newGPUChecker(t, false)
	l, err := g.fieldsOn(g.clock(1)(0), "", "calib:2000")
	must.NoError(t, err)
	k := kernels{n: l[0][2], alone: num(l[0][3])}
	for _, depth := range []string{"16", "64"} {
		d30, d70 := reservation(t, "compute_pct=30\ntimeslice_id=71\n"), reservation(t, "compute_pct=70\ntimeslice_id=72\n")
		sliceFile(t, d30, d70)
		spin := []string{"spin:" + k.n + ":5000:1000:0:" + depth}
		both, err := g.pair(g.clockOn(), [2]string{d30, d70}, [2][]string{spin, spin})
		must.NoError(t, err)
		p30, p70 := k.share(both[0][0]), k.share(both[1][0])
		t.Logf("%s queued: %.1f%% and %.1f%%", depth, p30, p70)
		must.Between(t, 26, p30, 36)
		must.Between(t, 65, p70, 74)
	}
}

// A capped task that finds its GPU's rotation full (48 members) takes no
// turns and is paced on its own at its cap, saying so once; it neither
// spins nor stops.
func TestCappedTaskBesideAFullRotationIsPacedOnItsOwn(t *testing.T) {
	b := build(t)
	dir := reservation(t, "compute_pct=30\ntimeslice_id=91\n")
	rot := sliceFile(t, dir)
	data, err := os.ReadFile(rot)
	must.NoError(t, err)
	for i := range 48 { // members present for ever (seen far in the future)
		m := data[96+64*i:]
		binary.LittleEndian.PutUint64(m, uint64(1000+i))
		binary.LittleEndian.PutUint64(m[24:], 1<<62)
	}
	must.NoError(t, os.WriteFile(rot, data, 0o666))
	w, stderr := runOne(t, b, kernRun{run{limits: dir, program: b.kdirect, mode: "direct", env: gpuEnv(t)},
		[]string{"kern:1000", "run:2000:500:2000"}})
	t.Logf("beside a full rotation: %.2f%%; %s", w.share(), stderr)
	must.Between(t, 28, w.share(), 32)
	must.StrContains(t, stderr, "rotation is full")
	must.MapNotContainsKey(t, sliceMembers(t, rot), 91)
}
