package service

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"
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

// nsDrivers is what each namespace allows of the holds' drivers, read
// from Nomad (readDrivers) or learned from its refusal of a hold; it
// locks itself, so a caller may hold the model's lock or not.
type nsDrivers struct {
	mu    sync.Mutex
	rules map[string]driverRule
}

// fresh reports whether what is known of namespace ns was read or learned
// within driverRulesFor of now.
func (d *nsDrivers) fresh(ns string, now time.Time) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	rule, known := d.rules[ns]
	return known && now.Sub(rule.at) < driverRulesFor
}

// read keeps what namespace ns's capabilities allow of holdDrivers.
func (d *nsDrivers) read(ns string, c *api.NamespaceCapabilities, now time.Time) {
	rule := driverRule{refused: map[string]bool{}, at: now}
	for _, dr := range holdDrivers {
		if !allowsDriver(c, dr) {
			rule.refused[dr] = true
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.rules == nil {
		d.rules = map[string]driverRule{}
	}
	d.rules[ns] = rule
}

// forget drops what is known of namespace ns: Nomad's refusal teaches it
// anew.
func (d *nsDrivers) forget(ns string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.rules, ns)
}

// driverRefused matches Nomad's refusal of a job whose task drivers its
// namespace does not allow ("used task driver \"raw_exec\" is not allowed
// in namespace \"ml\"", or "used task drivers [...] are not allowed").
var driverRefused = regexp.MustCompile(`used task drivers? (.*) (?:is|are) not allowed in namespace`)

// learn learns from Nomad's refusal of a hold that namespace ns does not
// allow the drivers it names, and reports whether err was such a refusal.
func (d *nsDrivers) learn(ns string, err error, now time.Time) bool {
	m := driverRefused.FindStringSubmatch(err.Error())
	if m == nil {
		return false
	}
	named := strings.FieldsFunc(m[1], func(r rune) bool { return strings.ContainsRune(`[]"' ,`, r) })
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.rules == nil {
		d.rules = map[string]driverRule{}
	}
	rule := d.rules[ns]
	rule.refused = maps.Clone(rule.refused)
	if rule.refused == nil {
		rule.refused = map[string]bool{}
	}
	for _, dr := range named {
		if slices.Contains(holdDrivers, dr) {
			rule.refused[dr] = true
		}
	}
	rule.at = now
	d.rules[ns] = rule
	return true
}

// driverFor is the driver a hold of a group of namespace ns uses on node
// n: the first of holdDrivers the node has and the namespace allows (""
// when none: nothing of the namespace is staged there).
func (d *nsDrivers) driverFor(n *api.Node, ns string) string {
	if n == nil {
		return ""
	}
	d.mu.Lock()
	refused := d.rules[ns].refused
	d.mu.Unlock()
	for _, dr := range holdDrivers {
		if !refused[dr] && feasible.HasDriver(n, dr) {
			return dr
		}
	}
	return ""
}

// refused lists the holds' drivers namespace ns refuses, sorted, and
// whether that was read or learned within driverRulesFor of now.
func (d *nsDrivers) refused(ns string, now time.Time) ([]string, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	rule := d.rules[ns]
	return slices.Sorted(maps.Keys(rule.refused)), now.Sub(rule.at) < driverRulesFor
}

// whyNot says why a group of namespace ns is not staged on nodes.
func (d *nsDrivers) whyNot(ns string, nodes []string) string {
	refused, _ := d.refused(ns, time.Time{})
	return fmt.Sprintf("the namespace %s does not allow the driver a hold of its GPUs would run with on node %s (its capabilities refuse %s; a hold uses raw_exec, else exec)",
		ns, strings.Join(nodes, ", "), strings.Join(refused, " and "))
}

// readDrivers reads what namespace ns allows of the holds' drivers, when
// what the service knows is older than driverRulesFor. A namespace it
// cannot read (no reader, no permission) is learned from Nomad's refusal
// of a hold instead (nsDrivers.learn).
func (st *stager) readDrivers(ctx context.Context, ns string) {
	if st.drivers.fresh(ns, st.now()) {
		return
	}
	var info *api.Namespace
	err := errors.New("the Nomad client reads no namespaces")
	if st.namespaces != nil {
		rctx, cancel := st.request(ctx)
		info, err = st.namespaces.Namespace(rctx, ns)
		cancel()
	}
	if err != nil || info == nil {
		// what was learned is tried again: Nomad's refusal teaches it anew
		st.log.Debug("cannot read the namespace's capabilities; a hold Nomad refuses teaches them", "namespace", ns, "error", err)
		st.drivers.forget(ns)
		return
	}
	st.drivers.read(ns, info.Capabilities, st.now())
}

// holdRules tells the step, for each group, what a hold takes of a node
// and where its allocations cannot be staged: the nodes where its
// namespace allows none of the holds' drivers the node has, and those
// where Nomad did not place a hold of it lately (hold_stage.go). The
// caller does not hold the model's lock; the model is not written
// meanwhile (a pass's read).
func (st *stager) holdRules(snap *placement.Snapshot, groups []decide.Group) {
	if st.nomad == nil {
		return
	}
	dropGone(st.c, st.waiting)
	dropGone(st.c, st.refusedOn)
	now := st.now()
	st.c.mu.Lock()
	defer st.c.mu.Unlock()
	byNS := map[string]*placement.Unstaged{}
	for i := range groups {
		g := &groups[i]
		g.Req.HoldRes = placement.Resources{CPU: holdCPU, MemoryMiB: holdMemoryMB}
		if g.Req.Count < 2 || g.Req.Shares == 0 || g.Req.Batch {
			continue // never staged
		}
		u, done := byNS[g.Key.Namespace]
		if !done {
			u = st.namespaceUnstaged(snap, g.Key.Namespace, now)
			byNS[g.Key.Namespace] = u
		}
		if refused := st.refusedNodes(g.Key, now); len(refused) > 0 {
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
// of it within driverRulesFor. The caller holds the model's lock.
func (st *stager) namespaceUnstaged(snap *placement.Snapshot, ns string, now time.Time) *placement.Unstaged {
	refused, fresh := st.drivers.refused(ns, now)
	if len(refused) == 0 || !fresh {
		return nil // nothing refused, or it is read (or learned) again by staging
	}
	fix := "allow raw_exec or exec in the namespace's capabilities (enabled_task_drivers, disabled_task_drivers)"
	why := fmt.Sprintf("the namespace %s does not allow the driver a hold of its GPUs would run with (its capabilities refuse %s; a hold uses raw_exec, else exec)",
		ns, strings.Join(refused, " and "))
	if len(refused) == len(holdDrivers) {
		return &placement.Unstaged{Why: why, Fix: fix}
	}
	nodes := map[string]bool{}
	for _, n := range snap.Nodes() {
		if st.canStage(n.ID) && st.drivers.driverFor(st.c.state.Nodes[n.ID], ns) == "" {
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
// holds the model's lock.
func (st *stager) refusedNodes(k decide.Key, now time.Time) map[string]time.Time {
	on := st.refusedOn[k]
	for n, at := range on {
		if now.Sub(at) >= holdRefusedFor {
			delete(on, n)
		}
	}
	if len(on) == 0 {
		delete(st.refusedOn, k)
	}
	return on
}
