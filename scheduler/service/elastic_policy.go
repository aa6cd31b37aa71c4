package service

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/placement"
)

// The policy of elastic groups (elastic.go): which group shrinks, for
// what, and which grows, decided by the placement core on the pass's
// snapshot, which it leaves as found (lender).

// shrinkable lists m's allocations above its floor and below its count,
// newest (highest index) first.
func (m *managed) shrinkable() []indexedAlloc {
	var out []indexedAlloc
	for _, a := range slices.Backward(m.allocs) {
		if a.index >= m.floor() && a.index < m.count {
			out = append(out, a)
		}
	}
	return out
}

// acting reports whether a resize of m was already sent for its job's
// version (the model has not seen Nomad's new version yet), or Nomad
// refused one less than an interval ago.
func (e *elastic) acting(m *managed, now time.Time) bool {
	s, ok := e.sent[m.key]
	return ok && (s.index == m.jobIndex && s.refused == "" || s.refused != "" && now.Before(s.at.Add(e.interval)))
}

// shrinkForWaiting lends the waiting groups, in queue order, the shares of
// the grown allocations, newest first, until each fits (decided by the
// placement core on the pass's snapshot with them taken out): the groups
// whose allocations it then takes shrink, down to the lowest index it
// takes, never below their floor. One resize per group.
func (e *elastic) shrinkForWaiting(p resizePass, ms []*managed) []resizeTo {
	var lendable []*managed
	for _, m := range ms {
		if !e.acting(m, p.now) && len(m.shrinkable()) > 0 {
			lendable = append(lendable, m)
		}
	}
	if len(lendable) == 0 || len(p.waits) == 0 {
		return nil
	}
	l := &lender{snap: p.snap}
	defer l.undo()
	var out []resizeTo
	stepped := map[decide.Key]bool{}
	for _, w := range p.waits {
		if slices.ContainsFunc(ms, func(m *managed) bool { return m.key == w.Key }) {
			continue // its own growth: shrinkBack
		}
		released := l.takeAll(w.Replaces)
		var lent []indexedAlloc
		owner := map[string]*managed{}
		var d *placement.Decision
		for _, a := range l.newestFirst(lendable, stepped) {
			if !l.take(a.alloc.id) {
				continue
			}
			lent, owner[a.alloc.id] = append(lent, a.alloc), a.m
			if d = p.pol.Decide(p.snap, w.Req); d.Placed() {
				break
			}
		}
		l.putBack(len(lent))
		needed := []indexedAlloc(nil)
		if d != nil && d.Placed() {
			needed = neededBy(d, lent)
		}
		if len(needed) == 0 {
			l.putBack(released)
			continue
		}
		// the groups it takes allocations of shrink to below the lowest
		// index it takes: Nomad stops every allocation above the count
		target := map[*managed]int{}
		for _, a := range needed {
			m := owner[a.id]
			if t, ok := target[m]; !ok || a.index < t {
				target[m] = a.index
			}
		}
		for _, m := range slices.SortedFunc(maps.Keys(target), func(a, b *managed) int { return decide.Key.Compare(a.key, b.key) }) {
			to := max(target[m], m.floor())
			stepped[m.key] = true
			for _, a := range m.allocs {
				if a.index >= to {
					l.take(a.id) // Nomad stops it
				}
			}
			if to >= m.count {
				continue
			}
			reason := fmt.Sprintf("shrunk from %d to %d: %s waits for the shares its newest allocation(s) hold (%s)", m.count, to, w.Key, p.reasons[w.Key])
			out = append(out, resizeTo{g: m.elasticGroup, to: to, base: m.base, reason: reason})
		}
		l.keep(d) // the next waiting group sees this one placed
	}
	return out
}

// neededBy are the lent allocations whose shares the decision takes, else
// those on the nodes it uses.
func neededBy(d *placement.Decision, lent []indexedAlloc) []indexedAlloc {
	shares, nodes := map[string]bool{}, map[string]bool{}
	for _, p := range d.Placements {
		nodes[p.Node] = true
		for _, sh := range p.Shares {
			shares[sh] = true
		}
	}
	var out []indexedAlloc
	for _, a := range lent {
		if slices.ContainsFunc(a.shares, func(sh string) bool { return shares[sh] }) {
			out = append(out, a)
		}
	}
	if len(out) > 0 {
		return out
	}
	for _, a := range lent {
		if nodes[a.node] {
			out = append(out, a)
		}
	}
	return out
}

