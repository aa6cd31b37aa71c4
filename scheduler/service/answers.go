package service

import (
	"maps"
	"slices"

	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/lifecycle"
	"github.com/gpushare/gpushare/scheduler/model"
)

// answers are the last pass's answers per group, kept for the API (view.go,
// the page, the metrics) until the next pass, as Nomad's reconciler keeps
// its results per group: why each group waits and its place in the queue,
// why each pinned group is where it is, and where each group stands in
// its job's life. A pass replaces pending, positions and stages whole
// (publish, setStages) and notes placed group by group as it pins; the
// records save pending and placed for followers (reasons, readReasons).
//
// Lock: every field is written under the model's lock (cluster.mu) by the
// loop's goroutine (and by the records reading the leader's notes), and
// read under it by the API; the loop's goroutine, their only other
// writer, reads them without it.
type answers struct {
	mu *timedMutex // the model's lock (cluster.mu)
	// pending is why each group waits (the step's reason, or collect's)
	pending map[decide.Key]string
	// positions are the queue places the last pass gave the groups it
	// left waiting
	positions map[decide.Key]queuePos
	// placed is why each pinned group was placed where it is: the
	// placement core's reason, kept out of the signed meta (it depends
	// on the cluster's state, and the meta must not change when the
	// decision does not)
	placed map[decide.Key]string
	// stages are where the last pass found each group in its job's life
	// (lifecycle.Reconcile), for the API and the restart counts: read
	// from Nomad every pass, never kept across passes
	stages map[decide.Key]lifecycle.Result
	// read is the model index the last finished pass read (Health)
	read uint64
}

func newAnswers(mu *timedMutex) answers {
	return answers{mu: mu, pending: map[decide.Key]string{}, placed: map[decide.Key]string{}}
}

// waits is why group k waits ("" when it does not).
func (a *answers) waits(k decide.Key) string { return a.pending[k] }

// waitingGroups are the groups that wait, sorted.
func (a *answers) waitingGroups() []decide.Key {
	return slices.SortedFunc(maps.Keys(a.pending), decide.Key.Compare)
}

// position is group k's place in the queue, if the last pass gave it one.
func (a *answers) position(k decide.Key) (queuePos, bool) {
	p, ok := a.positions[k]
	return p, ok
}

// publish makes a pass's pending groups and queue places what the API
// shows. The caller holds the model's lock.
func (a *answers) publish(pending map[decide.Key]string, positions map[decide.Key]queuePos) {
	a.pending, a.positions = pending, positions
}

// finished notes the model index a pass that ended read; decided is the
// last. The caller holds the model's lock.
func (a *answers) finished(index uint64) { a.read = index }

func (a *answers) decided() uint64 { return a.read }

// placedWhy is why pinned group k is where it is.
func (a *answers) placedWhy(k decide.Key) string { return a.placed[k] }

// place notes why group k, pinned now, is where it is. The caller holds
// the model's lock.
func (a *answers) place(k decide.Key, why string) { a.placed[k] = why }

// stage is where the last pass found group k in its job's life.
func (a *answers) stage(k decide.Key) (lifecycle.Result, bool) {
	st, ok := a.stages[k]
	return st, ok
}

// sayStage changes what the API says of group k's stage (a staged hold,
// a promote), if the last pass found it. The caller holds the model's
// lock.
func (a *answers) sayStage(k decide.Key, why string) {
	if st, ok := a.stages[k]; ok {
		st.Why = why
		a.stages[k] = st
	}
}

// setStages makes stages, which the caller no longer writes, the stages
// the API shows. The caller holds the model's lock.
func (a *answers) setStages(stages map[decide.Key]lifecycle.Result) { a.stages = stages }

// allStages are the stages the API shows, to read only.
func (a *answers) allStages() map[decide.Key]lifecycle.Result { return a.stages }

// notes are the pending and placed reasons, for the records. The caller
// holds the model's lock.
func (a *answers) notes() (pending, placed map[decide.Key]string) { return a.pending, a.placed }

// readNotes takes the leader's pending and placed reasons (the records).
// The caller holds the model's lock.
func (a *answers) readNotes(pending, placed map[decide.Key]string) {
	a.pending = pending
	maps.Copy(a.placed, placed)
}

// sweep forgets why pinned groups whose job st no longer has were placed:
// found without the model's lock, deleted under it (the API reads them).
// The caller is the loop's goroutine during a pass's read of st, without
// the lock.
func (a *answers) sweep(st *model.State) {
	if gone := goneKeys(st, a.placed); len(gone) > 0 {
		a.mu.Lock()
		for _, k := range gone {
			delete(a.placed, k)
		}
		a.mu.Unlock()
	}
}
