package pin

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/gpushare/gpushare/scheduler/interference"
	"github.com/gpushare/gpushare/scheduler/placement"
)

// Meta keys of the jobspec contract (docs/gate-and-pin.md), read from the
// job or group (group wins) by Request and written by the pin. The
// placement core never sees them: Request and ApplyMeta turn them into the
// typed fields of a placement.Request.
const (
	MetaVC          = "gpushare.vc"
	MetaClass       = "gpushare.class"
	MetaProfile     = "gpushare.profile"
	MetaSMUtil      = "gpushare.sm_util"
	MetaMemBW       = "gpushare.mem_bw"
	MetaMaxSlowdown = "gpushare.max_slowdown"
	// MetaExpected is how long the job expects to run, as a Go duration
	// ("90m", "6h"): the service serves short jobs sooner (see
	// queue.ResponseRatio).
	MetaExpected = "gpushare.expected_runtime"
	// MetaReplicas is how a group's allocations share nodes: "spread"
	// (the default: over nodes, as Nomad's job anti-affinity spreads
	// them) or "pack" (on as few nodes and GPUs as fit them).
	MetaReplicas = "gpushare.replicas"
	// MetaTimeslice = "true" opts a group into time-slicing (Gandiva's
	// suspend/resume, issue 46 part 2): its shares count its GPU memory,
	// and its compute is the whole GPU in turns, quantum by quantum, with
	// the other time-sliced tasks of its GPU, rather than a cap of its
	// shares.
	MetaTimeslice = "gpushare.timeslice"
	MetaPlacement = "gpushare.placement"
	// MetaSignature signs gpushare.placement: the scheduler's HMAC of the
	// group and the placement, so that a placement written by hand counts
	// for nothing.
	MetaSignature = "gpushare.signature"
)

// ErrUnknownProfile is wrapped by the error for a gpushare.profile the
// model does not name: the scheduler's configuration may (profile blocks).
var ErrUnknownProfile = errors.New("unknown interference profile")

// ApplyMeta fills r's VC, class, profile, replicas and time-slicing from
// job or group meta. Named
// profiles are looked up in model; declared sm_util / mem_bw are used as
// given (a missing one counts as 0). Errors wrap placement.ErrBadRequest.
func ApplyMeta(r *placement.Request, meta map[string]string, model *interference.Model) error {
	r.VC = meta[MetaVC]
	r.Class = placement.Class(meta[MetaClass])
	switch v := meta[MetaReplicas]; v {
	case "", "spread":
	case "pack":
		r.Pack = true
	default:
		return fmt.Errorf("%w: %s %q must be \"spread\" (the default: over nodes, as Nomad spreads a group's allocations) or \"pack\"", placement.ErrBadRequest, MetaReplicas, v)
	}
	switch v := meta[MetaTimeslice]; v {
	case "", "false":
	case "true":
		r.Timeslice = true
	default:
		return fmt.Errorf("%w: %s %q must be \"true\" (time-sliced: its shares count its GPU memory, its compute is the whole GPU in turns) or \"false\"", placement.ErrBadRequest, MetaTimeslice, v)
	}
	if name := meta[MetaProfile]; name != "" {
		p, ok := model.Lookup(name)
		if !ok {
			return fmt.Errorf("%w: %w: %s %q is not a known profile (known: %s)", placement.ErrBadRequest, ErrUnknownProfile, MetaProfile, name, strings.Join(model.Names(), ", "))
		}
		r.Profile = p
		return r.Validate()
	}
	for key, dst := range map[string]*float64{MetaSMUtil: &r.Profile.SM, MetaMemBW: &r.Profile.MemBW} {
		if v, ok := meta[key]; ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || f < 0 || f > 1 {
				return fmt.Errorf("%w: %s %q must be a number within 0..1", placement.ErrBadRequest, key, v)
			}
			*dst = f
		}
	}
	return r.Validate()
}
