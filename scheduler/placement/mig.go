package placement

import (
	"fmt"

	"github.com/gpushare/gpushare/devicefn"
)

// Shared MIG instances (the plugin's mig_instances = "shared") are GPUs of
// the snapshot in groups of their own, one per parent model and profile
// ("<model> MIG <profile>"). A share of an instance is still
// 1/shares_per_gpu of its parent (GPU.Shares), so a request means the same
// everywhere; an instance offers GPU.Cap shares, and the share indices
// from Cap on are marked used for good. An instance:
//
//   - holds fractions only: whole-GPU requests and their cells never take
//     one, not even a 7g instance that offers every share of its parent
//     (GPU.Whole is false);
//   - is isolated from its sibling instances: interference is predicted
//     among the jobs of one instance only, as on a GPU;
//   - filled exactly by a fraction (the request equals its free shares) is
//     that fraction's best fit under every policy that shares GPUs
//     (exactFitTier);
//   - counts its free shares in fragmentation as shares of the parent (a
//     free 1g slice of an A100 at 100 shares per GPU is 14 shares), all of
//     them fragmented for whole-GPU kinds of request.

// exactFitTier is taken off the first cost of a candidate that fills a
// shared MIG instance exactly, putting it before every candidate that
// does not, whatever the policy: no policy's own first cost comes near it
// (scores are within ±100, first-fit's node index below 1e6).
const exactFitTier = 1e9

// exactFit reports whether frac shares fill g exactly: g is a shared MIG
// instance with frac shares free.
func exactFit(g *GPU, frac int) bool { return g.free == frac && g.inst }

// markExact puts c in the exact-fit tier.
func (c *cand) markExact() {
	c.exact = true
	c.cost[0] -= exactFitTier
}

// score is the candidate's cost as the policy scored it, without the tier.
func (c *cand) score() float64 {
	if c.exact {
		return c.cost[0] + exactFitTier
	}
	return c.cost[0]
}

// checkMIGGroup checks a group of shared MIG instances beyond what
// devicefn.DecodeGroup checks (a group built in code is not decoded).
func checkMIGGroup(grp *devicefn.Group) error {
	m := grp.MIG
	if m.Shares < 1 || m.Shares > grp.SharesPerGPU {
		return fmt.Errorf("MIG instances of %d shares are outside 1..%d (shares_per_gpu)", m.Shares, grp.SharesPerGPU)
	}
	for _, g := range grp.GPUs {
		if g.Parent == "" {
			return fmt.Errorf("MIG instance %q names no parent GPU", g.UUID)
		}
	}
	return nil
}

// tooManyGPUs is the refusal of a request of need whole GPUs when the
// largest node has maxGPUs, saying why shared MIG instances (mig, the
// largest offering largest shares) cannot help.
func tooManyGPUs(need, maxGPUs, largest int, models string, mig []string) string {
	msg := fmt.Sprintf("needs %d GPUs of %s on one node; the largest node has %d", need, models, maxGPUs)
	if why := migOnly(need, 0, largest, mig); why != "" {
		msg += "; " + why
	}
	return msg
}

// onlyInstancesTooSmall is the refusal of a fraction of frac shares when
// the only GPUs of its models are shared MIG instances and every one is
// smaller; "" otherwise.
func onlyInstancesTooSmall(frac, maxGPUs, largest int, models string, mig []string) string {
	why := migOnly(0, frac, largest, mig)
	if why == "" || maxGPUs > 0 {
		return ""
	}
	return fmt.Sprintf("needs %d shares on one GPU of %s; %s, and no node has whole GPUs of it", frac, models, why)
}

// migOnly says, for a refusal, why the shared MIG instances among the
// GPUs a request may use cannot hold it ("" when there are none, or when
// whole is 0 and frac fits one of them): instances never hold whole GPUs,
// and a fraction larger than every instance fits none.
func migOnly(whole, frac, largest int, models []string) string {
	switch {
	case len(models) == 0:
		return ""
	case whole > 0:
		return fmt.Sprintf("shared MIG instances (%s) never hold whole GPUs: ask for a fraction of one GPU, at most %d shares, or for GPUs of a model without MIG", joinOr(models), largest)
	case frac > largest:
		return fmt.Sprintf("the largest shared MIG instance (%s) offers %d shares", joinOr(models), largest)
	}
	return ""
}

func joinOr(list []string) string {
	out := ""
	for i, s := range list {
		switch {
		case i == 0:
		case i == len(list)-1:
			out += " or "
		default:
			out += ", "
		}
		out += s
	}
	return out
}

// migReason is the first part of a placement's reason on an instance.
func migReason(g *GPU, c cand, local int, node string) string {
	fit := ""
	if c.exact {
		fit = ", an exact fit"
	}
	return fmt.Sprintf("%d shares of MIG instance %d (%s of %s, %d shares%s) on node %s", c.take, local, g.Profile(), g.Parent(), g.Cap, fit, node)
}

// indicesWithin reports whether every share ID's index is below limit.
func indicesWithin(shares []string, limit int) bool {
	for _, sh := range shares {
		if id, err := devicefn.ParseShareID(sh); err != nil || id.Index >= limit {
			return false
		}
	}
	return true
}

// HasMIGInstances reports whether any node has shared MIG instances.
func (s *Snapshot) HasMIGInstances() bool { return s.instances > 0 }

// FillsInstance reports whether placement p takes every share of one
// shared MIG instance that nobody else uses: an isolated GPU of its own,
// as good as an idle whole GPU for a group that wants one (decide's
// IdleFirst). Call it before p is added to the snapshot.
func (s *Snapshot) FillsInstance(p *Placement) bool {
	if len(p.GPUs) != 1 {
		return false
	}
	ref, ok := s.byUUID[p.GPUs[0]]
	if !ok {
		return false
	}
	g := &ref.node.GPUs[ref.gpu]
	return g.inst && g.free == g.Cap && len(p.Shares) == g.Cap
}
