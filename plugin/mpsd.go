package plugin

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gpushare/gpushare/internal/nomadplugin/device"
	"github.com/hashicorp/go-hclog"
)

// Per-reservation MPS control daemons (mps { daemons = "reservation" }).
//
// A client's CUDA_MPS_ACTIVE_THREAD_PERCENTAGE and
// CUDA_MPS_PINNED_DEVICE_MEM_LIMIT can only lower what its control daemon
// sets, and one daemon's defaults apply to every task it serves, so tasks
// of different fractions cannot share one daemon and keep their limits.
// Reserve therefore starts a daemon per reservation (as NVIDIA's DRA
// driver does per claim), limited to the reservation's GPUs
// (CUDA_VISIBLE_DEVICES) with the reservation's compute and memory as its
// defaults, in daemon_dir/<key>/{pipe,log}; the pipe directory is mounted
// at its host path and at CUDA's default /tmp/nvidia-mps, so a task that
// clears CUDA_MPS_PIPE_DIRECTORY still reaches its own daemon, and the
// daemon's root-only socket is hidden there. Nomad never tells a device
// plugin that a reservation ended: a daemon is stopped when its shares are
// reserved again in another combination (Nomad hands a share to one
// allocation at a time), or from the fingerprint loop when it was not
// reserved for gc_after and nothing uses it (no process mounts its pipe
// directory or names it in its environment, no MPS client); that loop also
// restarts a daemon that died in use and restores limits a task changed.

// MPSTaskPipe is CUDA's default MPS pipe directory, where a task that
// clears CUDA_MPS_PIPE_DIRECTORY looks for its daemon.
const MPSTaskPipe = "/tmp/nvidia-mps"

const (
	mpsPipeDir    = "pipe"
	mpsLogDir     = "log"
	mpsSharesFile = "shares"      // the reservation's share IDs
	mpsLimitsFile = "limits.json" // mpsLimits, to restart and check the daemon
	mpsStartOut   = "start.out"   // in the log directory: what -d printed
	mpsFailedFile = "failed"      // the daemon could not be started: not restarted
	// mpsPrivilegedSocket is the daemon's root-only socket, hidden from
	// tasks under mpsHiddenFile (in daemon_dir), an empty read-only file
	mpsPrivilegedSocket = "control_privileged"
	mpsHiddenFile       = "privileged-hidden"
	mpsProbeDir         = "probe"
	// mpsTimeout bounds every run of the control binary (a wedged daemon
	// must not hang Reserve or the fingerprint loop).
	mpsTimeout = 15 * time.Second
	// mpsGCEvery spaces the checks of the daemons from the fingerprint loop.
	mpsGCEvery = time.Minute
)

// ErrMPSDaemon is wrapped by every Reserve refusal for want of a daemon.
var ErrMPSDaemon = errors.New("cannot start the reservation's MPS control daemon")

// mpsKey names a reservation's daemon directory: short, as the UNIX
// sockets inside it must be.
func mpsKey(reservation string) string {
	sum := sha256.Sum256([]byte(reservation))
	return hex.EncodeToString(sum[:8])
}

// mpsLimits are a daemon's devices and defaults.
type mpsLimits struct {
	// Visible is the daemon's CUDA_VISIBLE_DEVICES: the GPU UUIDs, device
	// i of the daemon being Visible[i]; empty for the probe.
	Visible []string `json:"visible"`
	// Threads is the default active thread percentage.
	Threads int `json:"threads"`
	// MemoryMiB is the default pinned memory limit of each device.
	MemoryMiB []uint64 `json:"memory_mib"`
}

// pinned is CUDA_MPS_PINNED_DEVICE_MEM_LIMIT's value: "0=4096M,1=...".
func (l mpsLimits) pinned() string {
	parts := make([]string, len(l.MemoryMiB))
	for i, m := range l.MemoryMiB {
		parts[i] = fmt.Sprintf("%d=%dM", i, m)
	}
	return strings.Join(parts, ",")
}

