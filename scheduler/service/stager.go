package service

import (
	"context"
	"time"

	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/interference"
	"github.com/hashicorp/go-hclog"
)

// stager stages pins: it registers the holds a pin needs (hold.go,
// hold_stage.go), keeps a staged group's decision while Nomad places
// them (hold_keep.go), lets them go once their work is done
// (hold_release.go), and tells the step where a group cannot be staged
// (hold_rules.go). The loop calls it where a pass needs it; it owns what
// is known of holds beyond their jobs, and reaches the rest through
// small interfaces: Nomad's hold calls (holdNomad, namespaceReader), the
// signing key (holdSigner), the lease (writeGate) and the answers the API
// shows (stageNotes).
type stager struct {
	// c is the model, its lock (which guards waiting and refusedOn) and
	// the hold book the watcher keeps; a pass's read reads it unlocked
	c *cluster
	// nomad is the Nomad client's hold calls, nil when it has none (no
	// staging: one whole-GPU allocation of a group per node); namespaces
	// reads a namespace's capabilities (nil: learned from refusals)
	nomad      holdNomad
	namespaces namespaceReader
	signer     holdSigner
	lease      writeGate
	notes      stageNotes
	profile    *interference.Model
	log        hclog.Logger
	now        func() time.Time
	// timeout bounds one Nomad request (nomad.request_timeout); dirty
	// asks for a pass
	timeout time.Duration
	dirty   func()

	// waiting are the groups whose holds are registered and not all placed
	// yet: the pin they stage, when the first was registered, the holds
	// (kept decisions: hold_keep.go)
	waiting map[decide.Key]holdWait
	// refusedOn are, by group, the nodes where Nomad did not place a hold
	// of the group, and when it was given up on
	refusedOn map[decide.Key]map[string]time.Time
	// drivers are what each namespace allows of the holds' drivers
	// (hold_rules.go); it locks itself
	drivers nsDrivers
}

// holdSigner signs a hold's payload with the records' key (state.go),
// false before the key is loaded. The caller holds the model's lock.
type holdSigner interface {
	sign(k decide.Key, payload string) (string, bool)
}

// writeGate says whether this replica may change jobs now (leader.go).
type writeGate interface {
	mayWrite() error
}

// stageNotes is what the stager reads and says of a group in the
// answers the API shows (answers.go). The caller holds the model's lock.
type stageNotes interface {
	placedWhy(k decide.Key) string
	sayStage(k decide.Key, why string)
}

var (
	_ holdSigner = (*records)(nil)
	_ writeGate  = (*lease)(nil)
	_ stageNotes = (*answers)(nil)
)

// stagerDeps is what newStager wires a stager to.
type stagerDeps struct {
	cluster *cluster
	nomad   any // a Nomad client: its hold and namespace calls, if it has them
	signer  holdSigner
	lease   writeGate
	notes   stageNotes
	profile *interference.Model
	log     hclog.Logger
	now     func() time.Time
	timeout time.Duration
	dirty   func()
}

func newStager(d stagerDeps) *stager {
	h, _ := d.nomad.(holdNomad)
	ns, _ := d.nomad.(namespaceReader)
	return &stager{c: d.cluster, nomad: h, namespaces: ns, signer: d.signer, lease: d.lease, notes: d.notes,
		profile: d.profile, log: d.log, now: d.now, timeout: d.timeout, dirty: d.dirty}
}

// request bounds one Nomad request.
func (st *stager) request(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, st.timeout)
}

// waitingFor is group k's pin waiting for its holds, if any. The caller
// holds the model's lock.
func (st *stager) waitingFor(k decide.Key) (holdWait, bool) {
	w, ok := st.waiting[k]
	return w, ok
}
