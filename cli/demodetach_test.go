package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shoenig/test/must"
)

// gpushare demo -detach / -stop: the flags, and their help.
func TestDemoDetachFlags(t *testing.T) {
	code, _, errOut := run("demo", "-h")
	must.EqOp(t, 0, code)
	must.StrContains(t, errOut, "-detach")
	must.StrContains(t, errOut, "runs until gpushare demo -stop (make demo-up / demo-down)")
	must.StrContains(t, errOut, "-stop")
	must.StrContains(t, errOut, "-state")

	code, _, errOut = run("demo", "-detach", "-stop")
	must.EqOp(t, 1, code)
	must.StrContains(t, errOut, "give one of them")
	code, _, errOut = run("demo", "-keep", "extra")
	must.EqOp(t, 1, code)
	must.StrContains(t, errOut, `unexpected argument "extra"`)

	state := t.TempDir()
	code, _, errOut = run("demo", "-stop", "-state", state)
	must.EqOp(t, 1, code)
	must.StrContains(t, errOut, "no detached demo runs: no "+filepath.Join(state, "demo.pid"))
}

// A detached demo runs in a session of its own, with its pid and output
// in the state directory; -detach returns once it says the cluster is up,
// and -stop ends it. (A shell stands in for `gpushare demo -keep`.)
func TestDemoDetachStartsAndStops(t *testing.T) {
	state := t.TempDir()
	child := []string{"sh", "-c", `echo "==> starting the cluster"; printf 'export NOMAD_ADDR=x' > "$GPUSHARE_DEMO_READY"
trap 'echo "==> stopping the cluster"; exit 0' TERM
while :; do sleep 0.1; done`}
	var out strings.Builder
	must.NoError(t, startDetached(state, child, IO{Out: &out, Err: &out}))
	must.StrContains(t, out.String(), "==> starting the cluster\n")
	must.StrContains(t, out.String(), "==> the demo runs in the background: pid ")
	must.StrContains(t, out.String(), "stop it with: gpushare demo -stop -state "+state)
	pid, running := demoRunning(state)
	must.True(t, running)
	must.Positive(t, pid)

	err := startDetached(state, child, IO{Out: &out, Err: &out})
	must.ErrorContains(t, err, "a detached demo already runs")

	out.Reset()
	must.NoError(t, stopDetached(state, 10*time.Second, IO{Out: &out, Err: &out}))
	must.StrContains(t, out.String(), "stopped; its output stays in")
	_, running = demoRunning(state)
	must.False(t, running)
	_, err = os.Stat(filepath.Join(state, "demo.pid"))
	must.True(t, os.IsNotExist(err))
	log, err := os.ReadFile(filepath.Join(state, "demo.log"))
	must.NoError(t, err)
	must.StrContains(t, string(log), "==> stopping the cluster")

	// a demo that ends before the cluster is up: its output, and a failure
	out.Reset()
	err = startDetached(state, []string{"sh", "-c", "echo no Nomad binary found; exit 1"}, IO{Out: &out, Err: &out})
	must.ErrorContains(t, err, "the demo ended before the cluster was up")
	must.StrContains(t, out.String(), "no Nomad binary found")
	_, running = demoRunning(state)
	must.False(t, running)
}