// mpsEnv is the environment the control binary runs with: the plugin's,
// without any CUDA_MPS_* or CUDA_VISIBLE_DEVICES of its own, plus extra.
func mpsEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "CUDA_MPS_") || strings.HasPrefix(kv, EnvCUDAVisible+"=") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// mpsRun sends commands (one a line) to the daemon at pipe through the
// control binary and returns what it printed. The binary exits non-zero
// when no daemon answers; a refused command is only a line of output.
func mpsRun(ctx context.Context, control, pipe string, commands ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, mpsTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, control)
	cmd.Env = mpsEnv(EnvMPSPipe + "=" + pipe)
	cmd.Stdin = strings.NewReader(strings.Join(commands, "\n") + "\n")
	cmd.WaitDelay = time.Second
	out, err := cmd.CombinedOutput()
	text := strings.TrimSpace(string(out))
	if err != nil {
		if text != "" {
			err = fmt.Errorf("%w: %s", err, text)
		}
		return text, fmt.Errorf("%s (CUDA_MPS_PIPE_DIRECTORY=%s) %q: %w", control, pipe, commands[0], err)
	}
	return text, nil
}

// mpsAnswers: a daemon answers at pipe.
func mpsAnswers(ctx context.Context, control, pipe string) bool {
	_, err := mpsRun(ctx, control, pipe, "get_default_active_thread_percentage")
	return err == nil
}

// mpsStart starts a control daemon in dir with lim as its defaults, and
// checks that it took them.
func mpsStart(ctx context.Context, control, dir string, lim mpsLimits) error {
	pipe, logs := filepath.Join(dir, mpsPipeDir), filepath.Join(dir, mpsLogDir)
	for _, d := range []string{dir, pipe, logs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		// the task's user must reach the sockets, whatever the umask
		if err := os.Chmod(d, 0o755); err != nil {
			return err
		}
	}
	out, err := os.Create(filepath.Join(logs, mpsStartOut))
	if err != nil {
		return err
	}
	defer out.Close()
	ctx, cancel := context.WithTimeout(ctx, mpsTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, control, "-d")
	env := []string{EnvMPSPipe + "=" + pipe, EnvMPSLog + "=" + logs, EnvMPSThreads + "=" + strconv.Itoa(lim.Threads)}
	if len(lim.Visible) > 0 {
		env = append(env, EnvCUDAVisible+"="+strings.Join(lim.Visible, ","), EnvMPSPinnedMemory+"="+lim.pinned())
	}
	cmd.Env = mpsEnv(env...)
	// a file, not a pipe: the daemon it forks may keep its output open
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil {
		printed, _ := os.ReadFile(out.Name())
		if len(printed) > 0 {
			return fmt.Errorf("%s -d: %w: %s", control, err, strings.TrimSpace(lastLines(printed, 5)))
		}
		return fmt.Errorf("%s -d: %w", control, err)
	}
	return mpsConfigure(ctx, control, pipe, lim)
}

// mpsConfigure sets a running daemon's defaults to lim and reads the
// thread percentage back.
func mpsConfigure(ctx context.Context, control, pipe string, lim mpsLimits) error {
	cmds := []string{fmt.Sprintf("set_default_active_thread_percentage %d", lim.Threads)}
	for i, m := range lim.MemoryMiB {
		cmds = append(cmds, fmt.Sprintf("set_default_device_pinned_mem_limit %d %dM", i, m))
	}
	if _, err := mpsRun(ctx, control, pipe, cmds...); err != nil {
		return err
	}
	return mpsCheckThreads(ctx, control, pipe, lim.Threads)
}

// mpsCheckThreads: the daemon's default active thread percentage is want.
func mpsCheckThreads(ctx context.Context, control, pipe string, want int) error {
	got, err := mpsRun(ctx, control, pipe, "get_default_active_thread_percentage")
	if err != nil {
		return err
	}
	if v, perr := strconv.ParseFloat(lastLines([]byte(got), 1), 64); perr != nil || v != float64(want) {
		return fmt.Errorf("the MPS control daemon at %s says its default active thread percentage is %q, not %d", pipe, got, want)
	}
	return nil
}

