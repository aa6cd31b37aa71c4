package service

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/interference"
	"github.com/gpushare/gpushare/scheduler/model"
)

// What introspection keeps in the Nomad Variable gpushare/state/introspection
// so that a new leader knows it: the pairs seen breaking a bound on a GPU
// model, the last observations of pairings (from which the knowledge is
// rebuilt) and why groups were last unpaired. Each kind is bounded; the
// oldest go first.
const (
	introspectionVar = statePrefix + "introspection"
	maxBadPairs      = 60
	maxPairObs       = 150
	maxUnpaired      = 50
)

// pairRecords are introspection's persisted records.
type pairRecords struct {
	bad      []badPair
	obs      []pairObs
	unpaired map[decide.Key]Unpaired
	// loaded is the hash of the items last read or written: a replica
	// rebuilds its knowledge only when the leader's records changed.
	loaded string
}

type badPair struct {
	GPU string `json:"g"`
	A   string `json:"a"` // interference.Profile.Key
	B   string `json:"b"`
}

type pairObs struct {
	GPU  string               `json:"g"`
	Job  interference.Profile `json:"j"`
	With interference.Profile `json:"w"`
	Norm float64              `json:"n"`
}

// Unpaired is why a group was last moved off a GPU it shared.
type Unpaired struct {
	Namespace string    `json:"namespace"`
	Job       string    `json:"job"`
	Group     string    `json:"group"`
	Reason    string    `json:"reason"`
	At        time.Time `json:"at"`
}

func newPairRecords() pairRecords { return pairRecords{unpaired: map[decide.Key]Unpaired{}} }

// identified reports whether observations of p are of one job: a named
// profile (learned ones are named per group) or one the model state tied
// to its group (ID: declared fractions, or none).
func identified(p interference.Profile) bool { return p.Name != "" || p.ID != "" }

// observe records a pairing's observed normalised throughput. The caller
// holds in.mu.
func (in *introspection) observe(gpu string, job, with interference.Profile, norm float64) {
	if !identified(job) || !identified(with) {
		return
	}
	in.know.cur().Observe(gpu, job, with, norm)
	in.rec.obs = last(append(in.rec.obs, pairObs{GPU: gpu, Job: job, With: with, Norm: norm}), maxPairObs)
}

