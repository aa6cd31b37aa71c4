package webui

import (
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
