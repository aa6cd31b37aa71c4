package service

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/gpushare/gpushare/scheduler/config"
	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
	"github.com/prometheus/client_golang/prometheus"
)

// A pin the scheduler writes again (a group pinned again off lost
// capacity, or for a count past its pin) is a new version of the job.
// Nomad alone would replace a lost allocation without one; but a new
// version of a group deployed with canaries and auto_promote = false gets
// canaries that wait for `nomad deployment promote`, and the group would
// stay short of its count until someone promotes. So when the only change
// between the version whose allocations run (read from one of them) and
// the version deployed is gpushare's own pin (pin.Spec equal: nothing
// Nomad replaces allocations for), the leader promotes that deployment
// itself once its canaries are healthy. A deployment of a version the
// user changed is never promoted here: their canaries are theirs.
//
// It keeps nothing between passes: every pass reads the candidates from
// the model (live canaries of a pinned group's current version beside
// live allocations of an older one), and from Nomad the job's latest
// deployment and the version an older allocation runs; a promote that
// fails (Nomad refuses unhealthy canaries) is tried again by the next
// pass.
//
// The promoter is its own type: the loop lists the candidates while it
// reads the model (promotable) and hands them to a promoter built from
// its capabilities (loop.promoter), which returns what to say of the
// groups that wait; the loop writes that into their stages.

// deployments is the part of Nomad the promoter reads and acts on.
type deployments interface {
	LatestDeployment(ctx context.Context, namespace, jobID string) (*api.Deployment, error)
	PromoteAll(ctx context.Context, namespace, deploymentID string) error
	Alloc(ctx context.Context, id string) (*api.Allocation, error)
}

// promoter promotes the deployments of the scheduler's own pins. It keeps
// nothing between passes.
type promoter struct {
	nomad   deployments
	lease   writeLease
	log     hclog.Logger
	timeout time.Duration // of each request
	// promoted counts the deployments promoted; changed asks for a pass
	// once one is.
	promoted prometheus.Counter
	changed  func()
}

// promoter is the loop's promoter, built from what the loop holds now (a
// test may swap its Nomad).
func (s *loop) promoter() promoter {
	return promoter{nomad: s.nomad, lease: s.lease, log: s.log, timeout: config.Duration(s.cfg.Nomad.RequestTimeout),
		promoted: s.metrics.promotions, changed: s.markDirty}
}

// promotion is a job whose current version has canaries waiting for a
// promote beside allocations of an older version.
type promotion struct {
	namespace, id string
	version       uint64
	createIndex   uint64
	// groups are the job's canary groups: for each, its Spec in the
	// current version and a live allocation of an older version.
	groups map[string]canaryGroup
}

type canaryGroup struct {
	spec, older string
}

// promotable lists the jobs whose pinned groups have live canaries of the
// current version beside live allocations of an older one, and that
// deploy with canaries Nomad does not promote itself. A job with a canary
// group not pinned by this scheduler is left out.
//
// A pass lists them during its read of the model (readModel), without
// the lock, looking only at the jobs collect found with a group that
// deploys with canaries Nomad does not promote itself
// (collectCache.canaries): walking every job, under the lock as it was,
// took 35-60 ms of a 10,000-node pass (300 ms when it sorted and set up
// each). A job pinned in the pass is a candidate from the next one on.
func promotable(state *model.State, canaries map[string]bool) []promotion {
	var out []promotion
	for _, k := range slices.Sorted(maps.Keys(canaries)) {
		job := state.Jobs[k]
		if job == nil || job.Stop != nil && *job.Stop || job.Version == nil || model.Template(job) {
			continue
		}
		p := promotion{namespace: nsOf(job), id: *job.ID, version: *job.Version, groups: map[string]canaryGroup{}}
		if job.CreateIndex != nil {
			p.createIndex = *job.CreateIndex
		}
		ok := true
		for _, tg := range job.TaskGroups {
			name := *tg.Name
			if !waitsForPromote(job, tg) {
				continue
			}
			canary, older := false, ""
			for _, a := range state.AllAllocs(p.namespace, p.id, name) {
				if !model.Live(a) {
					continue
				}
				if !model.Current(a, job) {
					older = cmp.Or(older, a.ID)
				} else if a.DeploymentStatus != nil && a.DeploymentStatus.Canary {
					canary = true
				}
			}
			if !canary {
				continue
			}
			spec := pin.Spec(job, name)
			if older == "" || spec == "" || !state.Pinned(job, name) {
				ok = false
				continue
			}
			p.groups[name] = canaryGroup{spec: spec, older: older}
		}
		if ok && len(p.groups) > 0 {
			out = append(out, p)
		}
	}
	return out
}

// waitsForPromote reports whether a group deploys with canaries that
// Nomad does not promote itself: the groups promote looks at.
func waitsForPromote(job *api.Job, tg *api.TaskGroup) bool {
	return canaries(job, tg) > 0 && !autoPromote(job, tg)
}

