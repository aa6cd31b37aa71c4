package pin

import "github.com/hashicorp/nomad/api"

// IsGate reports whether c is the gate constraint. The checks of Nomad's
// own rules (package feasible) leave it out: no node meets it, by design.
func IsGate(c *api.Constraint) bool { return isGate(c) }
