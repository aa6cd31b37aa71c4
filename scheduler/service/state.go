package service

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/interference"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/go-hclog"
)

// The scheduler's own records live in Nomad Variables under
// gpushare/state/ (the leader writes them, every replica reads them), so
// that a failover or a restart keeps them:
//
//   - secret: the key the service signs the placements it writes with
//     (gpushare.signature, an HMAC of the group and the placement, written
//     in the same registration as the pin). A placement counts only with a
//     valid signature: a user who writes the meta by hand holds no shares,
//     and one copied from another group does not verify;
//   - reasons-<i>: why each group waits, or was refused for good, and why
//     each pinned group was placed where it is (kept out of the signed
//     meta, which holds only what the decision is);
//   - learned: the interference profiles learned from groups running alone;
//   - runtimes: the latest finished runs of batch groups, from which the
//     run time of one that declares none is learned (runs.go);
//   - preempted: allocations being stopped for a guaranteed group;
//   - introspection: pairs seen breaking a bound, observations of
//     pairings, and why groups were unpaired (introspect_state.go);
//   - charges: what sharing has cost each running allocation that
//     max_stretch bounds (introspect_state.go), at most every
//     chargesEvery;
//   - submitted: when jobs the scheduler registered again were first
//     submitted (submit.go).
//
// Records of groups whose job is gone are dropped; a variable is written
// only when its content changed, the reasons at most every
// reasonsEvery; each kind is split by size in as many variables as it
// needs to stay below Nomad's 64 KiB per variable (records.go).
const (
	statePrefix  = "gpushare/state/"
	maxReason    = 300
	reasonsEvery = 10 * time.Second
)

// records load and save the scheduler's records in Nomad Variables
// (above), and keep the signing key and the submit times (submit.go).
// Their fields are guarded by the model's lock (cluster.mu), as the
// model they read and the loop's notes they save are.
type records struct {
	*cluster
	log   hclog.Logger
	vars  varStore
	lease writeLease
	notes notes
	intro introRecords
	now   func() time.Time
	// timeout bounds each request (nomad.request_timeout).
	timeout time.Duration

	// secret signs the placements the service writes.
	secret      []byte
	stateLoaded bool
	// saved: variable path -> hash of what was last written or read
	saved        map[string]string
	reasonsSaved time.Time
	chargesSaved time.Time
	// submitted keeps when jobs the scheduler registered again were
	// submitted (submit.go)
	submitted map[string]submitted
	// charged lists the allocations whose charges are saved (their
	// groups declare a run time): the loop's charged. The caller holds
	// s.mu.
	charged func() map[string]float64
}

// varStore is the part of Nomad that holds the records.
type varStore interface {
	// ReadVar reads the items of a Nomad Variable (nil when there is
	// none); WriteVar writes them (no items: deletes the variable).
	ReadVar(ctx context.Context, path string) (map[string]string, error)
	WriteVar(ctx context.Context, path string, items map[string]string) error
}

// writeLease says whether this replica may write now (leader.go).
type writeLease interface {
	mayWrite() error
}

// notes is what the records save of the decision loop's notes, and give
// back to it when they are read (a follower shows the leader's). The
// caller holds the model's lock.
type notes interface {
	// reasons are why each group waits (refused: for good) and why each
	// pinned group is where it is (placed).
	reasons() (pending map[decide.Key]string, refused map[decide.Key]bool, placed map[decide.Key]string)
	// readReasons takes the leader's.
	readReasons(pending, placed map[decide.Key]string, refused map[decide.Key]bool)
	// preemptedAllocs are the allocations being stopped for a guaranteed
	// group, and since when; readPreempted takes the leader's.
	preemptedAllocs() map[string]time.Time
	readPreempted(map[string]time.Time)
	// forgetGone drops what the loop keeps of groups (by
	// decide.Key.String) not in wanted: their job is gone.
	forgetGone(wanted map[string]bool)
	// keyChanged says the signing key changed: what was judged with the
	// old one is judged again.
	keyChanged()
}