// mpsStop quits the daemon in dir (forcing its servers after a few
// seconds) and removes dir.
func (p *Plugin) mpsStop(ctx context.Context, control, dir, why string) {
	pipe := filepath.Join(dir, mpsPipeDir)
	if mpsAnswers(ctx, control, pipe) {
		if _, err := mpsRun(ctx, control, pipe, "quit -t 5"); err != nil {
			p.logger.Warn("mps: cannot quit a reservation's control daemon; removing its directory anyway (the process may be left running)",
				"dir", dir, "error", err)
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		p.logger.Warn("mps: cannot remove a reservation's daemon directory", "dir", dir, "error", err)
		return
	}
	p.logger.Info("mps: stopped the control daemon of a reservation that ended", "dir", dir, "reason", why)
}

// mpsAbandon quits a daemon that failed to start or to take its limits
// (no daemon must serve without them) and marks dir so that the collector
// does not start it again; dir stays, with its log, until gc_after.
func (p *Plugin) mpsAbandon(ctx context.Context, control, dir string) {
	pipe := filepath.Join(dir, mpsPipeDir)
	if mpsAnswers(ctx, control, pipe) {
		if _, err := mpsRun(ctx, control, pipe, "quit -t 5"); err != nil {
			p.logger.Warn("mps: cannot quit a control daemon that failed to take its limits", "dir", dir, "error", err)
		}
	}
	_ = os.WriteFile(filepath.Join(dir, mpsFailedFile), nil, 0o444)
}

// reserveMPSDaemon gives the reservation its running daemon, started or
// reused, and adds the pipe and log directories to res.
func (p *Plugin) reserveMPSDaemon(m MPSConfig, reservation string, ids []string, lim mpsLimits, res *device.ContainerReservation) error {
	p.mpsMu.Lock()
	defer p.mpsMu.Unlock()
	ctx := context.Background()
	key := mpsKey(reservation)
	dir := filepath.Join(m.DaemonDir, key)
	pipe, logs := filepath.Join(dir, mpsPipeDir), filepath.Join(dir, mpsLogDir)
	fail := func(err error) error {
		p.mpsFailed(err)
		return fmt.Errorf("%w for %s: %w (mps.control = %q; its log: %s; or set mps { daemons = \"node\" } to use the node's daemon, without limits the task cannot raise)",
			ErrMPSDaemon, list(ids), err, m.Control, logs)
	}
	if err := os.MkdirAll(m.DaemonDir, 0o755); err != nil {
		return fail(err)
	}
	_ = os.Chmod(m.DaemonDir, 0o755)

	// Nomad hands a share to one allocation at a time: a daemon holding any
	// of these shares in another combination served a reservation that ended
	mine := map[string]bool{}
	for _, id := range ids {
		mine[id] = true
	}
	for _, d := range p.mpsDaemonDirs(m) {
		if d.key == key {
			continue
		}
		for _, id := range d.shares {
			if mine[id] {
				p.mpsStop(ctx, m.Control, d.dir, "its share "+id+" is reserved again, in "+key)
				break
			}
		}
	}

	// the files first: the collector finds a daemon by them, even one
	// whose start fails half way
	limJSON, err := json.Marshal(lim)
	if err == nil {
		err = os.MkdirAll(dir, 0o755)
	}
	if err == nil {
		err = writeFileAtomic(filepath.Join(dir, mpsSharesFile), []byte(strings.Join(ids, "\n")+"\n"), 0o444)
	}
	if err == nil {
		err = writeFileAtomic(filepath.Join(dir, mpsLimitsFile), limJSON, 0o444)
	}
	if err != nil {
		return fail(err)
	}
	_ = os.Remove(filepath.Join(dir, mpsFailedFile))
	log := p.logger.With("dir", dir, "shares", list(ids), "active_thread_percentage", lim.Threads, "pinned_mem_limit", lim.pinned())
	if mpsAnswers(ctx, m.Control, pipe) {
		// the same shares again (a restarted task): same limits, re-applied
		if err := mpsConfigure(ctx, m.Control, pipe, lim); err != nil {
			p.mpsAbandon(ctx, m.Control, dir)
			return fail(err)
		}
		log.Info("mps: reservation reuses its running control daemon")
	} else {
		if _, err := os.Stat(pipe); err == nil {
			log.Warn("mps: the reservation's control daemon is not running; starting it again")
		}
		if err := mpsStart(ctx, m.Control, dir, lim); err != nil {
			p.mpsAbandon(ctx, m.Control, dir)
			return fail(err)
		}
		log.Info("mps: started the reservation's control daemon")
	}
	now := time.Now()
	_ = os.Chtimes(dir, now, now) // the garbage collector's clock

	// an empty file over the daemon's root-only socket: a task's client
	// that could open it (a non-root user with CAP_DAC_OVERRIDE, in exec's
	// and docker's default capabilities) would use it and be refused ("Unable
	// to accept priviliged connection from other user"), where without it
	// it uses control; a task's root loses the root-only commands (quit)
	hidden := filepath.Join(m.DaemonDir, mpsHiddenFile)
	if !fileExists(hidden) {
		if err := writeFileAtomic(hidden, nil, 0o444); err != nil {
			return fail(err)
		}
	}
	res.Envs[EnvMPSPipe] = pipe
	res.Envs[EnvMPSLog] = logs
	res.Mounts = append(res.Mounts,
		&device.Mount{TaskPath: pipe, HostPath: pipe},
		&device.Mount{TaskPath: MPSTaskPipe, HostPath: pipe},
		&device.Mount{TaskPath: filepath.Join(pipe, mpsPrivilegedSocket), HostPath: hidden, ReadOnly: true},
		&device.Mount{TaskPath: filepath.Join(MPSTaskPipe, mpsPrivilegedSocket), HostPath: hidden, ReadOnly: true},
		&device.Mount{TaskPath: logs, HostPath: logs, ReadOnly: true},
	)
	return nil
}

// mpsDaemon is one reservation's daemon directory.
type mpsDaemon struct {
	key, dir string
	shares   []string
	modTime  time.Time
}

// mpsDaemonDirs lists the reservations' daemon directories (those with a
// shares file) under daemon_dir.
func (p *Plugin) mpsDaemonDirs(m MPSConfig) []mpsDaemon {
	entries, err := os.ReadDir(m.DaemonDir)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			p.logger.Warn("mps: cannot list daemon_dir", "daemon_dir", m.DaemonDir, "error", err)
		}
		return nil
	}
	var out []mpsDaemon
	for _, e := range entries {
		if !e.IsDir() || e.Name() == mpsProbeDir {
			continue
		}
		dir := filepath.Join(m.DaemonDir, e.Name())
		b, err := os.ReadFile(filepath.Join(dir, mpsSharesFile))
		if err != nil {
			continue // not one of ours, or being written
		}
		info, err := os.Stat(dir)
		if err != nil {
			continue
		}
		out = append(out, mpsDaemon{key: e.Name(), dir: dir, shares: strings.Fields(string(b)), modTime: info.ModTime()})
	}
	return out
}

