package cli

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/shoenig/test/must"
)

// gpushare status counts the groups that wait and the groups refused for
// good apart, and shows their reasons as users read them: job IDs
// unescaped, allocation IDs of 8 characters, no "learned:".
func TestStatusCountsWaitingAndRefusedApart(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`[
{"namespace":"default","job":"a","group":"g","state":"pending","reason":"no room: behind default/nightly%2Fperiodic-1/g"},
{"namespace":"default","job":"b","group":"g","state":"pending","reason":"would preempt allocation 4f1c2d3e-aaaa-bbbb-cccc-0123456789ab"},
{"namespace":"default","job":"c","group":"g","state":"pending","reason":"pairs learned:default/train/g with sm 0.50/bw 0.30"},
{"namespace":"default","job":"huge","group":"g","state":"refused","reason":"larger than any node: needs 16 GPUs"},
{"namespace":"default","job":"huge2","group":"g","state":"refused","reason":"larger than any node: needs 12 GPUs"}]`))
	}))
	defer srv.Close()
	var out strings.Builder
	must.True(t, renderWaiting(IO{Out: &out, Err: &out}, scheduler{addr: srv.URL, how: "-scheduler"}))
	got := out.String()
	must.StrContains(t, got, "\n3 group(s) wait for gpushare:\n  default/a/g  pending: no room: behind default/nightly/periodic-1/g\n")
	must.StrContains(t, got, "  default/b/g  pending: would preempt allocation 4f1c2d3e\n")
	must.StrContains(t, got, "  default/c/g  pending: pairs the profile learned from default/train/g with sm 0.50/bw 0.30\n")
	must.StrContains(t, got, "\n2 group(s) refused for good (they never run as they are: change them):\n  default/huge/g  refused")
	must.StrNotContains(t, got, "5 group(s)")
	must.StrNotContains(t, got, "learned:")
	must.StrNotContains(t, got, "%2F")
}
