package feasible

import (
	"maps"
	"slices"

	"github.com/hashicorp/nomad/api"
)

// Selection is where a group's rules let Nomad place it among some nodes,
// and which gpushare device groups it may take its shares from there.
type Selection struct {
	// Allowed are the IDs of the nodes that pass, in the order given.
	Allowed []string
	// Models, when not nil, are the only gpushare device groups (by name)
	// the group's device block matches on the allowed nodes: its
	// constraints rule out others there. Nil: every group it names.
	Models []string
	// Tally counts why the other nodes fail, as Nomad's filters would.
	Tally Tally
}

// Select checks the nodes (nil entries are skipped). Beyond Reason, Nomad
// takes a request's shares only from a device group that matches its
// device block, so Select narrows the groups the placement core may use to
// those (GPUShareGroups); as the core's models are one list for every
// node, a node where a group of those names does not match (its
// attributes differ from another node's) is left out, counted under
// FilterDevices.
func (c *Check) Select(nodes []*api.Node) Selection {
	var sel Selection
	for _, n := range nodes {
		if n == nil {
			continue
		}
		why := c.Reason(n)
		if why == "" {
			sel.Allowed = append(sel.Allowed, n.ID)
		}
		sel.Tally.Add(why)
	}
	match, other := map[string]bool{}, map[string]bool{}
	byID := map[string]*api.Node{}
	for _, n := range nodes {
		if n != nil {
			byID[n.ID] = n
		}
	}
	for _, id := range sel.Allowed {
		m, o := c.GPUShareGroups(byID[id])
		for _, name := range m {
			match[name] = true
		}
		for _, name := range o {
			other[name] = true
		}
	}
	if len(other) == 0 {
		return sel
	}
	sel.Models = slices.Sorted(maps.Keys(match))
	kept := sel.Allowed[:0:0]
	for _, id := range sel.Allowed {
		if _, o := c.GPUShareGroups(byID[id]); slices.ContainsFunc(o, func(name string) bool { return match[name] }) {
			sel.Tally.Add(FilterDevices)
			continue
		}
		kept = append(kept, id)
	}
	sel.Allowed = kept
	return sel
}

// Narrow returns the models a request may use: those it names (every one
// when it names none) that Select found its device block to match.
func (s *Selection) Narrow(models []string) []string {
	if s.Models == nil {
		return models
	}
	if len(models) == 0 {
		return s.Models
	}
	out := slices.DeleteFunc(slices.Clone(models), func(m string) bool { return !slices.Contains(s.Models, m) })
	if len(out) == 0 {
		return []string{""} // no model: an empty list would allow every one
	}
	return out
}