// collectMPSDaemons checks every reservation's daemon: one not reserved
// for gc_after that no process uses and that serves no client is stopped;
// one that died while its reservation may still run is started again; one
// whose defaults were changed through its pipe gets them back.
func (p *Plugin) collectMPSDaemons(ctx context.Context, m MPSConfig, gcAfter time.Duration, now time.Time) {
	p.mpsMu.Lock()
	defer p.mpsMu.Unlock()
	daemons := p.mpsDaemonDirs(m)
	if len(daemons) == 0 {
		return
	}
	keys := map[string]bool{}
	for _, d := range daemons {
		keys[d.key] = true
	}
	held := p.mpsHolders(m.DaemonDir, keys)
	for _, d := range daemons {
		pipe := filepath.Join(d.dir, mpsPipeDir)
		recent := now.Sub(d.modTime) < gcAfter
		log := p.logger.With("dir", d.dir, "shares", list(d.shares))
		var lim mpsLimits
		b, err := os.ReadFile(filepath.Join(d.dir, mpsLimitsFile))
		if err == nil {
			err = json.Unmarshal(b, &lim)
		}
		if err != nil {
			log.Warn("mps: unreadable limits of a reservation's daemon; stopping it", "error", err)
			p.mpsStop(ctx, m.Control, d.dir, "unreadable limits")
			continue
		}
		answers := mpsAnswers(ctx, m.Control, pipe)
		switch {
		case answers && (recent || held[d.key] || mpsHasClients(ctx, m.Control, pipe)):
			p.mpsRestoreLimits(ctx, m.Control, pipe, lim, log)
		case answers:
			p.mpsStop(ctx, m.Control, d.dir, fmt.Sprintf("not reserved for %s, no process uses it", now.Sub(d.modTime).Round(time.Minute)))
		case held[d.key] || recent && !fileExists(filepath.Join(d.dir, mpsFailedFile)):
			// a task whose daemon is gone would run its next CUDA process
			// without MPS, unlimited: start the daemon again
			log.Warn("mps: the control daemon of a reservation still in use has died; starting it again (clients it served have lost their GPU context)")
			if err := mpsStart(ctx, m.Control, d.dir, lim); err != nil {
				log.Error("mps: cannot restart a reservation's control daemon: new CUDA processes of its task run without MPS limits", "error", err)
			}
		case recent: // failed at Reserve: kept a while for its log
		default:
			if err := os.RemoveAll(d.dir); err == nil {
				log.Info("mps: removed the directory of a reservation whose daemon is gone", "unused_for", now.Sub(d.modTime).Round(time.Minute))
			}
		}
	}
}

