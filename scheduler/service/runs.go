package service

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"maps"
	"slices"
	"time"

	"github.com/gpushare/gpushare/scheduler/queue"
)

// The runs of batch groups (model.State.Runs, model/runs.go) are noted as
// Nomad reports allocations finished, but Nomad collects a finished job's
// allocations (and a dispatched or periodic child job itself) after a
// while: the leader keeps the runs in its records ("runtimes", state.go),
// so that the run time learned of a job that comes back a week later, or
// after a failover, is still there. One item per family: its key and its
// runs as [allocation, end in Unix seconds, run time in seconds].

// runsItems are the records of the model's runs, dropping those whose
// family's job is gone. The caller holds s.mu.
func (s *records) runsItems() map[string]string {
	items := map[string]string{}
	for _, key := range slices.Sorted(maps.Keys(s.state.Runs)) {
		if !s.state.RunsWanted(key) {
			delete(s.state.Runs, key)
			continue
		}
		runs := make([][3]any, len(s.state.Runs[key]))
		for i, r := range s.state.Runs[key] {
			runs[i] = [3]any{r.Alloc, r.Ended.Unix(), r.Took.Seconds()}
		}
		b, _ := json.Marshal([]any{key, runs})
		h := sha256.Sum256([]byte(key))
		items[hex.EncodeToString(h[:10])] = string(b)
	}
	return items
}

// readRuns adds the runs of the records to the model's (a run seen both
// ways counts once; queue.Runs.With), skipping items that do not parse.
// The caller holds s.mu.
func (s *records) readRuns(items map[string]string) {
	for _, v := range items {
		var item struct {
			key  string
			runs [][3]json.RawMessage
		}
		var f [2]json.RawMessage
		if json.Unmarshal([]byte(v), &f) != nil || json.Unmarshal(f[0], &item.key) != nil ||
			json.Unmarshal(f[1], &item.runs) != nil || item.key == "" {
			continue
		}
		runs := s.state.Runs[item.key]
		for _, r := range item.runs {
			var alloc string
			var end int64
			var took float64
			if json.Unmarshal(r[0], &alloc) != nil || json.Unmarshal(r[1], &end) != nil || json.Unmarshal(r[2], &took) != nil {
				continue
			}
			runs, _ = runs.With(queue.Run{Alloc: alloc, Ended: time.Unix(end, 0), Took: time.Duration(took * float64(time.Second))})
		}
		if len(runs) > 0 {
			s.state.Runs[item.key] = runs
		}
	}
}
