package service

import (
	"net/http"
	"slices"
	"strings"

	"github.com/gpushare/gpushare/scheduler/gpuhistory"
)

// historian is a view that keeps the GPUs' history (the loop does).
type historian interface {
	gpuHistory() *gpuhistory.Store
}

// noHistory is the history of a view without one.
var noHistory = gpuhistory.New(gpuhistory.Span, 0)

// historyStore is the view's history, or an empty one.
func (s *httpAPI) historyStore() *gpuhistory.Store {
	if h, ok := s.view.(historian); ok {
		return h.gpuHistory()
	}
	return noHistory
}

// History is the body of /v1/history: each GPU's and each job's
// utilisation over the last hour, one point per observe interval.
type History struct {
	SpanSeconds     float64 `json:"span_seconds"`
	IntervalSeconds float64 `json:"interval_seconds"`
	// GPUs are the GPUs of the map, each with its utilisation (percent).
	GPUs []GPUHistory `json:"gpus"`
	// Jobs are the jobs of the namespaces the caller may read, each with
	// its utilisation in percent of one GPU, summed over its GPUs: its
	// processes' SM utilisation where the plugin reports it, else each
	// GPU's utilisation times the part of its shares the job holds.
	Jobs []JobHistory `json:"jobs"`
}

// GPUHistory is one GPU's utilisation over time.
type GPUHistory struct {
	Node        string             `json:"node"`
	Index       int                `json:"index"`
	UUID        string             `json:"uuid"`
	Utilization []gpuhistory.Point `json:"utilization"`
}

// JobHistory is one job's utilisation over time.
type JobHistory struct {
	Namespace   string             `json:"namespace"`
	Job         string             `json:"job"`
	Utilization []gpuhistory.Point `json:"utilization"`
}

// handleHistory serves /v1/history, authorised as /v1/gpus (it may read
// nodes); the jobs listed are those of the namespaces its token may read.
func (s *httpAPI) handleHistory(w http.ResponseWriter, r *http.Request) {
	if err := s.authorize(r, authScope{Nodes: true}); err != nil {
		authFailed(w, err)
		return
	}
	see := s.visibility(r)
	h := s.history(see.can)
	if see.err != nil {
		authFailed(w, see.err)
		return
	}
	writeJSON(w, http.StatusOK, h)
}

// history reads the store: the GPUs of the map, the jobs visible.
func (s *httpAPI) history(visible func(ns string) bool) History {
	st, now := s.historyStore(), s.now()
	out := History{SpanSeconds: st.Span().Seconds(), IntervalSeconds: st.Interval().Seconds(), GPUs: []GPUHistory{}, Jobs: []JobHistory{}}
	m := s.view.gpuMap(func(string) bool { return false })
	for _, n := range m.Nodes {
		for _, g := range n.GPUs {
			out.GPUs = append(out.GPUs, GPUHistory{Node: n.Name, Index: g.Index, UUID: g.UUID, Utilization: st.GPU(g.UUID, now)})
		}
	}
	for _, k := range st.Jobs() {
		if visible(k.Namespace) {
			out.Jobs = append(out.Jobs, JobHistory{Namespace: k.Namespace, Job: k.Job, Utilization: st.Job(k, now)})
		}
	}
	slices.SortFunc(out.Jobs, func(a, b JobHistory) int {
		return strings.Compare(a.Namespace+"\x00"+a.Job, b.Namespace+"\x00"+b.Job)
	})
	return out
}
