package decide

import (
	"cmp"
	"fmt"
	"strings"
	"time"

	"github.com/gpushare/gpushare/scheduler/interference"
	"github.com/gpushare/gpushare/scheduler/placement"
)

// Key names a task group: its namespace, job and group. It is a value, not
// a string to split: job IDs of periodic and dispatched children contain
// "/".
type Key struct {
	Namespace string `json:"namespace"`
	Job       string `json:"job"`
	Group     string `json:"group"`
}

// Compare orders keys by namespace, then job, then group.
func (k Key) Compare(o Key) int {
	return cmp.Or(cmp.Compare(k.Namespace, o.Namespace), cmp.Compare(k.Job, o.Job), cmp.Compare(k.Group, o.Group))
}

// String is "<namespace>/<job>/<group>" with each part escaped ('%' as
// "%25", '/' as "%2F"), so that one string names one group (job "a/b"
// group "c" is "default/a%2Fb/c", job "a" group "b/c" is
// "default/a/b%2Fc") and plain names read as they are. It names groups in
// request IDs, learned profiles and the scheduler's records; ParseKey
// reads it back.
func (k Key) String() string {
	return keyPart.Replace(k.Namespace) + "/" + keyPart.Replace(k.Job) + "/" + keyPart.Replace(k.Group)
}

// Legacy is the key as String wrote it before it escaped the parts
// (ambiguous when a part contains '/'), to read records written then.
func (k Key) Legacy() string { return k.Namespace + "/" + k.Job + "/" + k.Group }

var (
	keyPart   = strings.NewReplacer("%", "%25", "/", "%2F")
	unKeyPart = strings.NewReplacer("%2F", "/", "%2f", "/", "%25", "%")
)

// ParseKey reads a key written by Key.String.
func ParseKey(s string) (Key, bool) {
	parts := strings.Split(s, "/")
	if len(parts) != 3 {
		return Key{}, false
	}
	return Key{Namespace: unKeyPart.Replace(parts[0]), Job: unKeyPart.Replace(parts[1]), Group: unKeyPart.Replace(parts[2])}, true
}

// Kind is what an action does.
type Kind int

// Kinds of action, in the order Step emits them for one group.
const (
	// Preempt stops Allocs (opportunistic allocations) so that the
	// group's Pin that follows can take their capacity.
	Preempt Kind = iota + 1
	// Pin places a waiting group as Decision says.
	Pin
	// Repin places again a pinned group whose capacity is gone or whose
	// GPU turned unhealthy; its running allocations are replaced.
	Repin
	// Reserve holds Nodes for the group until they free (Hold).
	Reserve
	// Refuse says the group can never be placed on this cluster, with a
	// reason that says what to change; decide it again only when the
	// cluster's nodes change.
	Refuse
	// Wait leaves the group waiting, with its reason and queue position.
	Wait
	// Unpair moves a group off the GPU it shares: a job there runs slower
	// than its bound, or the pair was seen to lose by sharing (slower,
	// summed over both, than one after the other). The executor stops
	// Allocs (the group waits again, to be placed elsewhere) and
	// remembers Pair as incompatible.
	Unpair
)

func (k Kind) String() string {
	switch k {
	case Preempt:
		return "preempt"
	case Pin:
		return "pin"
	case Repin:
		return "repin"
	case Reserve:
		return "reserve"
	case Refuse:
		return "refuse"
	case Wait:
		return "wait"
	case Unpair:
		return "unpair"
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// Action is one thing for the executor to do.
type Action struct {
	Kind  Kind
	Group Key
	// Decision is the placement of a Pin or Repin.
	Decision *placement.Decision
	// Kept marks a Pin that places the group exactly where its
	// allocations run (Group.Keep): the executor writes the pin it wrote
	// before, unchanged, so that Nomad updates the allocations in place.
	Kept bool
	// Allocs are the allocations a Preempt stops.
	Allocs []string
	// Hold is a Reserve's nodes, each with when it is expected to free.
	Hold map[string]time.Time
	// Refusal is why a Wait or Refuse did not place (nil for a Wait
	// caused only by a reservation's hold).
	Refusal *placement.Refusal
	// Reason says why, in words a user can act on (Wait, Refuse, Reserve).
	Reason string
	// Position is the group's place in the queue (1-based) of Of groups.
	Position, Of int
	// Ratio is the group's response ratio when it was ordered.
	Ratio float64
	// Pair is what an Unpair saw: two jobs that must not share a GPU of
	// this model again.
	Pair *Pair
}

// Pair is two jobs seen to break a bound, or to lose by sharing, together
// on a GPU of one model.
type Pair struct {
	GPUModel string
	// Slow ran slower than its bound while sharing with With; the
	// Unpair's group is whichever of the two moves.
	Slow, With interference.Profile
	// Norm is Slow's observed normalised throughput; Bound its slowdown
	// bound.
	Norm, Bound float64
}

func (a Action) String() string {
	switch a.Kind {
	case Pin, Repin:
		nodes := []string{}
		for _, p := range a.Decision.Placements {
			nodes = append(nodes, p.Node)
		}
		return fmt.Sprintf("%s %s on %v", a.Kind, a.Group, nodes)
	case Preempt:
		return fmt.Sprintf("preempt %v for %s", a.Allocs, a.Group)
	case Unpair:
		return fmt.Sprintf("unpair %s (%v): %s", a.Group, a.Allocs, a.Reason)
	case Reserve:
		return fmt.Sprintf("reserve %d node(s) for %s", len(a.Hold), a.Group)
	}
	return fmt.Sprintf("%s %s: %s", a.Kind, a.Group, a.Reason)
}
