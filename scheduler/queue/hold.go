package queue

import (
	"cmp"
	"slices"
	"time"
)

// Room is how long until a node has room for one allocation of a waiting
// job.
type Room struct {
	Node string
	In   time.Duration
}

// RoomIn returns how long until need of a node's GPUs are free, given how
// long until each of them frees (0: free now); false when the node has
// fewer GPUs than need.
func RoomIn(free []time.Duration, need int) (time.Duration, bool) {
	if need < 1 || need > len(free) {
		return 0, false
	}
	s := slices.Clone(free)
	slices.Sort(s)
	return s[need-1], true
}

// Hold is the reservation of EASY backfilling: for a waiting job of count
// allocations that expects to run for expected, the count nodes that have
// room first (ties keep the given order), or nil when there are fewer, or
// when the last would have room only after expected: holding GPUs idle
// longer than the job then uses them costs the others more than it saves
// the job. Jobs behind it may use a held node only if they end within its
// In.
func Hold(rooms []Room, count int, expected time.Duration) []Room {
	if count < 1 || len(rooms) < count {
		return nil
	}
	rs := slices.Clone(rooms)
	slices.SortStableFunc(rs, func(a, b Room) int { return cmp.Compare(a.In, b.In) })
	rs = rs[:count]
	if rs[count-1].In > expected {
		return nil
	}
	return rs
}
