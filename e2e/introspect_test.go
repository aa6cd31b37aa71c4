package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// registerIntrospect submits testdata/introspect.nomad.hcl (a gated
// production job whose fixture processes report an SM utilisation) as id.
func (e *env) registerIntrospect(id string, vars map[string]any) {
	e.t.Helper()
	src, err := os.ReadFile(filepath.Join("testdata", "introspect.nomad.hcl"))
	must.NoError(e.t, err)
	var b strings.Builder
	for k, v := range vars {
		fmt.Fprintf(&b, "%s = %q\n", k, fmt.Sprint(v))
	}
	job, err := e.nomad.Jobs().ParseHCLOpts(&api.JobsParseRequest{JobHCL: string(src), Variables: b.String(), Canonicalize: true})
	must.NoError(e.t, err)
	job.ID, job.Name = &id, &id
	_, _, err = e.nomad.Jobs().Register(job, nil)
	must.NoError(e.t, err)
}

// Live introspection: two production jobs the scheduler paired on one
// fixture P100, where the older one's processes drop to 40% of their
// speed alone next to the newer one, are unpaired: the newer one's
// allocation is replaced onto another GPU. A good pair on a V100 is left
// alone.
func TestIntrospectionUnpairsSlowPair(t *testing.T) {
	e := newEnv(t)
	s := e.startScheduler("s1", `production_max_slowdown = 0.5
introspection {
  window  = "4s"
  samples = 2
}`)
	e.eventually(30*time.Second, "s1 leads", s.leader)
	bad := func(slowWith string) map[string]any {
		return map[string]any{"shares": 25, "model": modelP100, "class": "production", "sm_util": "0.5", "mem_bw": "0.1",
			"fixture_sm_util": 50, "slow_with": slowWith}
	}
	good := func(sm string) map[string]any {
		return map[string]any{"shares": 25, "model": modelV100, "class": "production", "sm_util": sm, "mem_bw": "0.1", "fixture_sm_util": 100 * atof(t, sm)}
	}
	e.registerIntrospect("good-a", good("0.3"))
	e.registerIntrospect("slow-a", bad("slow-b"))
	ga := e.running("good-a", 1, 60*time.Second)[0]
	sa := e.running("slow-a", 1, 60*time.Second)[0]
	e.registerIntrospect("good-b", good("0.2"))
	e.registerIntrospect("slow-b", bad(""))
	gb := e.running("good-b", 1, 60*time.Second)[0]
	sb := e.running("slow-b", 1, 60*time.Second)[0]
	must.Eq(t, gpus(ga), gpus(gb), must.Sprint("the good pair shares a GPU"))
	must.Eq(t, gpus(sa), gpus(sb), must.Sprint("the slow pair shares a GPU"))

	var moved *api.Allocation
	e.eventually(45*time.Second, "slow-b replaced onto another GPU", func() bool {
		now := e.runningNow("slow-b")
		if len(now) != 1 || now[0].ID == sb.ID {
			return false
		}
		moved = now[0]
		return true
	})
	must.NotEq(t, gpus(sa), gpus(moved))
	after := e.runningNow("slow-a")
	must.SliceLen(t, 1, after)
	must.Eq(t, sa.ID, after[0].ID, must.Sprint("the older job keeps running"))

	var st struct {
		Groups []struct {
			Unpaired *struct{ Reason string } `json:"unpaired"`
		}
	}
	must.NoError(t, getJSON(s.http+"/v1/jobs/slow-b", &st))
	must.NotNil(t, st.Groups[0].Unpaired)
	must.StrContains(t, st.Groups[0].Unpaired.Reason, "0.40x")
	var unpairs []struct{ Job string }
	must.NoError(t, getJSON(s.http+"/v1/unpairs", &unpairs))
	must.SliceLen(t, 1, unpairs, must.Sprint("only the slow pair was unpaired"))

	// the good pair ran together as long, and still does
	for id, was := range map[string]*api.Allocation{"good-a": ga, "good-b": gb} {
		now := e.runningNow(id)
		must.SliceLen(t, 1, now)
		must.Eq(t, was.ID, now[0].ID)
	}
}

func atof(t *testing.T, s string) float64 {
	var f float64
	_, err := fmt.Sscan(s, &f)
	must.NoError(t, err)
	return f
}
