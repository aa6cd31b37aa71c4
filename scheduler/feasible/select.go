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
	var others [][]string // per allowed node, the groups its block does not match
	match, other := map[string]bool{}, false
	for _, n := range nodes {
		if n == nil {
			continue
		}
		why := c.Reason(n)
		sel.Tally.Add(why)
		if why != "" {
			continue
		}
		m, o := c.GPUShareGroups(n)
		if len(m) == 0 && len(o) > 0 {
			// only some GPUs of a model offered per GPU match: the core
			// places on whole models
			sel.Tally.Add(FilterDevices)
			continue
		}
		sel.Allowed = append(sel.Allowed, n.ID)
		for _, name := range m {
			match[name] = true
		}
		others = append(others, o)
		other = other || len(o) > 0
	}
	if !other {
		return sel
	}
	sel.Models = slices.Sorted(maps.Keys(match))
	kept := sel.Allowed[:0:0]
	for i, id := range sel.Allowed {
		if slices.ContainsFunc(others[i], func(name string) bool { return match[name] }) {
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
