package e2e

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// elasticInterval is the scheduler's elastic_interval here: short, so the
// grows come within a minute or two, and long enough that a growth a
// loaded machine's Nomad places in half a minute is not given back as
// unplaced (shrinkBack gives back a growth not placed within it).
const elasticInterval = "45s"

// TestElasticGroupsOnNomad runs elastic groups (gpushare.elastic, a
// scaling block without a policy; docs/users.md#elastic-groups) on the
// real Nomad 1.11.3, plugin and scheduler (issue 45, part 3): three 4-GPU
// PCIe clients with device_groups = "gpu", where the scheduler pins by
// node alone, so a re-pin after a count change restarts nothing.
//   - grow: an elastic group of 50 shares, count 1, scaling min 1 max 3,
//     is grown by the scheduler to 3, one allocation at a time, through
//     Nomad's scale API (the job's scaling events carry gpushare's
//     message and the registered count); its first allocation keeps its ID
//     (the placement packs: the first shares GPU 0 with the Autoscaler's
//     group below, the two grown ones share GPU 1)
//     and is never restarted, and no allocation is created beyond the grows;
//   - shrink: a gated production job of priority 80 and whole GPUs, as
//     many as the idle GPUs plus those only the grown allocations hold,
//     waits; the elastic group is shrunk, newest allocations first, to its
//     min (1), never below; the oldest allocation still runs under its ID,
//     never restarted, the grown ones stopped; the waiting job is placed;
//   - a group whose scaling block has a policy (the Nomad Autoscaler's),
//     registered before the elastic group and opted in too, is never
//     scaled by gpushare: no scaling event of gpushare's, its count 1, its
//     status says why.
//
// Counts, IDs and events decide; the waits bound liveness only.
func TestElasticGroupsOnNomad(t *testing.T) {
	start := time.Now()
	e := newPCIeEnvWith(t, "gpushare-elastic-", 90, fmt.Sprintf("device_groups = %q", devicefn.DeviceGroupsGPU), "dc1", "dc1", "dc1")
	checkFingerprint(t, e, true)
	s := e.startScheduler("s1", fmt.Sprintf("elastic_interval = %q\n", elasticInterval))
	t.Logf("cluster and scheduler ready in %s", time.Since(start).Round(time.Second))

	// the Autoscaler's group, first: every pass from here on could grow it
	e.registerElastic("auto", 25, 1, 1, 3, map[string]any{"evaluation_interval": "10s", "cooldown": "1m"})
	e.settled("auto", 1)
	e.registerElastic("el", 50, 1, 1, 3, nil)
	first := e.settled("el", 1)[0]
	seen := e.allocIDs("el")

	// grow: 1 -> 2 -> 3, by the scheduler
	for to := 2; to <= 3; to++ {
		ev := e.waitResize("el", "grow", to)
		allocs := e.settled("el", to)
		kept := e.keptRunning(first.ID)
		restarts := e.createdSince("el", seen) - (to - 1)
		t.Logf("RESULT grow %d -> %d | event %q (registered %v) | first %s kept %v | restarts %d | %d run on %s",
			to-1, to, ev.Message, ev.Meta["gpushare.registered_count"], first.ID[:8], kept, restarts, len(allocs), strings.Join(nodesOf(allocs), ","))
		must.True(t, kept, must.Sprintf("grow to %d: the first allocation %s was restarted or stopped", to, first.ID))
		must.Eq(t, 0, restarts, must.Sprintf("grow to %d created allocations beyond the growth", to))
		must.Eq(t, "1", fmt.Sprint(ev.Meta["gpushare.registered_count"]), must.Sprint("the event carries the registered count"))
	}
	grown := e.settled("el", 3)
	must.Eq(t, 3, e.countOf("el"))
	// at max: it stays 3 (one pass more than an interval decides nothing
	// else; the events say so below)

	// shrink: a waiting production job that fits only on the shares the
	// grown allocations hold
	idle, freed, layout := e.elasticLayout(grown, "el", "auto")
	t.Logf("layout: %s; %d GPUs idle, %d held only by the grown allocations", layout, idle, freed)
	must.Positive(t, freed, must.Sprintf("the grown allocations share their GPUs with the first (%s): nothing for a waiting job to take", layout))
	need := idle + freed
	seen = e.allocIDs("el")
	j := e.parse("fill", map[string]any{"shares": 100, "count": need, "class": "production"})
	j.Priority = ptr(80)
	_, _, err := e.nomad.Jobs().Register(j, nil)
	must.NoError(t, err)
	ev := e.waitResize("el", "shrink", 0)
	to := int(*ev.Count)
	filled := e.settled("fill", need)
	byIndex := map[int]*api.Allocation{}
	for _, a := range grown {
		byIndex[indexOf(a.Name)] = a
	}
	kept := e.keptRunning(first.ID)
	newestStopped := true
	for i, a := range byIndex {
		if i >= to {
			newestStopped = newestStopped && e.stopped(a.ID)
		} else {
			kept = kept && e.keptRunning(a.ID)
		}
	}
	grows := len(e.resizes("el", "grow")) - 2 // grown back since into idle shares, if any
	restarts := e.createdSince("el", seen) - grows
	t.Logf("RESULT shrink 3 -> %d | event %q | first %s kept %v | newest stopped %v | restarts %d | fill: %d allocations of 100 shares run on %s",
		to, ev.Message, first.ID[:8], kept, newestStopped, restarts, len(filled), strings.Join(nodesOf(filled), ","))
	must.Eq(t, 1, to, must.Sprint("shrunk to its min: the waiting job needs every GPU only the grown allocations hold"))
	must.StrContains(t, ev.Message, "default/fill/g waits")
	must.True(t, kept, must.Sprint("the oldest allocation was restarted or stopped"))
	must.True(t, newestStopped, must.Sprint("the newest allocations were not the ones stopped"))
	must.Eq(t, 0, restarts, must.Sprint("the shrink restarted allocations"))
	for _, ev := range e.scaleEvents("el") {
		if ev.Count != nil {
			must.GreaterEq(t, int64(1), *ev.Count, must.Sprintf("a resize below min: %q", ev.Message))
		}
	}
	must.GreaterEq(t, 1, e.countOf("el"))

	// the Autoscaler's group: never scaled by gpushare
	var st struct {
		Groups []struct {
			Elastic *struct {
				Managed bool
				Why     string
			}
		}
	}
	must.NoError(t, getJSON(s.http+"/v1/jobs/"+url.PathEscape("auto"), &st))
	must.SliceLen(t, 1, st.Groups)
	must.NotNil(t, st.Groups[0].Elastic)
	ours := len(e.resizes("auto", ""))
	t.Logf("RESULT autoscaler's group | count %d | gpushare's scaling events %d | managed %v | %s",
		e.countOf("auto"), ours, st.Groups[0].Elastic.Managed, st.Groups[0].Elastic.Why)
	must.Eq(t, 0, ours, must.Sprint("gpushare scaled the Autoscaler's group"))
	must.Eq(t, 1, e.countOf("auto"))
	must.False(t, st.Groups[0].Elastic.Managed)
	must.StrContains(t, st.Groups[0].Elastic.Why, "Nomad Autoscaler")
	e.stopJobs("fill", "el", "auto")
	t.Logf("took %s", time.Since(start).Round(time.Second))
}

