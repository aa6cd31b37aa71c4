package service

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/feasible"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/hashicorp/nomad/api"
)

// Where a group's holds may run. A hold is a job of its group's
// namespace, so it runs only with a driver both the node has (raw_exec,
// else exec) and the namespace allows (its capabilities'
// enabled_task_drivers and disabled_task_drivers, as Nomad checks a job
// it registers). The service reads the namespace (Namespaces().Info)
// before it registers a hold, and learns from Nomad's refusal of one;
// a group is decided with what it knows (holdRules): on a node where
// none of its holds may run, or where Nomad did not place one of them
// (hold_stage.go), its whole-GPU allocations take one node each
// (placement.OnePerNode), and its reason says why.

// holdDrivers are the drivers a hold's task may use, in the order tried.
var holdDrivers = []string{"raw_exec", "exec"}

// driverRulesFor is how long what a namespace allows is trusted before it
// is read again.
const driverRulesFor = 5 * time.Minute

// driverRule is what a namespace allows of holdDrivers.
type driverRule struct {
	refused map[string]bool // the drivers it does not allow
	at      time.Time       // when read or learned (the service's clock)
}

// namespaceReader reads a namespace (its capabilities) from Nomad.
type namespaceReader interface {
	Namespace(ctx context.Context, name string) (*api.Namespace, error)
}

func (n nomadClient) Namespace(ctx context.Context, name string) (*api.Namespace, error) {
	ctx, cancel := n.bound(ctx)
	defer cancel()
	ns, _, err := n.c.Namespaces().Info(name, q(ctx, name))
	return ns, err
}

// allowsDriver reports whether a namespace's capabilities allow a task
// driver, as Nomad's job validation checks it.
func allowsDriver(c *api.NamespaceCapabilities, driver string) bool {
	if c == nil {
		return true
	}
	return (len(c.EnabledTaskDrivers) == 0 || slices.Contains(c.EnabledTaskDrivers, driver)) && !slices.Contains(c.DisabledTaskDrivers, driver)
}

// readDrivers reads what namespace ns allows of the holds' drivers, when
// what the service knows is older than driverRulesFor. A namespace it
// cannot read (no reader, no permission) is learned from Nomad's refusal
// of a hold instead (learnDrivers).
func (s *loop) readDrivers(ctx context.Context, ns string) {
	s.mu.Lock()
	rule, known := s.staging.drivers[ns]
	s.mu.Unlock()
	if known && s.now().Sub(rule.at) < driverRulesFor {
		return
	}
	var info *api.Namespace
	err := errors.New("the Nomad client reads no namespaces")
	if r, ok := s.nomad.(namespaceReader); ok {
		rctx, cancel := s.request(ctx)
		info, err = r.Namespace(rctx, ns)
		cancel()
	}
	if err != nil || info == nil {
		// what was learned is tried again: Nomad's refusal teaches it anew
		s.log.Debug("cannot read the namespace's capabilities; a hold Nomad refuses teaches them", "namespace", ns, "error", err)
		s.mu.Lock()
		delete(s.staging.drivers, ns)
		s.mu.Unlock()
		return
	}
	rule = driverRule{refused: map[string]bool{}, at: s.now()}
	for _, d := range holdDrivers {
		if !allowsDriver(info.Capabilities, d) {
			rule.refused[d] = true
		}
	}
	s.mu.Lock()
	if s.staging.drivers == nil {
		s.staging.drivers = map[string]driverRule{}
	}
	s.staging.drivers[ns] = rule
	s.mu.Unlock()
}

// driverRefused matches Nomad's refusal of a job whose task drivers its
// namespace does not allow ("used task driver \"raw_exec\" is not allowed
// in namespace \"ml\"", or "used task drivers [...] are not allowed").
var driverRefused = regexp.MustCompile(`used task drivers? (.*) (?:is|are) not allowed in namespace`)

// learnDrivers learns from Nomad's refusal of a hold that namespace ns
// does not allow the drivers it names, and reports whether err was such
// a refusal.
func (s *loop) learnDrivers(ns string, err error) bool {
	m := driverRefused.FindStringSubmatch(err.Error())
	if m == nil {
		return false
	}
	named := strings.FieldsFunc(m[1], func(r rune) bool { return strings.ContainsRune(`[]"' ,`, r) })
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.staging.drivers == nil {
		s.staging.drivers = map[string]driverRule{}
	}
	rule := s.staging.drivers[ns]
	rule.refused = maps.Clone(rule.refused)
	if rule.refused == nil {
		rule.refused = map[string]bool{}
	}
	for _, d := range named {
		if slices.Contains(holdDrivers, d) {
			rule.refused[d] = true
		}
	}
	rule.at = s.now()
	s.staging.drivers[ns] = rule
	return true
}

