package service

import (
	"maps"
	"runtime"
	"sync"

	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/lifecycle"
	"github.com/hashicorp/nomad/api"
)

// A pass that looks at thousands of jobs (every waiting job of a large
// cluster, after its pins were sent) looks at them on every processor:
// deriveJob reads the model, the cache and the loop's memory of refusals
// and questions, and writes only to what it is handed (out). What it
// writes to what they share (the loop's refusals, feasible node sets,
// questions about priors and Nomad's refusals, the cache) it hands to
// out.shared, which runs it at once for the loop's own goroutine, and
// keeps it for a worker's part, run in order once every part is done.
// Each part has its own groups, reasons, stages and node-set memo, added
// to the pass's afterwards. Nothing is written while the parts read.

// deriveJobs is deriveJob for every job of keys, on every processor when
// they are many (deriveWorkers). beside, when not nil, runs first on the
// loop's goroutine with out, as the workers look at the jobs; it reads
// none of what they write until they are done. The caller holds s.mu.
func (s *loop) deriveJobs(keys []string, out *collected, c *collectCache, beside func(out *collected)) {
	workers := deriveWorkers(len(keys))
	c.workers = workers
	look := func(keys []string, part *collected) { // counted in part.looked
		for _, k := range keys {
			if job := s.state.Jobs[k]; job != nil {
				part.looked++
				s.deriveJob(k, job, part, c)
			}
		}
	}
	if workers <= 1 {
		if beside != nil {
			beside(out)
		}
		out.looked = 0
		look(keys, out)
		c.looked += out.looked
		return
	}
	s.state.ForReaders() // the model's indexes built once, before they read it together
	parts := make([]*collected, workers)
	per := (len(keys) + workers - 1) / workers
	var wg sync.WaitGroup
	for w := range parts {
		from, to := min(w*per, len(keys)), min((w+1)*per, len(keys))
		part := out.part(to - from)
		parts[w] = part
		wg.Go(func() { look(keys[from:to], part) })
	}
	var mine []func()
	if beside != nil {
		out.later = &mine
		beside(out)
		out.later = nil
	}
	wg.Wait()
	// what the parts found is added to the pass's on one goroutine, while
	// their writes to what is shared are made on this one: none of those
	// writes is to out
	var gathered sync.WaitGroup
	gathered.Go(func() {
		for _, p := range parts {
			out.gather(p)
		}
	})
	for _, fn := range mine {
		fn()
	}
	for _, p := range parts {
		for _, fn := range *p.later {
			fn()
		}
		c.looked += p.looked
	}
	gathered.Wait()
}

// deriveWorkers is how many goroutines deriveJobs looks at n jobs with:
// one per processor, each with derivePerWorker jobs at least.
func deriveWorkers(n int) int { return max(min(runtime.GOMAXPROCS(0), n/derivePerWorker), 1) }

// derivePerWorker is the fewest jobs worth a goroutine of their own (a
// variable for the tests).
var derivePerWorker = 512

// shared runs fn, a write to what the loop's goroutine and a pass's
// workers share, now, or once the workers are done when out is a
// worker's part (or the loop's own while they run).
func (out *collected) shared(fn func()) {
	if out.later == nil {
		fn()
		return
	}
	*out.later = append(*out.later, fn)
}

// note is s.note through out.shared: what the API shows, changed under
// s.mu once no worker reads it.
func (out *collected) note(s *loop, fn func()) {
	out.shared(func() { s.note(fn) })
}

// part is a worker's share of out, for about n jobs: maps of its own,
// its writes to what is shared kept for later.
func (out *collected) part(n int) *collected {
	return &collected{
		jobs: make(map[decide.Key]*api.Job, n), groups: make([]decide.Group, 0, n),
		pending: map[decide.Key]string{}, stages: make(map[decide.Key]lifecycle.Result, n),
		seen: map[string]nodeSet{}, known: out.known, said: map[decide.Key]string{},
		shape: out.shape, built: out.built, later: new([]func()),
	}
}

// gather adds what a worker found to out.
func (out *collected) gather(p *collected) {
	out.groups = append(out.groups, p.groups...)
	out.inPlace = append(out.inPlace, p.inPlace...)
	maps.Copy(out.jobs, p.jobs)
	maps.Copy(out.pending, p.pending)
	maps.Copy(out.stages, p.stages)
	maps.Copy(out.said, p.said)
	maps.Copy(out.seen, p.seen)
}
