package gavel

import (
	"time"

	"github.com/gpushare/gpushare/scheduler/queue"
)

// reservation holds a server for a waiting multi-GPU job (EASY
// backfilling): until the job can start there, other jobs may use the
// server only if they are expected to finish first.
type reservation struct {
	job  int
	node string
	at   float64 // seconds from now until the job's GPUs are free there
}

// reserveFor returns the servers that will first have room for multi-GPU
// job j, at the running jobs' current rates, or nil when j should not hold
// any: when they would not all be free within j's own expected run time
// (holding GPUs idle longer than the job will then use them costs the
// others more than it saves j) or the cluster lacks the servers.
func (s *sim) reserveFor(j Job) []reservation {
	per := min(j.Scale, s.cluster.GPUsPerNode)
	count := (j.Scale + per - 1) / per
	busy := map[string][]float64{} // node -> when each busy GPU frees
	for g, ids := range s.onGPU {
		t := 0.0
		for _, id := range ids {
			r := s.run[id]
			t = max(t, r.rem/r.rate)
		}
		busy[s.gpuNode[g]] = append(busy[s.gpuNode[g]], t)
	}
	var rooms []queue.Room
	for _, n := range s.snap.Nodes() {
		free := make([]time.Duration, len(n.GPUs)) // idle GPUs: 0
		for i, t := range busy[n.ID] {
			free[i] = queue.Seconds(t)
		}
		if in, ok := queue.RoomIn(free, per); ok {
			rooms = append(rooms, queue.Room{Node: n.ID, In: in})
		}
	}
	var rs []reservation
	for _, r := range queue.Hold(rooms, count, queue.Seconds(s.expected(j))) {
		rs = append(rs, reservation{j.ID, r.Node, r.In.Seconds()})
	}
	return rs
}

// avoid lists the reserved servers that job would delay if it ran there
// for dur seconds.
func (s *sim) avoid(job int, dur float64) []string {
	var out []string
	for _, r := range s.reserved {
		if r.job != job && dur > r.at {
			out = append(out, r.node)
		}
	}
	return out
}

// mayUse reports whether job may run on node for dur seconds without
// delaying a reservation.
func (s *sim) mayUse(job int, node string, dur float64) bool {
	for _, r := range s.reserved {
		if r.job != job && r.node == node && dur > r.at {
			return false
		}
	}
	return true
}
