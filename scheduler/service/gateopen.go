package service

import (
	"maps"
	"slices"

	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
)

// A node whose meta sets gpushare_gate = pending satisfies the gate
// (pin.OpensGate): Nomad places gated groups there by itself, without a
// pin, past the scheduler's queue, shares and topology. Nothing of the
// scheduler can stop Nomad from doing so; the watcher says so at once,
// in the log (an error per node that opens it, a line when it closes),
// the gpushare_gate_open_nodes gauge and /v1/health's gate_open.

// gateWatch is the cluster's side: the nodes that open the gate, by ID
// (their name as value). Guarded by mu.
type gateWatch struct {
	gateOpen map[string]string
}

// checkGate notes whether node n opens the gate (nil: the node is gone).
// The caller holds mu, and runs it where the model is written (write).
func (w *watcher) checkGate(id string, n *api.Node) {
	_, was := w.gateOpen[id]
	open := n != nil && pin.OpensGate(n.Meta)
	switch {
	case open && !was:
		if w.gateOpen == nil {
			w.gateOpen = map[string]string{}
		}
		w.gateOpen[id] = n.Name
		w.log.Error("a node sets the meta key gpushare_gate to \"pending\": Nomad places gated groups there by itself, past the scheduler; remove it (nomad node meta apply -unset gpushare_gate)",
			"node_id", id, "node", n.Name)
	case !open && was:
		delete(w.gateOpen, id)
		w.log.Info("the node no longer opens the gate", "node_id", id)
	}
	w.metrics.gateOpen.Set(float64(len(w.gateOpen)))
}

// checkGates is checkGate for every node of the model, after a relist.
// The caller holds mu.
func (w *watcher) checkGates() {
	for id := range w.gateOpen {
		if _, ok := w.state.Nodes[id]; !ok {
			w.checkGate(id, nil)
		}
	}
	for id, n := range w.state.Nodes {
		w.checkGate(id, n)
	}
}

// gateOpenNames are the names of the nodes that open the gate, sorted.
// The caller holds mu.
func (c *cluster) gateOpenNames() []string {
	return slices.Sorted(maps.Values(c.gateOpen))
}