// registerElastic registers testdata/shares.nomad.hcl (gated) as id: an
// elastic group of shares an allocation, count, and a scaling block of
// min and max, with policy when not nil (the Nomad Autoscaler's).
func (e *env) registerElastic(id string, shares, count, min, max int, policy map[string]any) {
	e.t.Helper()
	j := e.parse(id, map[string]any{"shares": shares, "count": count})
	tg := j.TaskGroups[0]
	tg.Meta["gpushare.elastic"] = "true"
	lo, hi := int64(min), int64(max)
	tg.Scaling = &api.ScalingPolicy{Type: "horizontal", Min: &lo, Max: &hi, Enabled: ptr(true), Policy: policy}
	_, _, err := e.nomad.Jobs().Register(j, nil)
	must.NoError(e.t, err)
}

// scaleEvents are group g's scaling events of job id, newest first.
func (e *env) scaleEvents(id string) []api.ScalingEvent {
	st, _, err := e.nomad.Jobs().ScaleStatus(id, nil)
	if err != nil {
		return nil
	}
	return st.TaskGroups["g"].Events
}

// resizes are gpushare's scaling events of job id in direction ("": any),
// newest first.
func (e *env) resizes(id, direction string) []api.ScalingEvent {
	var out []api.ScalingEvent
	for _, ev := range e.scaleEvents(id) {
		if d, ok := ev.Meta["gpushare.resize"].(string); ok && !ev.Error && (direction == "" || d == direction) {
			out = append(out, ev)
		}
	}
	return out
}

