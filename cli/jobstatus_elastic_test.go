package cli

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/shoenig/test/must"
)

// job status says of an elastic group why it was last grown or shrunk,
// and why it is or is not resized now; of a group the Autoscaler scales,
// that gpushare leaves it alone.
func TestJobStatusSaysWhyAnElasticGroupResized(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/gpus" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte(`{"namespace":"default","id":"train","groups":[
			{"name":"g","state":"pinned","elastic":{"managed":true,"min":1,"max":4,"registered":1,"count":2,
			 "why":"does not grow while a group waits for room (default/w/g, 1 in all): waiting work comes first",
			 "last":{"direction":"shrink","from":4,"to":2,"reason":"shrunk from 4 to 2: default/w/g waits for the shares its newest allocation(s) hold","at":"2026-11-28T15:40:00Z"}}},
			{"name":"auto","state":"pinned","elastic":{"managed":false,"min":1,"max":3,"why":"left to the Nomad Autoscaler: its scaling block has a policy"}}]}`))
	}))
	defer srv.Close()
	code, out, errOut := run("job", "status", "-scheduler", srv.URL, "train")
	must.EqOp(t, 0, code, must.Sprint(errOut))
	must.StrContains(t, out, "    elastic: count 2 (registered 1; scaling min 1, max 4)\n")
	must.StrContains(t, out, "      last shrink at 2026-11-28T15:40:00Z: shrunk from 4 to 2: default/w/g waits for the shares its newest allocation(s) hold\n")
	must.StrContains(t, out, "      now: does not grow while a group waits for room")
	must.StrContains(t, out, "    elastic: not resized by gpushare: left to the Nomad Autoscaler")
}