// introRecords is introspection's kind of record (introspect_state.go).
type introRecords interface {
	items(wanted map[string]bool) map[string]string
	read(items map[string]string)
	chargeItems(charged map[string]float64) map[string]string
	readCharges(items map[string]string)
}

var (
	_ recordKeeper = (*records)(nil)
	_ introRecords = (*introspection)(nil)
	_ varStore     = nomadClient{}
)

func newRecords(c *cluster, log hclog.Logger, vars varStore, lease writeLease, n notes, intro introRecords, now func() time.Time, timeout time.Duration) *records {
	return &records{cluster: c, log: log, vars: vars, lease: lease, notes: n, intro: intro, now: now, timeout: timeout,
		saved: map[string]string{}, submitted: map[string]submitted{}, charged: func() map[string]float64 { return nil }}
}

// request bounds one request to Nomad.
func (s *records) request(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.timeout)
}

// sign is the signature of group k's placement.
func sign(secret []byte, k decide.Key, placement string) string {
	m := hmac.New(sha256.New, secret)
	fmt.Fprintf(m, "%s\x00%s\x00%s\x00%s", k.Namespace, k.Job, k.Group, placement)
	return hex.EncodeToString(m.Sum(nil))
}

// sign is the signature of group k's placement, once the key is loaded.
// The caller holds s.mu.
func (s *records) sign(k decide.Key, placement string) (string, bool) {
	if s.secret == nil {
		return "", false
	}
	return sign(s.secret, k, placement), true
}

// trusted reports whether a group's placement meta is one the service
// wrote: its signature verifies (every placement counts until the secret
// is loaded, and in tests that never load it). The caller holds s.mu.
func (s *records) trusted(k decide.Key, placement, signature string) bool {
	if s.secret == nil {
		return !s.stateLoaded
	}
	return hmac.Equal([]byte(signature), []byte(sign(s.secret, k, placement)))
}

// loadSecret reads the signing key, creating it when the scheduler has
// none yet (create: only a leader does).
func (s *records) loadSecret(ctx context.Context, create bool) error {
	rctx, cancel := s.request(ctx)
	defer cancel()
	items, err := s.vars.ReadVar(rctx, statePrefix+"secret")
	if err != nil {
		return fmt.Errorf("read the scheduler's signing key at %ssecret: %w", statePrefix, err)
	}
	key, err := hex.DecodeString(items["key"])
	if err == nil && len(key) >= 32 {
		s.setSecret(key)
		return nil
	}
	if !create {
		return nil
	}
	key = make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return err
	}
	if err := s.lease.mayWrite(); err != nil {
		return err
	}
	if err := s.vars.WriteVar(rctx, statePrefix+"secret", map[string]string{"key": hex.EncodeToString(key)}); err != nil {
		return fmt.Errorf("write the scheduler's signing key at %ssecret: %w", statePrefix, err)
	}
	s.log.Info("made the key that signs the placements this scheduler writes", "variable", statePrefix+"secret")
	s.setSecret(key)
	return nil
}

// setSecret takes the signing key. A new key changes which placements are
// trusted: the placements judged before (parsed per job version, with the
// holds of pinned groups made from them, and the pins of the versions
// running allocations were placed with) are judged again. The caller
// does not hold s.mu.
func (s *records) setSecret(key []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if hmac.Equal(s.secret, key) && s.secret != nil {
		return
	}
	s.secret = key
	s.state.ForgetParsed()
	s.rejudgeHolds()     // a hold is a job signed with the key (hold_watch.go)
	s.notes.keyChanged() // running allocations' versions are read again, and judged with the key
}

func itemKey(k decide.Key) string {
	h := sha256.Sum256([]byte(k.Namespace + "\x00" + k.Job + "\x00" + k.Group))
	return hex.EncodeToString(h[:10])
}