// waitResize waits for gpushare's scaling event of job id in direction,
// to count to (0: any), and checks its message.
func (e *env) waitResize(id, direction string, to int) api.ScalingEvent {
	e.t.Helper()
	var found api.ScalingEvent
	e.eventually(liveness, fmt.Sprintf("gpushare to %s %s to %d", direction, id, to), func() bool {
		for _, ev := range e.resizes(id, direction) {
			if ev.Count != nil && (to == 0 || int(*ev.Count) == to) {
				found = ev
				return true
			}
		}
		return false
	})
	verb := map[string]string{"grow": "grown", "shrink": "shrunk"}[direction]
	must.StrHasPrefix(e.t, fmt.Sprintf("gpushare: %s from %d to %d", verb, found.PreviousCount, *found.Count), found.Message)
	return found
}

// countOf is the count of job id's group g.
func (e *env) countOf(id string) int {
	job, _, err := e.nomad.Jobs().Info(id, nil)
	must.NoError(e.t, err)
	return *job.TaskGroups[0].Count
}

// stopped reports whether allocation id was stopped by Nomad (desired
// status stop or evict).
func (e *env) stopped(id string) bool {
	a, _, err := e.nomad.Allocations().Info(id, nil)
	return err == nil && a.DesiredStatus != api.AllocDesiredStatusRun
}

// elasticLayout counts the cluster's GPUs no running allocation of jobs
// holds (idle), and those held only by allocations of elastic job el of
// index 1 and above (freed when it shrinks to 1).
func (e *env) elasticLayout(grown []*api.Allocation, el string, jobs ...string) (idle, freed int, layout string) {
	holders := map[string][]string{} // GPU: allocation names
	for _, id := range append([]string{el}, jobs...) {
		for _, a := range e.runningNow(id) {
			for _, u := range gpus(a) {
				holders[u] = append(holders[u], a.Name)
			}
		}
	}
	var parts []string
	for u, names := range holders {
		slices.Sort(names)
		parts = append(parts, fmt.Sprintf("%s: %s", u, strings.Join(names, "+")))
		only := true
		for _, n := range names {
			only = only && strings.HasPrefix(n, el+".") && indexOf(n) >= 1
		}
		if only {
			freed++
		}
	}
	slices.Sort(parts)
	return 4*len(e.fixtures) - len(holders), freed, strings.Join(parts, "; ")
}

// indexOf is N of an allocation name "job.group[N]" (-1: none).
func indexOf(name string) int {
	i := strings.LastIndexByte(name, '[')
	var n int
	if i < 0 || !strings.HasSuffix(name, "]") {
		return -1
	}
	if _, err := fmt.Sscanf(name[i:], "[%d]", &n); err != nil {
		return -1
	}
	return n
}