// shrinkBack shrinks, by one, a group whose growth Nomad did not place: it
// waits in the step itself, or has missed allocations for an interval
// since it last grew.
func (e *elastic) shrinkBack(p resizePass, ms []*managed, done []resizeTo) []resizeTo {
	var out []resizeTo
	for _, m := range ms {
		if m.count <= m.floor() || e.acting(m, p.now) || slices.ContainsFunc(done, func(r resizeTo) bool { return r.g.key == m.key }) {
			continue
		}
		waits := slices.ContainsFunc(p.waits, func(w decide.Group) bool { return w.Key == m.key })
		stale := m.unplaced && m.last != nil && m.last.Direction == "grow" && m.last.To == m.count && !p.now.Before(m.at.Add(e.interval))
		if !waits && !stale {
			continue
		}
		reason := fmt.Sprintf("shrunk from %d to %d: the allocation it grew by was not placed", m.count, m.count-1)
		if waits && p.reasons[m.key] != "" {
			reason += " (" + p.reasons[m.key] + ")"
		}
		out = append(out, resizeTo{g: m.elasticGroup, to: m.count - 1, base: m.base, reason: reason})
	}
	return out
}

// growOne grows one group by one allocation: the least grown of those
// that run all their allocations, below their max, past their interval,
// for which the placement core finds room for one more allocation on
// idle shares (the group decided again for its count plus one, its own
// allocations taken out, preempting nothing). Nothing grows while a group
// that could use those shares waits (waitsFor), nor in a pass that placed
// something the snapshot does not show,
// nor in one that shrinks a group (allow false). It says in why why each
// other group does not grow.
func (e *elastic) growOne(p resizePass, ms []*managed, allow bool, why map[decide.Key]string) []resizeTo {
	var cands []*managed
	for _, m := range ms {
		switch s := e.sent[m.key]; {
		case m.count >= m.max:
			why[m.key] = fmt.Sprintf("at its maximum (max = %d)", m.max)
		case e.acting(m, p.now) && s.refused != "":
			why[m.key] = s.refused
		case e.acting(m, p.now):
			why[m.key] = "a resize was sent; waiting for Nomad's new version of the job"
		case !m.running:
			why[m.key] = "grows only while every allocation of its count runs"
		case p.placing:
			why[m.key] = "does not grow in a pass that placed other work; looked at again in the next"
		case p.now.Before(m.at.Add(e.interval)):
			why[m.key] = fmt.Sprintf("resized %s ago; resizes at most once every %s (elastic_interval)", p.now.Sub(m.at).Round(time.Second), e.interval)
		case m.reqErr != "":
			why[m.key] = m.reqErr
		case !allow:
			why[m.key] = "does not grow in a pass that shrinks a group"
		default:
			cands = append(cands, m)
		}
	}
	slices.SortStableFunc(cands, func(a, b *managed) int {
		return cmp.Or(cmp.Compare(a.count-a.base, b.count-b.base), decide.Key.Compare(a.key, b.key))
	})
	for i, m := range cands {
		d := fitsOneMore(p, m)
		if d == nil {
			why[m.key] = "no idle shares hold one more of its allocations (it takes nothing that runs)"
			continue
		}
		if w, node, ok := waitsFor(p, m, d); ok {
			why[m.key] = fmt.Sprintf("does not grow while a group that could use the shares it would take waits for room (%s, on node %s): waiting work comes first", w, node)
			continue
		}
		for _, o := range cands[i+1:] {
			why[o.key] = "another group grows first; one grows per pass"
		}
		reason := fmt.Sprintf("grown from %d to %d: idle shares hold one more of its allocations and no group that could use them waits", m.count, m.count+1)
		return []resizeTo{{g: m.elasticGroup, to: m.count + 1, base: m.base, reason: reason}}
	}
	return nil
}

// fitsOneMore asks the placement core where m fits with one allocation
// more, its own allocations taken out of the snapshot (as the scheduler
// decides a group scaled past its pin), without preempting anything (nil:
// nowhere).
func fitsOneMore(p resizePass, m *managed) *placement.Decision {
	l := &lender{snap: p.snap}
	defer l.undo()
	for _, a := range m.allocs {
		l.take(a.id)
	}
	req := m.req
	req.Count = m.count + 1
	if d := p.pol.Decide(p.snap, req); d.Placed() && len(d.Preempt) == 0 {
		return d
	}
	return nil
}

