package gpuhistory

import (
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"
)

// Stat names the plugin reports on the shares of a time-sliced task
// (plugin.StatTimeslice*; issue 46 part 2).
const (
	statTimesliceQuantum   = "Time-slice quantum"   // ms
	statTimesliceSuspended = "Time-slice suspended" // ms, since the task began
	statTimesliceTurns     = "Time-slice turns"
)

// Timeslice is what the plugin reports of a time-sliced task: its
// quantum, the time its launches waited for their turn in all, and the
// turns it was given.
type Timeslice struct {
	GPU       string // the UUID of the GPU whose rotation these are
	Quantum   time.Duration
	Suspended time.Duration
	Turns     uint64
}

// timesliceOf reads a share's time-slicing stats; false when it has none.
func timesliceOf(a map[string]*api.StatValue) (*Timeslice, bool) {
	q, ok := num(a[statTimesliceQuantum])
	if !ok {
		return nil, false
	}
	s, _ := num(a[statTimesliceSuspended])
	n, _ := num(a[statTimesliceTurns])
	return &Timeslice{Quantum: time.Duration(q * float64(time.Millisecond)),
		Suspended: time.Duration(s * float64(time.Millisecond)), Turns: uint64(max(n, 0))}, true
}

// Timeslice is an allocation's time-slicing, from the shares it holds:
// each reports its task's, so the one with the most suspended time (a
// task of several GPUs is a member of each GPU's rotation: the figures of
// the GPU it waited most on). False when none of its shares reports it.
func (r *Round) Timeslice(shares []string) (Timeslice, bool) {
	var out Timeslice
	found := false
	for _, id := range shares {
		if t := r.Shares[id].Timeslice; t != nil && (!found || t.Suspended > out.Suspended) {
			out, found = *t, true
			out.GPU = r.Shares[id].GPU
		}
	}
	return out, found
}

// AllocTimeslice is an allocation's latest time-slicing figures with what
// names it.
type AllocTimeslice struct {
	Alloc, Namespace, Job, Group string
	Timeslice
}

// SetTimeslices replaces the allocations' latest time-slicing figures
// (those of the last round: an allocation gone is forgotten).
func (s *Store) SetTimeslices(ts []AllocTimeslice) {
	slices.SortFunc(ts, func(a, b AllocTimeslice) int { return strings.Compare(a.Alloc, b.Alloc) })
	s.mu.Lock()
	defer s.mu.Unlock()
	s.timeslices = ts
}

// Timeslices are the allocations' latest time-slicing figures, by
// allocation ID.
func (s *Store) Timeslices() []AllocTimeslice {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.timeslices)
}

// TimesliceOf is one allocation's latest figures.
func (s *Store) TimesliceOf(alloc string) (AllocTimeslice, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i, ok := slices.BinarySearchFunc(s.timeslices, alloc, func(a AllocTimeslice, id string) int { return strings.Compare(a.Alloc, id) })
	if !ok {
		return AllocTimeslice{}, false
	}
	return s.timeslices[i], true
}