// autoPromote reports whether Nomad promotes a group's canaries itself.
func autoPromote(job *api.Job, tg *api.TaskGroup) bool {
	for _, u := range []*api.UpdateStrategy{tg.Update, job.Update} {
		if u != nil && u.AutoPromote != nil {
			return *u.AutoPromote
		}
	}
	return false
}

// promote promotes, as leader, the deployments of the scheduler's own pins
// whose canaries are healthy: cands, as the pass's read found them
// (promotable). It returns, for the groups of those that wait, why: the
// loop says it in their lifecycle reason. Errors are logged and said; the
// next pass tries again.
func (pr promoter) promote(ctx context.Context, cands []promotion) map[decide.Key]string {
	if pr.lease.mayWrite() != nil {
		return nil
	}
	whys := map[decide.Key]string{}
	for _, p := range cands {
		if ctx.Err() != nil {
			break
		}
		why := pr.promoteOne(ctx, p)
		if why == "" {
			continue
		}
		for g := range p.groups {
			whys[decide.Key{Namespace: p.namespace, Job: p.id, Group: g}] = why
		}
	}
	return whys
}

func (pr promoter) request(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, pr.timeout)
}

// promoteOne reads p's latest deployment and promotes it when it is of
// p's version, waits for a promote and its canaries are healthy. It
// returns what to say of the groups ("" when there is nothing to say).
func (pr promoter) promoteOne(ctx context.Context, p promotion) string {
	log := pr.log.With("job_id", p.id, "namespace", p.namespace, "version", p.version)
	rctx, cancel := pr.request(ctx)
	d, err := pr.nomad.LatestDeployment(rctx, p.namespace, p.id)
	cancel()
	if err != nil {
		log.Warn("cannot read the deployment of a pinned group's canaries", "error", err)
		return fmt.Sprintf("canaries of its current version wait; reading their deployment failed (read again next pass): %v", err)
	}
	if d == nil || d.JobVersion != p.version || (p.createIndex != 0 && d.JobCreateIndex != 0 && d.JobCreateIndex != p.createIndex) ||
		d.Status != api.DeploymentStatusRunning {
		return ""
	}
	need, healthy, placed, unpromoted := 0, 0, 0, false
	for name, st := range d.TaskGroups {
		if st == nil || st.DesiredCanaries == 0 || st.Promoted {
			continue
		}
		if _, ok := p.groups[name]; !ok {
			return "" // a canary group this pass did not see waiting
		}
		unpromoted = true
		need += st.DesiredCanaries
		healthy += min(st.HealthyAllocs, st.DesiredCanaries)
		placed += min(len(st.PlacedCanaries), st.DesiredCanaries)
	}
	if !unpromoted || !pr.onlyPinChanged(ctx, p, log) {
		return ""
	}
	if healthy < need || placed < need {
		return fmt.Sprintf("the scheduler's new pin (nothing else changed) is deployed with %d canary(ies), %d placed and %d healthy: gpushare promotes deployment %s once they are healthy",
			need, placed, healthy, shortID(d.ID))
	}
	if err := pr.lease.mayWrite(); err != nil {
		return ""
	}
	rctx, cancel = pr.request(ctx)
	err = pr.nomad.PromoteAll(rctx, p.namespace, d.ID)
	cancel()
	if err != nil {
		log.Warn("cannot promote the deployment of the scheduler's new pin; tried again next pass", "deployment_id", d.ID, "error", err)
		return fmt.Sprintf("the scheduler's new pin (nothing else changed) is deployed with %d healthy canary(ies); promoting deployment %s failed (tried again next pass): %v",
			need, shortID(d.ID), err)
	}
	pr.promoted.Inc()
	log.Info("promoted the deployment of the scheduler's new pin (nothing else changed): its canaries are healthy",
		"deployment_id", d.ID, "groups", slices.Sorted(maps.Keys(p.groups)), "canaries", need)
	pr.changed()
	return fmt.Sprintf("the scheduler's new pin (nothing else changed) was deployed with %d canary(ies): gpushare promoted deployment %s once they were healthy", need, shortID(d.ID))
}

// onlyPinChanged reports whether, in each of p's canary groups, the
// version an older allocation runs has the current version's Spec: the
// only change is the pin. A read that fails is no.
func (pr promoter) onlyPinChanged(ctx context.Context, p promotion, log hclog.Logger) bool {
	for _, name := range slices.Sorted(maps.Keys(p.groups)) {
		g := p.groups[name]
		rctx, cancel := pr.request(ctx)
		a, err := pr.nomad.Alloc(rctx, g.older)
		cancel()
		if err != nil || a.Job == nil {
			log.Warn("cannot read the version a running allocation runs; its canaries are not promoted by gpushare this pass", "alloc_id", g.older, "error", err)
			return false
		}
		if pin.Spec(a.Job, name) != g.spec {
			return false // the user changed it: their canaries
		}
	}
	return true
}

// shortID is the first 8 characters of a Nomad ID, as its CLI prints it.
func shortID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}
