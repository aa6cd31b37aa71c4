package cli

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/shoenig/test/must"
)

// status lists the groups the scheduler unpaired, and why.
func TestStatusShowsUnpairs(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		must.EqOp(t, "/v1/unpairs", r.URL.Path)
		_, _ = w.Write([]byte(`[{"namespace":"default","job":"b","group":"g","reason":"default/a/g runs at 0.40x of alone","at":"2026-11-23T18:00:00Z"}]`))
	}))
	defer srv.Close()
	var out strings.Builder
	renderUnpairs(IO{Out: &out, Err: &out}, scheduler{addr: srv.URL})
	must.StrContains(t, out.String(), "1 group(s) unpaired (moved off a shared GPU, newest first):\n  default/b/g  2026-11-23T18:00:00Z: default/a/g runs at 0.40x of alone")
	out.Reset()
	renderUnpairs(IO{Out: &out, Err: &out}, scheduler{addr: "http://127.0.0.1:1"})
	must.EqOp(t, "", out.String())
}
