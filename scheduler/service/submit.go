package service

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"maps"
	"slices"
	"strconv"

	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
)

// A job's place in the queue is when it was submitted. Nomad sets a job's
// SubmitTime anew at every registration, the scheduler's too: a job that
// the scheduler pinned a group of, preempted or unpaired would go to the
// back of the queue (and a job preempted again and again would starve).
// So when the scheduler registers a job again while groups of it wait at
// the gate (it pinned some of them, or gated one again to preempt or
// unpair it), it keeps, in its records (the submitted kind), when the
// version it replaced was submitted and the modify index of the version
// it registered; that version's submit time is the kept one. A version
// someone else registers is submitted when Nomad says.

// submitted is when a job the scheduler registered again was first
// submitted, and the version (modify index) the scheduler registered.
type submitted struct {
	index uint64
	at    int64 // Unix nanoseconds, as api.Job.SubmitTime
}

// submitOf is when job was submitted: the time kept for the version the
// scheduler registered, else its SubmitTime (0: unknown). The caller holds
// s.mu.
func (s *records) submitOf(job *api.Job) int64 {
	if r, ok := s.submitted[model.JobKey(nsOf(job), *job.ID)]; ok && job.JobModifyIndex != nil && *job.JobModifyIndex == r.index {
		return r.at
	}
	if job.SubmitTime != nil {
		return *job.SubmitTime
	}
	return 0
}

// keepSubmit remembers, for job (the version at modify index from) that
// the scheduler registered again as index to, when it was submitted. The
// caller holds s.mu.
func (s *records) keepSubmit(job *api.Job, from, to uint64) {
	if to == 0 || job.ID == nil {
		return
	}
	at := int64(0)
	k := model.JobKey(nsOf(job), *job.ID)
	if r, ok := s.submitted[k]; ok && r.index == from {
		at = r.at
	} else if job.SubmitTime != nil {
		at = *job.SubmitTime
	}
	if at > 0 {
		s.submitted[k] = submitted{index: to, at: at}
	}
}

// keepSubmitOfPin is keepSubmit for a pin: needed while groups of the job
// still wait at the gate, or to carry on a time kept before (the job was
// preempted or unpaired). A job whose groups are all pinned has no record
// until it is gated again; then its place is when it was pinned, which
// repeated preemptions keep. The caller holds s.mu.
func (s *records) keepSubmitOfPin(job *api.Job, from, to uint64) {
	_, kept := s.submitted[model.JobKey(nsOf(job), *job.ID)]
	if kept || len(pin.Gated(job)) > 0 {
		s.keepSubmit(job, from, to)
	}
}

// submittedItems are the submit times to save; those of jobs that are
// gone, or that someone else registered since, are dropped. The caller
// holds s.mu.
func (s *records) submittedItems() map[string]string {
	items := map[string]string{}
	for _, k := range slices.Sorted(maps.Keys(s.submitted)) {
		r := s.submitted[k]
		job := s.state.Jobs[k]
		if job == nil || (job.JobModifyIndex != nil && *job.JobModifyIndex > r.index) {
			delete(s.submitted, k)
			continue
		}
		b, _ := json.Marshal([]string{nsOf(job), *job.ID, strconv.FormatUint(r.index, 10), strconv.FormatInt(r.at, 10)})
		h := sha256.Sum256([]byte(k))
		items[hex.EncodeToString(h[:10])] = string(b)
	}
	return items
}

// loadSubmitted takes the leader's submit times. The caller holds s.mu.
func (s *records) loadSubmitted(items map[string]string) {
	out := map[string]submitted{}
	for _, v := range items {
		var f []string
		if json.Unmarshal([]byte(v), &f) != nil || len(f) != 4 {
			continue
		}
		index, err1 := strconv.ParseUint(f[2], 10, 64)
		at, err2 := strconv.ParseInt(f[3], 10, 64)
		if err1 == nil && err2 == nil {
			out[model.JobKey(f[0], f[1])] = submitted{index: index, at: at}
		}
	}
	s.submitted = out
}