// groupItem is one group's record: [namespace, job, group, value...].
func groupItem(k decide.Key, values ...string) string {
	b, _ := json.Marshal(append([]string{k.Namespace, k.Job, k.Group}, values...))
	return string(b)
}

func parseGroupItem(v string) (decide.Key, []string, bool) {
	var f []string
	if err := json.Unmarshal([]byte(v), &f); err != nil || len(f) < 4 {
		return decide.Key{}, nil, false
	}
	return decide.Key{Namespace: f[0], Job: f[1], Group: f[2]}, f[3:], true
}

// saveState writes the records that changed. The caller is the leader
// and does not hold s.mu.
func (s *records) saveState(ctx context.Context) {
	s.mu.Lock()
	if !s.stateLoaded {
		s.mu.Unlock()
		return
	}
	vars := map[string]map[string]string{} // kind's first path -> its items
	if now := s.now(); now.Sub(s.reasonsSaved) >= reasonsEvery {
		s.reasonsSaved = now
		reasons := map[string]string{}
		pending, refused, placed := s.notes.reasons()
		for _, k := range slices.SortedFunc(maps.Keys(pending), decide.Key.Compare) {
			state := "pending"
			if refused[k] {
				state = "refused"
			}
			why := pending[k]
			if len(why) > maxReason {
				why = why[:maxReason] + "..."
			}
			reasons[itemKey(k)] = groupItem(k, state, why)
		}
		for k, why := range placed { // why each pinned group is where it is
			if len(why) > maxReason {
				why = why[:maxReason] + "..."
			}
			reasons["p"+itemKey(k)] = groupItem(k, "placed", why)
		}
		vars[reasonsKind.path(0)] = reasons
	}
	wanted := s.groupKeys()
	s.upgradeLearned(wanted)
	learned := map[string]string{}
	for _, id := range slices.Sorted(maps.Keys(s.state.Learned)) {
		if !wanted[id] {
			s.state.Unlearn(id) // its job is gone
			continue
		}
		p := s.state.Learned[id]
		b, _ := json.Marshal([]any{id, p.SM, p.MemBW})
		h := sha256.Sum256([]byte(id))
		learned[hex.EncodeToString(h[:10])] = string(b)
	}
	s.notes.forgetGone(wanted)
	vars[learnedKind.path(0)] = learned
	vars[runsKind.path(0)] = s.runsItems()
	preempted := map[string]string{}
	for id, at := range s.notes.preemptedAllocs() {
		preempted[id] = strconv.FormatInt(at.Unix(), 10)
	}
	vars[preemptedKind.path(0)] = preempted
	vars[introspectionKind.path(0)] = s.intro.items(wanted)
	vars[submittedKind.path(0)] = s.submittedItems()
	if now := s.now(); now.Sub(s.chargesSaved) >= chargesEvery {
		s.chargesSaved = now
		vars[chargesKind.path(0)] = s.intro.chargeItems(s.charged())
	}
	var plans [][]varWrite
	for _, k := range []kind{reasonsKind, learnedKind, runsKind, preemptedKind, introspectionKind, submittedKind, chargesKind} {
		if items, ok := vars[k.path(0)]; ok {
			plans = append(plans, s.plan(k, items))
		}
	}
	s.mu.Unlock()
	for _, todo := range plans {
		s.writeVars(ctx, todo)
	}
}

// groupKeys are the keys (decide.Key.String) of the model's groups. The
// caller holds s.mu.
func (s *records) groupKeys() map[string]bool {
	wanted := map[string]bool{}
	for _, job := range s.state.Jobs {
		for _, tg := range job.TaskGroups {
			wanted[pin.GroupKey(job, *tg.Name)] = true
		}
	}
	return wanted
}