// mpsRestoreLimits puts back a daemon's defaults, and its servers'
// percentages, that a task changed through the control pipe (any process
// that reaches the pipe can): clients created afterwards get the limit
// again; clients created meanwhile keep what they got.
func (p *Plugin) mpsRestoreLimits(ctx context.Context, control, pipe string, lim mpsLimits, log hclog.Logger) {
	if err := mpsCheckThreads(ctx, control, pipe, lim.Threads); err != nil {
		log.Warn("mps: a reservation's daemon lost its limits (a task can change them through the control pipe); setting them again", "error", err)
		if err := mpsConfigure(ctx, control, pipe, lim); err != nil {
			log.Warn("mps: cannot set a reservation's daemon's limits again", "error", err)
		}
	}
	for _, srv := range mpsServers(ctx, control, pipe) {
		got, err := mpsRun(ctx, control, pipe, "get_active_thread_percentage "+srv)
		if err != nil {
			continue
		}
		if v, perr := strconv.ParseFloat(lastLines([]byte(got), 1), 64); perr == nil && v > float64(lim.Threads) {
			log.Warn("mps: a reservation's MPS server was raised above its limit (through the control pipe); lowering it", "server_pid", srv, "active_thread_percentage", got)
			_, _ = mpsRun(ctx, control, pipe, fmt.Sprintf("set_active_thread_percentage %s %d", srv, lim.Threads))
		}
	}
}

// mpsServers is the PIDs of a daemon's MPS servers.
func mpsServers(ctx context.Context, control, pipe string) []string {
	out, err := mpsRun(ctx, control, pipe, "get_server_list")
	if err != nil {
		return nil
	}
	var pids []string
	for _, f := range strings.Fields(out) {
		if _, err := strconv.Atoi(f); err == nil {
			pids = append(pids, f)
		}
	}
	return pids
}

// mpsHasClients: one of the daemon's servers has a client.
func mpsHasClients(ctx context.Context, control, pipe string) bool {
	for _, srv := range mpsServers(ctx, control, pipe) {
		out, err := mpsRun(ctx, control, pipe, "get_client_list "+srv)
		if err != nil {
			return true // cannot tell: keep it
		}
		for _, f := range strings.Fields(out) {
			if _, err := strconv.Atoi(f); err == nil {
				return true
			}
		}
	}
	return false
}

