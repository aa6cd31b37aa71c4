package service

import (
	"slices"
	"strings"
)

// namespaces are the Nomad namespaces the service manages (config
// nomad.namespaces): "*" for all of them. Jobs of other namespaces never
// enter the model and the HTTP API does not show them; their allocations
// do enter it, as the shares they hold are not free.
type namespaces struct {
	all   bool
	names []string // sorted, without duplicates; empty when all
}

func managedNamespaces(cfg []string) namespaces {
	var n namespaces
	for _, ns := range cfg {
		switch ns = strings.TrimSpace(ns); ns {
		case "*":
			return namespaces{all: true}
		case "":
			ns = "default"
		}
		n.names = append(n.names, ns)
	}
	if len(n.names) == 0 {
		return namespaces{all: true}
	}
	slices.Sort(n.names)
	n.names = slices.Compact(n.names)
	return n
}

// has reports whether the service manages namespace ns ("" is "default").
func (n namespaces) has(ns string) bool {
	if ns == "" {
		ns = "default"
	}
	return n.all || slices.Contains(n.names, ns)
}

// list is what to list: "*" once, or each namespace.
func (n namespaces) list() []string {
	if n.all {
		return []string{"*"}
	}
	return n.names
}

// stream is the namespace to subscribe to: always "*", since the
// allocations of every namespace hold shares (the job events of other
// namespaces are dropped as they arrive).
func (n namespaces) stream() string { return "*" }

func (n namespaces) String() string {
	if n.all {
		return "*"
	}
	return strings.Join(n.names, ", ")
}

func (s *loop) namespaces() namespaces { return managedNamespaces(s.cfg.Nomad.Namespaces) }
