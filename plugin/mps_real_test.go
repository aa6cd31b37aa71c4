package plugin

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shoenig/test/must"
)

// realMPSControl is NVIDIA's nvidia-cuda-mps-control when installed
// (Debian's nvidia-cuda-mps; .ci/run installs it). It starts, and its
// control socket answers, without a GPU.
func realMPSControl(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("nvidia-cuda-mps-control")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("nvidia-cuda-mps-control not found in CI (.ci/run installs nvidia-cuda-mps): %v", err)
		}
		t.Skipf("nvidia-cuda-mps-control not installed (apt-get install nvidia-cuda-mps from Debian non-free): %v", err)
	}
	return path
}

// The real control daemon, started by Reserve, holds the reservation's
// limits as its defaults; it is quit when nothing uses it any more.
func TestRealMPSDaemonPerReservation(t *testing.T) {
	control := realMPSControl(t)
	p, f, _, fp := mpsdPlugin(t, control, "")
	must.Eq(t, "running", *fp.Devices[0].Attributes[AttrMPSDaemon].String)

	res, err := p.Reserve(shares(3, 10, 35))
	must.NoError(t, err)
	pipe := res.Envs[EnvMPSPipe]
	t.Cleanup(func() { _, _ = mpsRun(context.Background(), control, pipe, "quit") })
	must.Eq(t, "25.0", mustRun(t, control, pipe, "get_default_active_thread_percentage"))
	must.Eq(t, "4G", mustRun(t, control, pipe, "get_default_device_pinned_mem_limit 0"))
	must.Eq(t, "running", checkMPSDaemon(pipe).State, must.Sprint("the control socket of a current driver"))
	// the daemon writes its log itself, on its own time: wait for the line
	// (the bound is liveness only)
	waitForFileLine(t, filepath.Join(res.Envs[EnvMPSLog], "control.log"),
		"Starting control daemon using socket "+filepath.Join(pipe, "control"), 30*time.Second)

	// a task changes its daemon's default through the pipe; the next pass
	// puts it back
	mustRun(t, control, pipe, "set_default_active_thread_percentage 100")
	p.collectMPSDaemons(t.Context(), p.cfg.MPS, time.Hour, time.Now())
	must.Eq(t, "25.0", mustRun(t, control, pipe, "get_default_active_thread_percentage"))

	// reserved two hours ago, used by nothing: quit and removed
	p.collectMPSDaemons(t.Context(), p.cfg.MPS, time.Hour, time.Now().Add(2*time.Hour))
	_, err = os.Stat(pipe)
	must.True(t, os.IsNotExist(err))
	_, err = mpsRun(t.Context(), control, pipe, "get_default_active_thread_percentage")
	must.Error(t, err)
	must.SliceEmpty(t, f.lines(t), must.Sprint("the fake was not used"))
}

// The node daemon's check (mps { daemons = "node" }) on the real
// daemon's socket: running, then left over after quit.
func TestRealMPSNodeDaemonCheck(t *testing.T) {
	control := realMPSControl(t)
	dir := shortTempDir(t)
	pipe := filepath.Join(dir, "pipe")
	t.Cleanup(func() { _, _ = mpsRun(context.Background(), control, pipe, "quit") })
	must.NoError(t, mpsStart(t.Context(), control, dir, mpsLimits{Threads: 100}))
	must.Eq(t, "running", checkMPSDaemon(pipe).State)
	mustRun(t, control, pipe, "quit")
	must.Eq(t, "not answering at "+pipe, checkMPSDaemon(pipe).State)
}

// waitForFileLine waits until the file at path, which another process
// writes, contains line; within bound, which is a liveness bound only.
func waitForFileLine(t *testing.T, path, line string, bound time.Duration) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for {
		b, err := os.ReadFile(path)
		if err == nil && strings.Contains(string(b), line) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v, %s does not contain %q (read error %v):\n%s", bound, path, line, err, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