// procHolders returns which daemon directories (by key) a process on the
// host uses: its mount namespace has the pipe directory mounted (exec,
// docker: the mount's root ends in /<key>/pipe), or its environment names
// it (raw_exec). It reads /proc under root.
func procHolders(root, daemonDir string, keys map[string]bool) map[string]bool {
	held := map[string]bool{}
	entries, err := os.ReadDir(root)
	if err != nil {
		return held
	}
	seenNS := map[string]bool{}
	envPrefix := []byte(EnvMPSPipe + "=" + filepath.Clean(daemonDir) + "/")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		proc := filepath.Join(root, e.Name())
		if ns, err := os.Readlink(filepath.Join(proc, "ns", "mnt")); err != nil || !seenNS[ns] {
			seenNS[ns] = err == nil
			if b, err := os.ReadFile(filepath.Join(proc, "mountinfo")); err == nil {
				for _, line := range strings.Split(string(b), "\n") {
					f := strings.Fields(line)
					if len(f) > 4 && filepath.Base(f[3]) == mpsPipeDir && keys[filepath.Base(filepath.Dir(f[3]))] {
						held[filepath.Base(filepath.Dir(f[3]))] = true
					}
				}
			}
		}
		if b, err := os.ReadFile(filepath.Join(proc, "environ")); err == nil {
			for _, kv := range bytes.Split(b, []byte{0}) {
				if rest, ok := bytes.CutPrefix(kv, envPrefix); ok {
					if k, _, _ := strings.Cut(string(rest), "/"); keys[k] {
						held[k] = true
					}
				}
			}
		}
	}
	return held
}

// probeMPS starts and quits a daemon in daemon_dir/probe: whether Reserve
// can start one per reservation.
func probeMPS(ctx context.Context, m MPSConfig) mpsStatus {
	const cannot = "shares cannot be reserved: install the NVIDIA driver's MPS tools (Debian: nvidia-cuda-mps), set mps.control to the binary, or set sharing = \"timeslice\""
	if _, err := exec.LookPath(m.Control); err != nil {
		return mpsStatus{
			State:  "control not found: " + m.Control,
			Health: fmt.Sprintf("MPS: cannot start per-reservation control daemons: %v; %s", err, cannot),
		}
	}
	dir := filepath.Join(m.DaemonDir, mpsProbeDir)
	defer os.RemoveAll(dir)
	pipe := filepath.Join(dir, mpsPipeDir)
	if mpsAnswers(ctx, m.Control, pipe) { // left by a plugin that stopped mid-probe
		_, _ = mpsRun(ctx, m.Control, pipe, "quit")
	}
	err := os.MkdirAll(m.DaemonDir, 0o755)
	if err == nil {
		err = mpsStart(ctx, m.Control, dir, mpsLimits{Threads: 100})
		if _, qerr := mpsRun(ctx, m.Control, pipe, "quit"); err == nil && qerr != nil {
			err = fmt.Errorf("quit: %w", qerr)
		}
	}
	if err != nil {
		return mpsStatus{
			State:  "cannot start " + m.Control,
			Health: fmt.Sprintf("MPS: cannot start a control daemon in %s: %v; %s", m.DaemonDir, err, cannot),
		}
	}
	return mpsStatus{State: mpsRunning, Health: "MPS: one control daemon per reservation (" + m.Control + ", under " + m.DaemonDir + ")"}
}

// mpsFailed makes the next fingerprint probe again after Reserve could
// not start a daemon.
func (p *Plugin) mpsFailed(err error) {
	p.mu.Lock()
	p.mpsProbe = nil
	p.mu.Unlock()
	p.logger.Error("mps: cannot give a reservation its control daemon", "error", err)
}

// mpsReservationStatus is the fingerprint's view of per-reservation
// daemons: the last successful probe, else a new one; and, at most every
// mpsGCEvery, a pass over the reservations' daemons.
func (p *Plugin) mpsReservationStatus(ctx context.Context, m MPSConfig, now time.Time) mpsStatus {
	p.mu.Lock()
	st := p.mpsProbe
	gcDue := p.lastMPSGC.IsZero() || now.Sub(p.lastMPSGC) >= mpsGCEvery
	if gcDue {
		p.lastMPSGC = now
	}
	p.mu.Unlock()
	if st == nil || !st.running() {
		probed := probeMPS(ctx, m)
		st = &probed
		p.mu.Lock()
		p.mpsProbe = st
		p.mu.Unlock()
	}
	if gcDue {
		if gcAfter, err := time.ParseDuration(m.GCAfter); err == nil { // validated in SetConfig
			p.collectMPSDaemons(ctx, m, gcAfter, now)
		}
	}
	return *st
}

// lastLines is the last n lines of b.
func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.TrimSpace(strings.Join(lines, "\n"))
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