// upgradeLearned renames the profiles learned under a group's key as it
// was written before keys were escaped (decide.Key.Legacy) when that
// names one group of the model. The caller holds s.mu.
func (s *records) upgradeLearned(wanted map[string]bool) {
	legacy := map[string]string{} // legacy key -> key ("" when ambiguous)
	for _, job := range s.state.Jobs {
		for _, tg := range job.TaskGroups {
			k := model.KeyOf(job, *tg.Name)
			if old := k.Legacy(); old != k.String() {
				if _, dup := legacy[old]; dup {
					legacy[old] = ""
				} else {
					legacy[old] = k.String()
				}
			}
		}
	}
	for id, p := range s.state.Learned {
		if to := legacy[id]; !wanted[id] && to != "" {
			if _, have := s.state.Learned[to]; !have {
				s.state.Learn(to, p)
			}
			s.state.Unlearn(id)
		}
	}
}

func hashItems(items map[string]string) string {
	h := sha256.New()
	for _, k := range slices.Sorted(maps.Keys(items)) {
		fmt.Fprintf(h, "%q=%q;", k, items[k])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// loadState reads the records, replacing what this replica read before
// (it is not the leader: the leader's records are newer): its learned
// profiles and preemptions are the leader's, so that what the leader
// dropped goes here too. withReasons also takes the reasons (a follower
// shows the leader's; a new leader shows them until its first pass). The
// caller does not hold s.mu.
func (s *records) loadState(ctx context.Context, withReasons bool) error {
	seen := map[string]string{} // path -> hash of what it holds
	reasons, placed := map[decide.Key]string{}, map[decide.Key]string{}
	refused := map[decide.Key]bool{}
	if withReasons {
		items, err := s.readKind(ctx, reasonsKind, seen)
		if err != nil {
			return err
		}
		for _, v := range items {
			switch k, f, ok := parseGroupItem(v); {
			case ok && len(f) == 2 && f[0] == "placed":
				placed[k] = f[1]
			case ok && len(f) == 2:
				reasons[k] = f[1]
				refused[k] = f[0] == "refused"
			}
		}
	}
	learnedItems, err := s.readKind(ctx, learnedKind, seen)
	if err != nil {
		return err
	}
	runsItems, err := s.readKind(ctx, runsKind, seen)
	if err != nil {
		return err
	}
	preemptedItems, err := s.readKind(ctx, preemptedKind, seen)
	if err != nil {
		return err
	}
	introItems, err := s.readKind(ctx, introspectionKind, seen)
	if err != nil {
		return err
	}
	submittedItems, err := s.readKind(ctx, submittedKind, seen)
	if err != nil {
		return err
	}
	chargeItems, err := s.readKind(ctx, chargesKind, seen)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	maps.Copy(s.saved, seen) // what is there need not be written again
	if withReasons {
		s.notes.readReasons(reasons, placed, refused)
	}
	learned := map[string]bool{}
	for _, v := range learnedItems {
		var f []any
		if err := json.Unmarshal([]byte(v), &f); err != nil || len(f) != 3 {
			continue
		}
		id, ok1 := f[0].(string)
		sm, ok2 := f[1].(float64)
		mem, ok3 := f[2].(float64)
		if !ok1 || !ok2 || !ok3 {
			continue
		}
		learned[id] = true
		if p := (interference.Profile{Name: "learned", SM: sm, MemBW: mem}); s.state.Learned[id] != p {
			s.state.Learn(id, p) // the leader's, newer than what this replica read before
		}
	}
	for id := range s.state.Learned {
		if !learned[id] {
			s.state.Unlearn(id) // the leader dropped it: its job is gone
		}
	}
	s.readRuns(runsItems)
	preempted := map[string]time.Time{}
	for id, v := range preemptedItems {
		if sec, err := strconv.ParseInt(v, 10, 64); err == nil {
			preempted[id] = time.Unix(sec, 0)
		}
	}
	s.notes.readPreempted(preempted)
	s.intro.read(introItems)
	s.loadSubmitted(submittedItems)
	s.intro.readCharges(chargeItems)
	if !s.stateLoaded {
		s.stateLoaded = true
		s.state.ForgetParsed() // placements read before are judged again
	}
	return nil
}