// holdDriverFor is the driver a hold of a group of namespace ns uses on
// node n: the first of holdDrivers the node has and the namespace allows
// ("" when none: nothing of the namespace is staged there). The caller
// holds s.mu.
func (s *loop) holdDriverFor(n *api.Node, ns string) string {
	if n == nil {
		return ""
	}
	refused := s.staging.drivers[ns].refused
	for _, d := range holdDrivers {
		if !refused[d] && feasible.HasDriver(n, d) {
			return d
		}
	}
	return ""
}

// noDriverWhy says why a group of namespace ns is not staged on nodes.
func (s *loop) noDriverWhy(ns string, nodes []string) string {
	s.mu.Lock()
	refused := slices.Sorted(maps.Keys(s.staging.drivers[ns].refused))
	s.mu.Unlock()
	return fmt.Sprintf("the namespace %s does not allow the driver a hold of its GPUs would run with on node %s (its capabilities refuse %s; a hold uses raw_exec, else exec)",
		ns, strings.Join(nodes, ", "), strings.Join(refused, " and "))
}

// holdRules tells the step, for each group, what a hold takes of a node
// and where its allocations cannot be staged: the nodes where its
// namespace allows none of the holds' drivers the node has, and those
// where Nomad did not place a hold of it lately (hold_stage.go). The
// caller does not hold s.mu; the model is not written meanwhile (a
// pass's read).
func (s *loop) holdRules(snap *placement.Snapshot, groups []decide.Group) {
	if s.holder() == nil {
		return
	}
	dropGone(s, s.staging.waiting)
	dropGone(s, s.staging.refusedOn)
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	byNS := map[string]*placement.Unstaged{}
	for i := range groups {
		g := &groups[i]
		g.Req.HoldRes = placement.Resources{CPU: holdCPU, MemoryMiB: holdMemoryMB}
		if g.Req.Count < 2 || g.Req.Shares == 0 || g.Req.Batch {
			continue // never staged
		}
		u, done := byNS[g.Key.Namespace]
		if !done {
			u = s.namespaceUnstaged(snap, g.Key.Namespace, now)
			byNS[g.Key.Namespace] = u
		}
		if refused := s.refusedNodes(g.Key, now); len(refused) > 0 {
			nodes := map[string]bool{}
			why := ""
			if u != nil {
				maps.Copy(nodes, u.Nodes)
				why = u.Why + "; "
			}
			names := slices.Sorted(maps.Keys(refused))
			for _, n := range names {
				nodes[n] = true
			}
			why += fmt.Sprintf("Nomad did not place a hold of its GPUs on node %s within %s (its CPU, memory or disk, or the held GPUs, were taken)",
				strings.Join(names, ", "), holdPlaced)
			if u != nil && u.Nodes == nil {
				nodes = nil
			}
			g.Req.Unstaged = &placement.Unstaged{Nodes: nodes, Why: why, Fix: "free CPU, memory or disk on the node, or allow raw_exec or exec in the namespace"}
			continue
		}
		g.Req.Unstaged = u
	}
}

// namespaceUnstaged is where the service stages others' allocations but
// not those of namespace ns (nil: nowhere), from what was read or learned
// of it within driverRulesFor. The caller holds s.mu.
func (s *loop) namespaceUnstaged(snap *placement.Snapshot, ns string, now time.Time) *placement.Unstaged {
	rule, ok := s.staging.drivers[ns]
	if !ok || len(rule.refused) == 0 || now.Sub(rule.at) >= driverRulesFor {
		return nil // nothing refused, or it is read (or learned) again by staging
	}
	fix := "allow raw_exec or exec in the namespace's capabilities (enabled_task_drivers, disabled_task_drivers)"
	refused := slices.Sorted(maps.Keys(rule.refused))
	why := fmt.Sprintf("the namespace %s does not allow the driver a hold of its GPUs would run with (its capabilities refuse %s; a hold uses raw_exec, else exec)",
		ns, strings.Join(refused, " and "))
	if len(refused) == len(holdDrivers) {
		return &placement.Unstaged{Why: why, Fix: fix}
	}
	nodes := map[string]bool{}
	for _, n := range snap.Nodes() {
		if s.canStage(n.ID) && s.holdDriverFor(s.state.Nodes[n.ID], ns) == "" {
			nodes[n.ID] = true
		}
	}
	if len(nodes) == 0 {
		return nil
	}
	return &placement.Unstaged{Nodes: nodes, Why: why, Fix: fix}
}

// refusedNodes are the nodes where Nomad did not place a hold of group k
// within holdRefusedFor of now; older ones are forgotten. The caller
// holds s.mu.
func (s *loop) refusedNodes(k decide.Key, now time.Time) map[string]time.Time {
	on := s.staging.refusedOn[k]
	for n, at := range on {
		if now.Sub(at) >= holdRefusedFor {
			delete(on, n)
		}
	}
	if len(on) == 0 {
		delete(s.staging.refusedOn, k)
	}
	return on
}
