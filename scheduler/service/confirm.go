package service

import (
	"slices"
	"time"

	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/go-hclog"
)

// unconfirmed are the pins sent whose allocations Nomad has not made yet,
// with when each was sent: for the placement latency metric and the
// warning of a pin with no allocation.
//
// Lock: the loop goroutine's own, the API never reads it: sendPins notes
// a pin sent (under the model's lock, which it holds for the pins'
// records), and confirm reads and deletes during the pass's read of the
// model, without the lock, beside collect, which does not read it.
type unconfirmed struct {
	sent map[decide.Key]time.Time
}

// pinned notes that group k's pin was sent at.
func (u *unconfirmed) pinned(k decide.Key, at time.Time) {
	if u.sent == nil {
		u.sent = map[decide.Key]time.Time{}
	}
	u.sent[k] = at
}

// confirm checks the pins sent against the allocations Nomad made in st,
// during the pass's read of the model, beside collect (readModel): it
// counts each group whose allocations appeared (its placement latency
// timed by now), warns of allocations outside their pin and of a pin with
// no allocation after 5 minutes, and forgets them.
func (u *unconfirmed) confirm(st *model.State, now func() time.Time, log hclog.Logger, m *metrics) {
	for key, at := range u.sent {
		job := st.Jobs[model.JobKey(key.Namespace, key.Job)]
		rec, ok := pin.Record{}, false
		if job != nil {
			var r *pin.Record
			if r, ok = st.Record(job, key.Group); ok {
				rec = *r
			}
		}
		if !ok || model.Template(job) { // a parameterized parent's pool: Nomad places nothing for it
			delete(u.sent, key)
			continue
		}
		allocs := st.GroupAllocs(key.Namespace, key.Job, key.Group)
		if len(allocs) == 0 {
			if now().Sub(at) > 5*time.Minute {
				log.Warn("pinned group has no allocation after 5m", "group", key.String())
				delete(u.sent, key)
			}
			continue
		}
		for _, a := range allocs {
			if rec.Contract == pin.ContractNode {
				// a node pin names nodes; Nomad picks the shares
				if !slices.Contains(rec.Nodes, a.NodeID) {
					log.Warn("allocation runs on a node outside its pin (placed before the pin, or a pin written by hand)",
						"group", key.String(), "alloc_id", a.ID, "node", a.NodeID)
				}
				continue
			}
			// one line per allocation, not per share (a GPU is 100 shares)
			var outside []string
			for _, sh := range model.Shares(a) {
				if !slices.Contains(rec.Shares, sh) {
					outside = append(outside, sh)
				}
			}
			if len(outside) > 0 {
				log.Warn("allocation holds shares outside its pin (placed before the pin, or a pin written by hand)",
					"group", key.String(), "alloc_id", a.ID, "shares_outside", len(outside), "first", outside[0])
			}
		}
		m.confirmations.Inc()
		m.placementLatency.Observe(now().Sub(at).Seconds())
		delete(u.sent, key)
	}
}
