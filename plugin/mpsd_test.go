package plugin

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpushare/gpushare/fixtures"
	"github.com/gpushare/gpushare/internal/nomadplugin/base"
	"github.com/gpushare/gpushare/internal/nomadplugin/device"
	"github.com/hashicorp/go-hclog"
	"github.com/shoenig/test/must"
)

// fakeMPS is testdata/fake-mps-control, and the file it records the
// starts and commands it was sent in.
type fakeMPS struct {
	control, record string
	// held is what the plugin's mpsHolders reports: keys in use.
	held map[string]bool
}

// lines is the record: "<pipe>: <command>" lines.
func (f *fakeMPS) lines(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(f.record)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	must.NoError(t, err)
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

// count is how many times pipe got command.
func (f *fakeMPS) count(t *testing.T, pipe, command string) int {
	n := 0
	for _, l := range f.lines(t) {
		if l == pipe+": "+command {
			n++
		}
	}
	return n
}

// shortTempDir is a temporary directory with a path short enough for
// daemon_dir, removed with every fake daemon under it.
func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "mpsd")
	must.NoError(t, err)
	t.Cleanup(func() {
		_ = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
			if err == nil && d.Name() == "fake-pid" {
				if b, err := os.ReadFile(path); err == nil {
					if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
						_ = syscall.Kill(pid, syscall.SIGKILL)
					}
				}
			}
			return nil
		})
		os.RemoveAll(dir)
	})
	return dir
}

// mpsdPlugin is a DGX-1 plugin with per-reservation daemons run by
// control (the fake when empty) under a fresh daemon_dir, fingerprinted
// once (no loop: the tests drive collection themselves).
func mpsdPlugin(t *testing.T, control, extra string) (*Plugin, *fakeMPS, string, *device.FingerprintResponse) {
	t.Helper()
	wd, err := os.Getwd()
	must.NoError(t, err)
	f := &fakeMPS{control: filepath.Join(wd, "testdata", "fake-mps-control"), held: map[string]bool{}}
	if control == "" {
		control = f.control
	}
	f.record = filepath.Join(t.TempDir(), "record")
	t.Setenv("FAKE_MPS_RECORD", f.record)
	daemonDir := filepath.Join(shortTempDir(t), "d")
	path, err := fixtures.WriteTo(fixtures.DGX1V100, t.TempDir())
	must.NoError(t, err)
	p := New(hclog.NewNullLogger(), nil)
	p.exists = func(string) bool { return false }
	p.mpsHolders = func(string, map[string]bool) map[string]bool { return f.held }
	cfg := fmt.Sprintf("fixture = %q\nmps {\n control = %q\n daemon_dir = %q\n%s\n}", path, control, daemonDir, extra)
	must.NoError(t, p.SetConfig(&base.Config{PluginConfig: encodeConfig(t, cfg)}))
	fp := p.fingerprintOnce(t.Context())
	must.NoError(t, fp.Error)
	return p, f, daemonDir, fp
}

// envFile reads the environment the fake daemon was started with.
func envFile(t *testing.T, logDir string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(logDir, "fake-env"))
	must.NoError(t, err)
	env := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			env[k] = v
		}
	}
	return env
}

func killDaemon(t *testing.T, pipe string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(pipe, "fake-pid"))
	must.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	must.NoError(t, err)
	must.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	// until the kernel says it is gone or a zombie; the bound is liveness only
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil || strings.Contains(string(st), ") Z ") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the fake daemon %d still runs a minute after SIGKILL: %s", pid, st)
		}
	}
}

