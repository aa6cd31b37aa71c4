package plugin

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/fixtures"
	"github.com/gpushare/gpushare/internal/nomadplugin/base"
	"github.com/hashicorp/go-hclog"
	"github.com/shoenig/test/must"
)

// mpsPipe makes dir/control a FIFO; with reader, the test holds it open for
// reading as a running control daemon does, until the test ends.
func mpsPipe(t *testing.T, dir string, reader bool) {
	t.Helper()
	pipe := filepath.Join(dir, "control")
	must.NoError(t, syscall.Mkfifo(pipe, 0o600))
	if reader {
		fd, err := syscall.Open(pipe, syscall.O_RDONLY|syscall.O_NONBLOCK, 0)
		must.NoError(t, err)
		t.Cleanup(func() { syscall.Close(fd) })
	}
}

func TestCheckMPSDaemon(t *testing.T) {
	none := filepath.Join(t.TempDir(), "nvidia-mps")
	st := checkMPSDaemon(none)
	must.Eq(t, "not found at "+none, st.State)
	must.StrContains(t, st.Health, "MPS control daemon not found at "+none+": tasks run time-sliced, without MPS (start it with CUDA_MPS_PIPE_DIRECTORY="+none+" nvidia-cuda-mps-control -d")

	file := t.TempDir()
	must.NoError(t, os.WriteFile(filepath.Join(file, "control"), nil, 0o600))
	st = checkMPSDaemon(file)
	must.Eq(t, "not a pipe: "+filepath.Join(file, "control"), st.State)
	must.StrContains(t, st.Health, "is neither a socket nor a named pipe")

	// the pipe a daemon left behind: nobody reads it
	stale := t.TempDir()
	mpsPipe(t, stale, false)
	st = checkMPSDaemon(stale)
	must.Eq(t, "not answering at "+stale, st.State)
	must.StrContains(t, st.Health, "no daemon reads it")

	// current drivers listen on a SOCK_SEQPACKET socket
	sock := t.TempDir()
	l, err := net.Listen("unixpacket", filepath.Join(sock, "control"))
	must.NoError(t, err)
	must.Eq(t, "running", checkMPSDaemon(sock).State)
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	must.NoError(t, l.Close())
	must.Eq(t, "not answering at "+sock, checkMPSDaemon(sock).State)

	live := t.TempDir()
	mpsPipe(t, live, true)
	st = checkMPSDaemon(live)
	must.Eq(t, mpsStatus{State: "running", Health: "MPS control daemon answers at " + live}, st)
	must.True(t, st.running())
}

// With sharing = "mps" every fingerprint says how the daemon is: in the
// mps_daemon attribute and in the shares' health description, which stay
// healthy. A daemon that starts later shows up in the next fingerprint.
func TestFingerprintReportsMPSDaemon(t *testing.T) {
	dir := t.TempDir()
	p, _, first := newPlugin(t, fixtures.PCIe4GPU, fmt.Sprintf("mps {\n daemons = \"node\"\n pipe_directory = %q\n}", dir))
	g := first.Devices[0]
	must.Eq(t, "not found at "+dir, *g.Attributes[AttrMPSDaemon].String)
	for _, d := range g.Devices {
		must.True(t, d.Healthy)
		must.StrContains(t, d.HealthDesc, "MPS control daemon not found at "+dir)
	}
	// the attribute does not disturb what the scheduler decodes
	decoded, err := devicefn.DecodeGroup(g.Name, fromSDKAttributes(g.Attributes))
	must.NoError(t, err)
	must.SliceLen(t, 4, decoded.GPUs)

	ch, err := p.Fingerprint(t.Context())
	must.NoError(t, err)
	next(t, ch)
	mpsPipe(t, dir, true)
	fp := next(t, ch)
	g = fp.Devices[0]
	must.Eq(t, "running", *g.Attributes[AttrMPSDaemon].String)
	must.Eq(t, "MPS control daemon answers at "+dir, g.Devices[0].HealthDesc)
	must.True(t, g.Devices[0].Healthy)
}

// Without MPS there is no daemon to check: no attribute, no note.
func TestFingerprintWithoutMPSSaysNothing(t *testing.T) {
	_, _, fp := newPlugin(t, fixtures.PCIe4GPU, `sharing = "timeslice"`)
	g := fp.Devices[0]
	_, ok := g.Attributes[AttrMPSDaemon]
	must.False(t, ok)
	must.Eq(t, "", g.Devices[0].HealthDesc)
}

// The daemon's state is logged when it changes, not every fingerprint.
func TestNoteMPSLogsChanges(t *testing.T) {
	var buf strings.Builder
	p := New(hclog.New(&hclog.LoggerOptions{Output: &buf}), nil)
	gone := checkMPSDaemon(filepath.Join(t.TempDir(), "none"))
	p.noteMPS(gone)
	p.noteMPS(gone)
	must.Eq(t, 1, strings.Count(buf.String(), "[WARN]  gpushare: MPS control daemon not usable; shares stay healthy but run without MPS"), must.Sprint(buf.String()))
	p.noteMPS(mpsStatus{State: mpsRunning, Health: "MPS control daemon answers at /x"})
	must.StrContains(t, buf.String(), "[INFO]  gpushare: MPS control daemon answers: detail=\"MPS control daemon answers at /x\"")
}

// With per-reservation daemons a failed probe is an error: the shares are
// offered unhealthy.
func TestNoteMPSLogsReservationFailure(t *testing.T) {
	var buf strings.Builder
	p := New(hclog.New(&hclog.LoggerOptions{Output: &buf}), nil)
	must.NoError(t, p.SetConfig(&base.Config{PluginConfig: encodeConfig(t, "")}))
	p.noteMPS(mpsStatus{State: "control not found: x", Health: "MPS: cannot start per-reservation control daemons"})
	must.StrContains(t, buf.String(), "[ERROR] gpushare: MPS control daemons cannot be started; shares are offered unhealthy until they can")
}
