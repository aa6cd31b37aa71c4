package webui

import (
	"strings"
	"testing"
	"time"

	"github.com/gpushare/gpushare/scheduler/gpumap"
	"github.com/shoenig/test/must"
)

// The page shows reasons as users read them (internal/usertext.Reason):
// job IDs unescaped, 8-character allocation IDs, no "learned:".
func TestOverviewShowsReasonsForUsers(t *testing.T) {
	body := render(t, Overview{Map: &gpumap.Map{}, Now: time.Unix(0, 0),
		Waiting: []Group{{Namespace: "default", Job: "a", Group: "g", Position: 1, Of: 1,
			Reason: "behind default/nightly%2Fperiodic-1/g; would preempt allocation 4f1c2d3e-aaaa-bbbb-cccc-0123456789ab"}},
		Refused: []Group{{Namespace: "default", Job: "b", Group: "g", Reason: "pairs learned:default/train/g with sm 0.50/bw 0.30"}}})
	must.StrContains(t, body, "behind default/nightly/periodic-1/g; would preempt allocation 4f1c2d3e<")
	must.StrContains(t, body, "pairs the profile learned from default/train/g with sm 0.50/bw 0.30")
	must.StrNotContains(t, body, "%2F")
	must.StrNotContains(t, body, "learned:")
	must.StrNotContains(t, body, "4f1c2d3e-aaaa")
}

// A job's page shows its reasons as the CLI does (gpushare job status):
// why a group waits, its lifecycle's reason, why it was last unpaired,
// and why a child waits on its parent's page; and the map's problems on
// the overview.
func TestJobPageShowsReasonsForUsers(t *testing.T) {
	raw := "behind default/nightly%2Fperiodic-1/g; would preempt allocation 4f1c2d3e-aaaa-bbbb-cccc-0123456789ab; pairs learned:default/train/g"
	body := render(t, Job{Namespace: "default", ID: "nightly", Now: time.Unix(0, 0),
		Family: Family{Kind: "periodic", ChildCount: 1, Children: []Child{{ID: "nightly/periodic-2", Status: "pending", Waits: raw}}},
		Groups: []JobGroup{{Name: "g", State: "pending", Lifecycle: "waiting", LifecycleWhy: raw, Reason: raw,
			Unpaired: &Event{Reason: raw, At: time.Unix(0, 0)}}}})
	must.EqOp(t, 4, strings.Count(body, "behind default/nightly/periodic-1/g; would preempt allocation 4f1c2d3e; pairs the profile learned from default/train/g"), must.Sprint(body))
	must.StrNotContains(t, body, "%2Fperiodic-1") // the child's link escapes its own ID, as links must
	must.StrNotContains(t, body, "learned:")
	must.StrNotContains(t, body, "4f1c2d3e-aaaa")

	body = render(t, Overview{Map: &gpumap.Map{Problems: []string{"node a: allocation 4f1c2d3e-aaaa-bbbb-cccc-0123456789ab holds an unknown share"}}, Now: time.Unix(0, 0)})
	must.StrContains(t, body, "allocation 4f1c2d3e holds")
}