// waitsFor names a group the step left waiting that could use the shares
// m's growth would take (d): one whose own rules allow a node of d and the
// model of its GPUs there. A group that waits for other nodes or another
// model does not hold m back.
func waitsFor(p resizePass, m *managed, d *placement.Decision) (decide.Key, string, bool) {
	for _, w := range p.waits {
		if w.Key == m.key {
			continue
		}
		r := w.Req
		for _, pl := range d.Placements {
			if r.Allowed != nil && !slices.Contains(r.Allowed, pl.Node) || slices.Contains(r.Avoid, pl.Node) {
				continue
			}
			if len(r.Models) == 0 || slices.ContainsFunc(pl.GPUs, func(u string) bool { return slices.Contains(r.Models, gpuModel(p.snap, pl.Node, u)) }) {
				return w.Key, pl.Node, true
			}
		}
	}
	return decide.Key{}, "", false
}

// gpuModel is the model of GPU uuid of a node of the snapshot.
func gpuModel(snap *placement.Snapshot, node, uuid string) string {
	if n, ok := snap.Node(node); ok {
		for i := range n.GPUs {
			if n.GPUs[i].UUID == uuid {
				return n.GPUs[i].Model
			}
		}
	}
	return ""
}

// lender takes allocations out of a snapshot and puts them back.
type lender struct {
	snap  *placement.Snapshot
	taken []placement.Alloc
	kept  []func()
}

func (l *lender) take(id string) bool {
	a, err := l.snap.Remove(id)
	if err != nil {
		return false
	}
	l.taken = append(l.taken, a)
	return true
}

func (l *lender) takeAll(ids []string) int {
	n := 0
	for _, id := range ids {
		if l.take(id) {
			n++
		}
	}
	return n
}

// putBack puts the last n allocations taken back.
func (l *lender) putBack(n int) {
	for range min(n, len(l.taken)) {
		a := l.taken[len(l.taken)-1]
		l.taken = l.taken[:len(l.taken)-1]
		_ = l.snap.AddAlloc(a)
	}
}

// keep applies a decision until undo.
func (l *lender) keep(d *placement.Decision) {
	var stopped []placement.Alloc
	for _, id := range d.Preempt {
		if a, ok := l.snap.Alloc(id); ok {
			stopped = append(stopped, a)
		}
	}
	if l.snap.Apply(d) != nil {
		return
	}
	l.kept = append(l.kept, func() {
		for _, p := range d.Placements {
			_, _ = l.snap.Remove(p.AllocID)
		}
		for _, a := range stopped {
			_ = l.snap.AddAlloc(a)
		}
	})
}

// undo leaves the snapshot as found.
func (l *lender) undo() {
	for _, f := range slices.Backward(l.kept) {
		f()
	}
	l.kept = nil
	l.putBack(len(l.taken))
}

// lendable is an allocation to lend and the group it is of.
type lendable struct {
	alloc indexedAlloc
	m     *managed
}

// newestFirst lists the shrinkable allocations still in the snapshot of
// the groups not yet resized, newest first: each group's highest index
// first (Nomad stops those first), and of the groups' next ones the
// latest created.
func (l *lender) newestFirst(ms []*managed, stepped map[decide.Key]bool) []lendable {
	var queues [][]lendable
	for _, m := range ms {
		if stepped[m.key] {
			continue
		}
		var q []lendable
		for _, a := range m.shrinkable() {
			if _, ok := l.snap.Alloc(a.id); ok {
				q = append(q, lendable{alloc: a, m: m})
			}
		}
		if len(q) > 0 {
			queues = append(queues, q)
		}
	}
	var out []lendable
	for len(queues) > 0 {
		best := 0
		for i, q := range queues {
			if q[0].alloc.create > queues[best][0].alloc.create {
				best = i
			}
		}
		out = append(out, queues[best][0])
		if queues[best] = queues[best][1:]; len(queues[best]) == 0 {
			queues = slices.Delete(queues, best, best+1)
		}
	}
	return out
}