// markIncompatible remembers that a and b must not share a GPU of model
// gpu again.
func (in *introspection) markIncompatible(gpu string, a, b interference.Profile) {
	if !identified(a) || !identified(b) {
		return
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	in.know.cur().MarkIncompatible(gpu, a, b)
	p := badPair{GPU: gpu, A: a.Key(), B: b.Key()}
	if p.B < p.A {
		p.A, p.B = p.B, p.A
	}
	if !slices.Contains(in.rec.bad, p) {
		in.rec.bad = last(append(in.rec.bad, p), maxBadPairs)
	}
}

// noteUnpaired counts group k unpaired and keeps why, at at.
func (in *introspection) noteUnpaired(k decide.Key, reason string, at time.Time) {
	in.unpairs.Inc()
	in.mu.Lock()
	defer in.mu.Unlock()
	in.rec.noteUnpaired(k, reason, at)
}

// lastUnpaired is why group k was last unpaired, if it was.
func (in *introspection) lastUnpaired(k decide.Key) *Unpaired {
	in.mu.Lock()
	defer in.mu.Unlock()
	if u, ok := in.rec.unpaired[k]; ok {
		return &u
	}
	return nil
}

// allUnpaired lists why each group was last unpaired.
func (in *introspection) allUnpaired() []Unpaired {
	in.mu.Lock()
	defer in.mu.Unlock()
	return slices.Collect(maps.Values(in.rec.unpaired))
}

func (r *pairRecords) noteUnpaired(k decide.Key, reason string, at time.Time) {
	if len(reason) > maxReason {
		reason = reason[:maxReason] + "..."
	}
	r.unpaired[k] = Unpaired{Namespace: k.Namespace, Job: k.Job, Group: k.Group, Reason: reason, At: at}
	for len(r.unpaired) > maxUnpaired {
		oldest := decide.Key{}
		first := true
		for key, u := range r.unpaired {
			if o := r.unpaired[oldest]; first || u.At.Before(o.At) || (u.At.Equal(o.At) && key.Compare(oldest) < 0) {
				oldest, first = key, false
			}
		}
		delete(r.unpaired, oldest)
	}
}

// items are introspection's records to save; the unpair reasons and
// alone samples of groups whose job is gone are dropped. The caller holds
// the model's lock.
func (in *introspection) items(wanted map[string]bool) map[string]string {
	in.mu.Lock()
	defer in.mu.Unlock()
	gone := in.goneProfile(wanted)
	in.rec.bad = slices.DeleteFunc(in.rec.bad, func(p badPair) bool { return gone(p.A) || gone(p.B) })
	in.rec.obs = slices.DeleteFunc(in.rec.obs, func(o pairObs) bool { return gone(o.Job.Key()) || gone(o.With.Key()) })
	in.know.cur().Forget(gone)
	items := map[string]string{}
	for i, p := range in.rec.bad {
		b, _ := json.Marshal(p)
		items[fmt.Sprintf("b%03d", i)] = string(b)
	}
	for i, o := range in.rec.obs {
		b, _ := json.Marshal(o)
		items[fmt.Sprintf("o%03d", i)] = string(b)
	}
	for k, u := range in.rec.unpaired {
		if !wanted[k.String()] {
			delete(in.rec.unpaired, k)
			continue
		}
		items["u"+itemKey(k)] = groupItem(k, u.Reason, strconv.FormatInt(u.At.Unix(), 10))
	}
	for key := range in.alone {
		if !wanted[key] {
			delete(in.alone, key) // its job is gone
		}
	}
	in.rec.loaded = hashItems(items)
	return items
}

// goneProfile reports whether observations under a profile key
// (interference.Profile.Key) are of a group whose job is gone: a learned
// profile's or a group's own key (decide.Key.String, or as written before
// keys were escaped) that names none of wanted. Configured profiles are
// never gone. The caller holds the model's lock.
func (in *introspection) goneProfile(wanted map[string]bool) func(key string) bool {
	configured := map[string]bool{}
	for _, p := range in.prof.Profiles {
		configured[p.Name] = true
	}
	return func(key string) bool {
		id := strings.TrimPrefix(key, model.LearnedPrefix)
		return !configured[key] && strings.Count(id, "/") >= 2 && !wanted[id]
	}
}

// read takes the leader's records and rebuilds the knowledge from them
// when they changed. The caller holds the model's lock.
func (in *introspection) read(items map[string]string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	h := hashItems(items)
	if h == in.rec.loaded {
		return
	}
	rec := newPairRecords()
	rec.loaded = h
	for _, key := range slices.Sorted(maps.Keys(items)) {
		v := items[key]
		switch {
		case strings.HasPrefix(key, "b"):
			var p badPair
			if json.Unmarshal([]byte(v), &p) == nil {
				rec.bad = append(rec.bad, p)
			}
		case strings.HasPrefix(key, "o"):
			var o pairObs
			if json.Unmarshal([]byte(v), &o) == nil {
				rec.obs = append(rec.obs, o)
			}
		case strings.HasPrefix(key, "u"):
			if k, f, ok := parseGroupItem(v); ok && len(f) == 2 {
				sec, _ := strconv.ParseInt(f[1], 10, 64)
				rec.unpaired[k] = Unpaired{Namespace: k.Namespace, Job: k.Job, Group: k.Group, Reason: f[0], At: time.Unix(sec, 0)}
			}
		}
	}
	k := in.know.reset()
	for _, p := range rec.bad {
		k.MarkIncompatible(p.GPU, interference.Profile{Name: p.A}, interference.Profile{Name: p.B})
	}
	for _, o := range rec.obs {
		k.Observe(o.GPU, o.Job, o.With, o.Norm)
	}
	in.rec = rec
}

// displayProfile shows a learned profile as "learned", as before learned
// profiles were named per group.
func displayProfile(p interference.Profile) *interference.Profile {
	if strings.HasPrefix(p.Name, model.LearnedPrefix) {
		p.Name = "learned"
	}
	return &p
}

// chargesEvery is how often the leader saves what sharing has cost each
// allocation (the charge max_stretch and expected ends read), in the Variable
// gpushare/state/charges: a new leader starts from the old one's charges,
// short by at most this much of their growth. The charge changes at every
// judgement, so saving it whenever it changed would write a Variable on
// almost every pass.
const chargesEvery = time.Minute

// chargeItems are what sharing has cost each allocation of charged (those
// of groups that declare a run time, loop.charged) so far, by allocation
// ID, in whole seconds (rounded down: a new leader never charges more
// than was observed), and, under normPrefix and its ID, the throughput it
// ran at when last judged while it still shares (what its expected end
// reads until the new leader judges it again).
func (in *introspection) chargeItems(charged map[string]float64) map[string]string {
	in.mu.Lock()
	defer in.mu.Unlock()
	items := make(map[string]string, len(charged))
	for id := range charged {
		t := in.lost[id]
		if t == nil || t.lost < time.Second {
			continue
		}
		items[id] = strconv.FormatInt(int64(t.lost/time.Second), 10)
		if t.norm > 0 {
			items[normPrefix+id] = strconv.FormatFloat(t.norm, 'f', 3, 64)
		}
	}
	return items
}

// normPrefix marks the charges' items that hold an allocation's
// throughput when last judged rather than its charge. A replica that
// predates them skips them: their values are not counts of seconds.
const normPrefix = "norm/"

// readCharges takes the leader's charges. An allocation this replica
// charged more (it led since the leader last saved) keeps its own; one
// the leader no longer lists is dropped (it is gone); a value that is not
// a count of seconds is skipped. Each keeps the throughput the leader last
// judged it at (normPrefix; none: alone), so that its expected end counts
// its sharing until this replica judges it; a throughput that is not a
// number above 0 is skipped. The clock of each starts again at its next
// judgement.
func (in *introspection) readCharges(items map[string]string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	lost := make(map[string]*lostTally, len(items))
	for id, v := range items {
		if strings.HasPrefix(id, normPrefix) {
			continue
		}
		sec, err := strconv.ParseInt(v, 10, 64)
		if err != nil || sec <= 0 || sec > math.MaxInt64/int64(time.Second) {
			continue
		}
		d := time.Duration(sec) * time.Second
		if own := in.lost[id]; own != nil && own.lost > d {
			d = own.lost
		}
		t := &lostTally{lost: d}
		if n, err := strconv.ParseFloat(items[normPrefix+id], 64); err == nil && n > 0 && !math.IsInf(n, 0) {
			t.norm = n
		}
		lost[id] = t
	}
	in.lost = lost
}
