package e2e

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// refusalPort is the static port of restartRefusal's group and of the
// blockers that take it on other nodes. Nothing binds it: Nomad accounts
// ports per node, and the scheduler does not model them.
const refusalPort = 29517

// restartRefusal is TestRestarts' re-pin after a refusal: a group of one
// allocation of 25 shares with a static port runs on node A and is scaled
// to 2 while ungated jobs hold that port on every other node up but the
// last, D, which is ineligible. Under gpushare the scheduler, which does
// not model ports, pins the new allocation on a node whose port is taken
// (or Nomad refuses A itself: its port is the first allocation's); Nomad
// refuses the pin for a port collision, and the group is decided again
// without the nodes refused, each time keeping what runs on A (a node pin
// that names A), until none is left. D made eligible again, the group is
// decided on D. Nomad alone places nothing while D is ineligible and
// places the second allocation on D once it is not. Both must keep A's
// allocation and create one allocation only; under gpushare a pin must
// have named a blocked node and Nomad must have failed that version for a
// port collision: the refusal, not a lucky first choice, is measured.
func (e *env) restartRefusal(who, prefix string, gated bool, add func(op string, restarts int, kept bool, note string)) {
	t := e.t.(*testing.T)
	id := prefix + "refused"
	j := e.parse(id, map[string]any{"shares": 25, "count": 1})
	j.TaskGroups[0].Networks = []*api.NetworkResource{{ReservedPorts: []api.Port{{Label: "p", Value: refusalPort}}}}
	if !gated {
		ungate(j)
	}
	_, _, err := e.nomad.Jobs().Register(j, nil)
	must.NoError(t, err)
	first := e.settled(id, 1)[0]
	nodes := e.nodes()
	var others []string
	for _, name := range slices.Sorted(maps.Keys(nodes)) {
		if name != first.NodeName && nodes[name].Status == api.NodeStatusReady {
			others = append(others, name)
		}
	}
	must.SliceNotEmpty(t, others[1:], must.Sprint("a node to block and one to free"))
	blocked, free := others[:len(others)-1], nodes[others[len(others)-1]]
	must.Greater(t, 0, addresses(nodes[first.NodeName]))
	// Nomad accounts a static port per address: a client of this cluster
	// has two (127.0.0.1 and ::1 on lo), so a node is blocked by the port
	// taken on each, A by the port taken on the one its allocation left
	var blockers []string
	block := func(name string, n int) {
		if n == 0 {
			return
		}
		b := e.parse(prefix+"port-"+name, map[string]any{"shares": 1, "count": n})
		ungate(b)
		tg := b.TaskGroups[0]
		tg.Tasks[0].Resources.Devices = nil
		tg.Networks = []*api.NetworkResource{{ReservedPorts: []api.Port{{Label: "p", Value: refusalPort}}}}
		tg.Constraints = append(tg.Constraints, &api.Constraint{LTarget: "${node.unique.id}", Operand: "=", RTarget: nodes[name].ID})
		_, _, err := e.nomad.Jobs().Register(b, nil)
		must.NoError(t, err)
		e.running(*b.ID, n, liveness)
		blockers = append(blockers, *b.ID)
	}
	block(first.NodeName, addresses(nodes[first.NodeName])-1)
	for _, name := range blocked {
		block(name, addresses(nodes[name]))
	}
	_, err = e.nomad.Nodes().ToggleEligibility(free.ID, false, nil)
	must.NoError(t, err)
	eligible := func() { _, _ = e.nomad.Nodes().ToggleEligibility(free.ID, true, nil) }
	t.Cleanup(eligible)

	seen := e.allocIDs(id)
	e.scale(id, 2)
	var blockedIDs []string
	for _, name := range blocked {
		blockedIDs = append(blockedIDs, nodes[name].ID)
	}
	if gated {
		// a pin on B or C, and Nomad's refusal of it
		e.eventually(liveness, id+" pinned on a node whose port is taken, and refused by Nomad", func() bool {
			return len(e.refusedPins(id, blockedIDs)) > 0
		})
	} else {
		e.eventually(liveness, "Nomad to fail to place "+id+"'s second allocation", func() bool { return len(e.portRefused(id)) > 0 })
	}
	refusedPins := e.refusedPins(id, blockedIDs)
	eligible()
	two := e.settled(id, 2)
	var second *api.Allocation
	for _, a := range two {
		if a.ID != first.ID {
			second = a
		}
	}
	must.NotNil(t, second, must.Sprintf("%s: the first allocation runs no more", who))
	must.Eq(t, free.Name, second.NodeName, must.Sprintf("%s: the second allocation runs on the only node without the port taken", who))
	note := fmt.Sprintf("port %d taken on %s, %s ineligible until refused; the second on %s", refusalPort, strings.Join(blocked, ","), free.Name, second.NodeName)
	if gated {
		must.SliceNotEmpty(t, refusedPins, must.Sprint("no pin named a node whose port is taken: no refusal measured"))
		job, _, err := e.nomad.Jobs().Info(id, nil)
		must.NoError(t, err)
		rec, ok := pin.ParseRecord(job, "g")
		must.True(t, ok)
		if who != "share pins" {
			must.Eq(t, pin.ContractNode, rec.Contract)
		}
		must.False(t, slices.ContainsFunc(rec.Nodes, func(n string) bool { return slices.Contains(blockedIDs, n) }),
			must.Sprint("the last pin names a node whose port is taken"))
		note += fmt.Sprintf("; refused pins at job versions %v, pinned last on %d node(s)", refusedPins, len(rec.Nodes))
	}
	add("re-pin after a refusal (scale 1 -> 2, the pinned node's port taken)", e.createdSince(id, seen)-1, e.keptRunning(first.ID), note)
	e.stopJobs(append(blockers, id)...)
}

// refusedPins lists the versions of job id whose pin of group g names one
// of nodes and that Nomad failed to place for a port collision.
func (e *env) refusedPins(id string, nodes []string) []uint64 {
	versions, _, _, err := e.nomad.Jobs().Versions(id, false, nil)
	if err != nil {
		return nil
	}
	refused := e.portRefused(id)
	var out []uint64
	for _, v := range versions {
		rec, ok := pin.ParseRecord(v, "g")
		if ok && refused[*v.JobModifyIndex] && slices.ContainsFunc(rec.Nodes, func(n string) bool { return slices.Contains(nodes, n) }) {
			out = append(out, *v.Version)
		}
	}
	slices.Sort(out)
	return out
}

// portRefused lists, by job modify index, the versions of job id an
// evaluation failed to place group g of for a port collision.
func (e *env) portRefused(id string) map[uint64]bool {
	evals, _, err := e.nomad.Jobs().Evaluations(id, nil)
	if err != nil {
		return nil
	}
	out := map[uint64]bool{}
	for _, ev := range evals {
		if m := ev.FailedTGAllocs["g"]; m != nil {
			for d := range m.DimensionExhausted {
				if strings.Contains(d, "port") {
					out[ev.JobModifyIndex] = true
				}
			}
		}
	}
	return out
}

// addresses counts the host-network addresses of node n, on each of which
// Nomad can give a static port once.
func addresses(n *api.Node) int {
	c := 0
	for _, nw := range n.NodeResources.Networks {
		if nw.Mode == "host" {
			c++
		}
	}
	return c
}

// ungate removes the gate from every group of j: Nomad alone places it.
func ungate(j *api.Job) {
	for _, tg := range j.TaskGroups {
		tg.Constraints = slices.DeleteFunc(tg.Constraints, pin.IsGate)
	}
}