// Two tasks on one GPU with different fractions get a daemon each, whose
// defaults (set in its environment and by command) are their limits; the
// pipe is mounted at CUDA's default path too, for a task that clears
// CUDA_MPS_PIPE_DIRECTORY. The plugin's own CUDA_MPS_* do not leak in.
func TestReserveStartsADaemonPerReservation(t *testing.T) {
	t.Setenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "100")
	p, f, daemonDir, fp := mpsdPlugin(t, "", "")
	g := fp.Devices[0]
	must.Eq(t, "running", *g.Attributes[AttrMPSDaemon].String)
	must.True(t, g.Devices[0].Healthy)
	must.StrContains(t, g.Devices[0].HealthDesc, "MPS: one control daemon per reservation")
	must.Eq(t, 1, f.count(t, filepath.Join(daemonDir, "probe", "pipe"), "-d"), must.Sprint(f.lines(t)))
	_, err := os.Stat(filepath.Join(daemonDir, "probe"))
	must.True(t, os.IsNotExist(err), must.Sprint("the probe cleans up"))

	quarter, err := p.Reserve(shares(3, 10, 35))
	must.NoError(t, err)
	half, err := p.Reserve(shares(3, 50, 100))
	must.NoError(t, err)

	qDir := filepath.Join(daemonDir, mpsKey(v100+"3_10-34"))
	qPipe := filepath.Join(qDir, "pipe")
	must.Eq(t, qPipe, quarter.Envs[EnvMPSPipe])
	must.Eq(t, filepath.Join(qDir, "log"), quarter.Envs[EnvMPSLog])
	must.Eq(t, "25", quarter.Envs[EnvMPSThreads])
	must.Eq(t, "0=4096M", quarter.Envs[EnvMPSPinnedMemory])
	hidden := filepath.Join(daemonDir, "privileged-hidden")
	must.Eq(t, []*device.Mount{
		{TaskPath: qPipe, HostPath: qPipe},
		{TaskPath: "/tmp/nvidia-mps", HostPath: qPipe},
		{TaskPath: filepath.Join(qPipe, "control_privileged"), HostPath: hidden, ReadOnly: true},
		{TaskPath: "/tmp/nvidia-mps/control_privileged", HostPath: hidden, ReadOnly: true},
		{TaskPath: filepath.Join(qDir, "log"), HostPath: filepath.Join(qDir, "log"), ReadOnly: true},
	}, quarter.Mounts)
	must.Eq(t, 0o444, mode(t, hidden))
	st, err := os.Stat(hidden)
	must.NoError(t, err)
	must.Zero(t, st.Size())
	env := envFile(t, filepath.Join(qDir, "log"))
	must.Eq(t, v100+"3", env["CUDA_VISIBLE_DEVICES"])
	must.Eq(t, "25", env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"])
	must.Eq(t, "0=4096M", env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"])
	must.Eq(t, qPipe, env["CUDA_MPS_PIPE_DIRECTORY"])
	must.Eq(t, 1, f.count(t, qPipe, "set_default_active_thread_percentage 25"))
	must.Eq(t, 1, f.count(t, qPipe, "set_default_device_pinned_mem_limit 0 4096M"))
	must.Eq(t, os.ModeDir|0o755, mode(t, qPipe))

	hPipe := half.Envs[EnvMPSPipe]
	must.NotEq(t, qPipe, hPipe)
	must.Eq(t, "50", envFile(t, filepath.Join(filepath.Dir(hPipe), "log"))["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"])
	must.Eq(t, 1, f.count(t, hPipe, "set_default_active_thread_percentage 50"))
	must.Eq(t, "50.0", mustRun(t, f.control, hPipe, "get_default_active_thread_percentage"))
	must.Eq(t, "25.0", mustRun(t, f.control, qPipe, "get_default_active_thread_percentage"))

	// whole GPUs: one daemon for both, all their threads and memory
	whole, err := p.Reserve(append(shares(4, 0, 100), shares(0, 0, 100)...))
	must.NoError(t, err)
	env = envFile(t, filepath.Join(filepath.Dir(whole.Envs[EnvMPSPipe]), "log"))
	must.Eq(t, v100+"0,"+v100+"4", env["CUDA_VISIBLE_DEVICES"])
	must.Eq(t, "100", env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"])
	must.Eq(t, "0=16384M,1=16384M", env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"])
	must.Eq(t, 1, f.count(t, whole.Envs[EnvMPSPipe], "set_default_device_pinned_mem_limit 1 16384M"))
}

func mustRun(t *testing.T, control, pipe, cmd string) string {
	t.Helper()
	out, err := mpsRun(t.Context(), control, pipe, cmd)
	must.NoError(t, err)
	return out
}

// The same shares again (a restarted task) reuse a running daemon and set
// its limits again; a daemon that died is started again.
func TestReserveReusesOrRestartsTheDaemon(t *testing.T) {
	p, f, _, _ := mpsdPlugin(t, "", "")
	ids := shares(2, 0, 25)
	res, err := p.Reserve(ids)
	must.NoError(t, err)
	pipe := res.Envs[EnvMPSPipe]
	// a task raised the default through the pipe
	mustRun(t, f.control, pipe, "set_default_active_thread_percentage 100")

	res2, err := p.Reserve(ids)
	must.NoError(t, err)
	must.Eq(t, pipe, res2.Envs[EnvMPSPipe])
	must.Eq(t, 1, f.count(t, pipe, "-d"))
	must.Eq(t, "25.0", mustRun(t, f.control, pipe, "get_default_active_thread_percentage"))

	killDaemon(t, pipe)
	_, err = p.Reserve(ids)
	must.NoError(t, err)
	must.Eq(t, 2, f.count(t, pipe, "-d"))
	must.Eq(t, "25.0", mustRun(t, f.control, pipe, "get_default_active_thread_percentage"))
}

// Nomad hands a share to one allocation at a time: when shares of a
// daemon's reservation are reserved again in another combination, that
// reservation has ended and its daemon is quit and removed.
func TestReserveStopsTheDaemonOfAnEndedReservation(t *testing.T) {
	p, f, _, _ := mpsdPlugin(t, "", "")
	old, err := p.Reserve(shares(1, 0, 25))
	must.NoError(t, err)
	other, err := p.Reserve(shares(1, 50, 60))
	must.NoError(t, err)
	_, err = p.Reserve(shares(1, 10, 35))
	must.NoError(t, err)
	must.Eq(t, 1, f.count(t, old.Envs[EnvMPSPipe], "quit -t 5"))
	_, err = os.Stat(filepath.Dir(old.Envs[EnvMPSPipe]))
	must.True(t, os.IsNotExist(err))
	must.Eq(t, 0, f.count(t, other.Envs[EnvMPSPipe], "quit -t 5"))
	must.Eq(t, "10.0", mustRun(t, f.control, other.Envs[EnvMPSPipe], "get_default_active_thread_percentage"))
}

// Without the control binary the shares are offered unhealthy, saying why,
// and Reserve refuses rather than hand out a share MPS would not hold.
func TestMPSControlMissing(t *testing.T) {
	missing := "/nonexistent/nvidia-cuda-mps-control"
	p, _, _, fp := mpsdPlugin(t, missing, "")
	g := fp.Devices[0]
	must.Eq(t, "control not found: "+missing, *g.Attributes[AttrMPSDaemon].String)
	for _, d := range g.Devices {
		must.False(t, d.Healthy)
		must.StrContains(t, d.HealthDesc, "MPS: cannot start per-reservation control daemons")
		must.StrContains(t, d.HealthDesc, "install the NVIDIA driver's MPS tools (Debian: nvidia-cuda-mps)")
	}
	_, err := p.Reserve(shares(3, 0, 25))
	must.True(t, errors.Is(err, ErrMPSDaemon))
	must.ErrorContains(t, err, "cannot start the reservation's MPS control daemon for "+v100+"3:0")
	must.ErrorContains(t, err, missing)
}

// A daemon that cannot start, or does not take its limits, fails Reserve
// with what it said, and makes the next fingerprint probe again.
func TestMPSDaemonFailsToStart(t *testing.T) {
	p, f, _, _ := mpsdPlugin(t, "", "")
	t.Setenv("FAKE_MPS_FAIL", "no CUDA-capable device is detected")
	_, err := p.Reserve(shares(3, 0, 25))
	must.True(t, errors.Is(err, ErrMPSDaemon))
	must.ErrorContains(t, err, "fake: no CUDA-capable device is detected")
	must.ErrorContains(t, err, "its log: ")
	p.mu.Lock()
	must.Nil(t, p.mpsProbe)
	p.mu.Unlock()
	fp := p.fingerprintOnce(t.Context())
	must.StrHasPrefix(t, "cannot start "+f.control, *fp.Devices[0].Attributes[AttrMPSDaemon].String)
	must.False(t, fp.Devices[0].Devices[0].Healthy)

	t.Setenv("FAKE_MPS_FAIL", "")
	t.Setenv("FAKE_MPS_STUCK", "1")
	_, err = p.Reserve(shares(3, 0, 25))
	must.ErrorContains(t, err, "says its default active thread percentage is \"100.0\", not 25")
	// a daemon without its limits serves no one: quit, and not restarted
	// by the collector, which removes its directory after gc_after
	dir := filepath.Join(p.cfg.MPS.DaemonDir, mpsKey(v100+"3_0-24"))
	pipe := filepath.Join(dir, "pipe")
	must.Eq(t, 1, f.count(t, pipe, "quit -t 5"))
	p.collectMPSDaemons(t.Context(), p.cfg.MPS, time.Hour, time.Now())
	must.Eq(t, 2, f.count(t, pipe, "-d"), must.Sprint("the failed start and the stuck one, no third"))
	must.True(t, fileExists(filepath.Join(dir, "log", "start.out")))
	p.collectMPSDaemons(t.Context(), p.cfg.MPS, time.Hour, time.Now().Add(2*time.Hour))
	must.False(t, fileExists(dir))
}

// The fingerprint loop's pass over the daemons: stop what nothing uses,
// restart what died while in use, restore limits a task changed.
func TestCollectMPSDaemons(t *testing.T) {
	p, f, _, _ := mpsdPlugin(t, "", "")
	m := p.cfg.MPS
	reserve := func(ids []string) string {
		res, err := p.Reserve(ids)
		must.NoError(t, err)
		return res.Envs[EnvMPSPipe]
	}
	age := func(pipe string, d time.Duration) {
		old := time.Now().Add(-d)
		must.NoError(t, os.Chtimes(filepath.Dir(pipe), old, old))
	}
	exists := func(pipe string) bool { _, err := os.Stat(pipe); return err == nil }

	recent := reserve(shares(0, 0, 10))
	unused := reserve(shares(1, 0, 10))
	mounted := reserve(shares(2, 0, 10))
	clients := reserve(shares(3, 0, 10))
	diedInUse := reserve(shares(4, 0, 10))
	diedUnused := reserve(shares(5, 0, 10))
	for _, pipe := range []string{unused, mounted, clients, diedUnused} {
		age(pipe, 2*time.Hour)
	}
	f.held[filepath.Base(filepath.Dir(mounted))] = true
	must.NoError(t, os.WriteFile(filepath.Join(clients, "fake-servers"), []byte("4242\n"), 0o644))
	must.NoError(t, os.WriteFile(filepath.Join(clients, "fake-clients-4242"), []byte("5151\n"), 0o644))
	killDaemon(t, diedInUse)
	killDaemon(t, diedUnused)
	// a task raised its daemon's default and its server's percentage
	mustRun(t, f.control, recent, "set_default_active_thread_percentage 100")
	must.NoError(t, os.WriteFile(filepath.Join(recent, "fake-servers"), []byte("77\n"), 0o644))
	must.NoError(t, os.WriteFile(filepath.Join(recent, "fake-server-77"), []byte("100.0\n"), 0o644))

	p.collectMPSDaemons(t.Context(), m, time.Hour, time.Now())

	must.True(t, exists(recent))
	must.Eq(t, "10.0", mustRun(t, f.control, recent, "get_default_active_thread_percentage"))
	must.Eq(t, 1, f.count(t, recent, "set_active_thread_percentage 77 10"))
	must.False(t, exists(unused))
	must.Eq(t, 1, f.count(t, unused, "quit -t 5"))
	must.True(t, exists(mounted))
	must.Eq(t, 0, f.count(t, mounted, "quit -t 5"))
	must.True(t, exists(clients))
	must.Eq(t, 0, f.count(t, clients, "quit -t 5"))
	must.Eq(t, 2, f.count(t, diedInUse, "-d"))
	must.Eq(t, "10.0", mustRun(t, f.control, diedInUse, "get_default_active_thread_percentage"))
	must.False(t, exists(diedUnused))
	must.Eq(t, 1, f.count(t, diedUnused, "-d"))

	// the fingerprint runs the pass at most every mpsGCEvery
	p.lastMPSGC = time.Time{}
	age(recent, 2*time.Hour)
	p.fingerprintOnce(t.Context())
	must.False(t, exists(recent))
	p.fingerprintOnce(t.Context())
}

// procHolders finds a daemon directory mounted into a task (exec, docker)
// or named in a process's environment (raw_exec).
func TestProcHolders(t *testing.T) {
	root := t.TempDir()
	proc := func(pid, file, content string) {
		must.NoError(t, os.MkdirAll(filepath.Join(root, pid), 0o755))
		must.NoError(t, os.WriteFile(filepath.Join(root, pid, file), []byte(content), 0o644))
	}
	proc("10", "mountinfo", "22 1 0:21 / /run rw - tmpfs tmpfs rw\n"+
		"812 790 0:21 /gpushare-mps/aaaaaaaaaaaaaaaa/pipe /tmp/nvidia-mps rw,nosuid - tmpfs tmpfs rw\n")
	proc("11", "environ", "PATH=/bin\x00CUDA_MPS_PIPE_DIRECTORY=/run/gpushare-mps/bbbbbbbbbbbbbbbb/pipe\x00")
	proc("12", "environ", "CUDA_MPS_PIPE_DIRECTORY=/elsewhere/cccccccccccccccc/pipe\x00")
	proc("self", "environ", "CUDA_MPS_PIPE_DIRECTORY=/run/gpushare-mps/cccccccccccccccc/pipe\x00")
	keys := map[string]bool{"aaaaaaaaaaaaaaaa": true, "bbbbbbbbbbbbbbbb": true, "cccccccccccccccc": true}
	must.Eq(t, map[string]bool{"aaaaaaaaaaaaaaaa": true, "bbbbbbbbbbbbbbbb": true},
		procHolders(root, "/run/gpushare-mps", keys))
}
