package service

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gpushare/gpushare/scheduler/config"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// A group gpushare does not follow says why (/v1/jobs/<id> reason, the
// job's page): it asks for no gpushare device; it asks for shares without
// the gate and adopt_ungated is off; or Nomad placed it as it was, so it
// was not adopted.
func TestNotGPUShareSaysWhy(t *testing.T) {
	for _, c := range []struct {
		name  string
		adopt bool
		edit  func(*api.Job)
		want  string
	}{
		{"no device", true, func(j *api.Job) { j.TaskGroups[0].Tasks[0].Resources.Devices = nil }, "asks for no nvidia/gpushare device"},
		{"adopt off", false, func(*api.Job) {}, "adopt_ungated is off"},
		{"not adopted", true, func(*api.Job) {}, "so gpushare did not adopt it"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
			j := gated("plain", 25)
			j.TaskGroups[0].Constraints = nil // no gate
			c.edit(j)
			f.put(j)
			cfg := config.Default()
			cfg.AdoptUngated = ptr(c.adopt)
			must.NoError(t, cfg.Validate())
			s, err := newService(cfg, hclog.NewNullLogger(), f, func() time.Time { return time.Unix(1000, 0) })
			must.NoError(t, err)
			must.NoError(t, s.watcher.resync(t.Context()))
			s.loop.reconcile(t.Context())
			var st JobStatus
			getJSON(t, s, "/v1/jobs/plain?namespace=default", &st)
			must.Len(t, 1, st.Groups)
			must.EqOp(t, "not-gpushare", st.Groups[0].State)
			must.StrContains(t, st.Groups[0].Reason, c.want)

			rr := httptest.NewRecorder()
			s.Handler().ServeHTTP(rr, apiRequest("GET", "/ui/jobs/plain?namespace=default", nil))
			must.EqOp(t, 200, rr.Code)
			must.StrContains(t, rr.Body.String(), "Not followed by gpushare: Nomad alone places it.")
			must.StrContains(t, rr.Body.String(), "Why gpushare does not follow it")
			must.StrContains(t, rr.Body.String(), c.want)
		})
	}
}
