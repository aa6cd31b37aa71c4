package plugin

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gpushare/gpushare/internal/nomadplugin/device"
)

// The interposer's files inside the task (plugin/interposer/README.md).
const (
	// LimitsTaskDir is where a filesystem-isolated task (exec, docker) sees
	// its reservation's directory, read-only; the library reads its limits
	// there in preference to $GPUSHARE_LIMITS.
	LimitsTaskDir = "/run/gpushare"
	// PreloadTaskPath is mounted read-only from state_dir/ld.so.preload, so
	// every process of an isolated task loads the library even with
	// LD_PRELOAD cleared.
	PreloadTaskPath = "/etc/ld.so.preload"

	EnvLimits  = "GPUSHARE_LIMITS"
	EnvPreload = "LD_PRELOAD"

	limitsFile = "limits"
	usageFile  = "usage"
	// regionDir in a reservation's directory (root's, 0711): in it
	// regionDir/<key> (1733, the key in the task's environment only,
	// EnvRegion), where the library's first process creates usageFile,
	// 0600 and its own user's, so the file is not world-writable on the
	// host, any user a task runs as can make it, and no other user can
	// make it first (regionkey.go)
	regionDir   = "region"
	tgsFile     = "tgs" // in a reservation's directory: its GPU's TGS channel
	tgsDir      = "tgs" // in state_dir (0711): one channel per GPU, named by tgsChannelName
	sharesFile  = "shares"
	preloadFile = "ld.so.preload"
	// keyFile in state_dir (0600, the plugin's): the key that makes
	// reservation directories' names unguessable (keyedDirName)
	keyFile = "key"
)

// The usage region's layout (plugin/interposer/src/gpushare.h): magic and
// slot count first, then a pthread mutex whose size differs by
// architecture, then the slots, which end the file.
const (
	regionMagic = 0x67737234 // "gsr4"
	regionSlots = 1024
	slotSize    = 24 // int32 pid, uint32 locked, uint64 start, uint64 bytes
)

// The TGS channel's layout (plugin/interposer/src/pace.h, struct
// gs_tgs_channel; src/launch.c checks it): magic and version, then
// counters the library's production processes add to, in a file of
// exactly tgsSize bytes.
const (
	tgsMagic   = 0x67737467
	tgsVersion = 1
	tgsSize    = 4096
)

// reservationDirName names a reservation's directory after its share IDs:
// the same shares always get the same directory. Readable ("<uuid>_40-64",
// GPUs joined by "+", "," written ".") when short, else a hash.
func reservationDirName(uuids []string, byGPU map[string][]int) string {
	sorted := append([]string(nil), uuids...)
	sort.Strings(sorted)
	parts := make([]string, len(sorted))
	for i, u := range sorted {
		parts[i] = u + "_" + strings.ReplaceAll(ranges(byGPU[u]), ",", ".")
	}
	name := strings.Join(parts, "+")
	if len(name) <= 200 && !strings.ContainsAny(name, "/\x00") && name != "." && name != ".." {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return "h-" + hex.EncodeToString(sum[:12])
}

// keyedDirName is the name of a reservation's directory under state_dir:
// name (reservationDirName, from the share IDs) keyed by state_dir's key,
// so the same shares still get the same directory, but a task that knows
// another's share IDs (they are no secret: GPU UUIDs and ranges) cannot
// derive its path without the key, which only the plugin reads; and
// state_dir is not listable (0711). The shares file inside names the IDs.
func keyedDirName(key []byte, name string) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(name))
	return "r-" + hex.EncodeToString(mac.Sum(nil)[:16])
}

// stateKey returns state_dir's key, creating it (32 random bytes, 0600)
// when absent.
func stateKey(stateDir string) ([]byte, error) {
	path := filepath.Join(stateDir, keyFile)
	key, err := os.ReadFile(path)
	if err == nil && len(key) >= 32 {
		return key, nil
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("cannot read state_dir's key: %w", err)
	}
	key = make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("cannot make state_dir's key: %w", err)
	}
	if err := writeFileAtomic(path, key, 0o600); err != nil {
		return nil, fmt.Errorf("cannot write state_dir's key: %w", err)
	}
	return key, nil
}

// interposerLimits is what the limits file says.
type interposerLimits struct {
	memoryBytes uint64
	computePct  int
	// unified memory (interposer.unified_memory): an opportunistic task's
	// allocations become managed memory, which may exceed memoryBytes by
	// unifiedExtraBytes
	unifiedMemory     bool
	unifiedExtraBytes uint64
	// contextBytes is charged for each process's CUDA context (0: none)
	contextBytes uint64
	// turnMs is the round of turns of the GPU's capped tasks
	// (interposer.turn_ms), written for a capped reservation (computePct
	// < 100) only: 0 paces it on its own
	turnMs int
	// mpsThreadPct is the MPS active thread percentage the reservation's
	// processes run under (0: not MPS); computePct is then 100
	mpsThreadPct int
	// timesliceID names the reservation in its GPU's time-slice rotation
	// (slice.go; 0: not written)
	timesliceID uint64
	// wholeGPUs is the number of whole GPUs the reservation holds (0: not
	// written, a fraction): when the library composes more GPUs than that
	// from a task's merged reservations, all of them whole, it lifts the
	// memory cap, which was one reservation's (src/compose.c)
	wholeGPUs int
}

func (l interposerLimits) file() []byte {
	// class is not known at Reserve (it is a job's property): omitted
	b := fmt.Appendf(nil, "# written by the gpushare device plugin at Reserve; read by libgpushare-cuda.so\nmemory_bytes=%d\ncompute_pct=%d\n",
		l.memoryBytes, filePct(l.computePct))
	if l.mpsThreadPct > 0 {
		// a comment: the library ignores it, a reader learns why compute_pct is 100
		b = fmt.Appendf(b, "# compute limited by MPS: CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=%d\n", l.mpsThreadPct)
	}
	if l.unifiedMemory {
		b = fmt.Appendf(b, "unified_memory=1\nunified_extra_bytes=%d\n", l.unifiedExtraBytes)
	}
	if l.contextBytes > 0 {
		b = fmt.Appendf(b, "context_bytes=%d\n", l.contextBytes)
	}
	if filePct(l.computePct) < 100 {
		b = fmt.Appendf(b, "turn_ms=%d\n", l.turnMs)
	}
	if l.timesliceID > 0 {
		b = fmt.Appendf(b, "timeslice_id=%d\n", l.timesliceID)
	}
	if l.wholeGPUs > 0 {
		b = fmt.Appendf(b, "whole_gpus=%d\n", l.wholeGPUs)
	}
	return b
}

// filePct is the compute_pct the limits file may hold, 1-100: the library
// refuses anything else (0 would pace every launch for ever), so a share
// that rounds to nothing gets the least share, never a refused file.
func filePct(pct int) int {
	return min(100, max(1, pct))
}

// reserveInterposer writes the reservation's directory under state_dir and
// adds the library's mounts and environment to res. gpu is the UUID of the
// task's first GPU (its CUDA device 0), whose TGS channel the reservation
// gets.
func (p *Plugin) reserveInterposer(ic InterposerConfig, name string, ids []string, gpu string, lim interposerLimits, res *device.ContainerReservation) error {
	p.stateMu.Lock()
	defer p.stateMu.Unlock()
	// 0711 whatever the umask: a raw_exec task's user must traverse it,
	// and no task may list it (the reservations' names are secrets)
	err := os.MkdirAll(ic.StateDir, 0o711)
	if err == nil {
		err = os.Chmod(ic.StateDir, 0o711)
	}
	if err != nil {
		return fmt.Errorf("interposer: cannot create state_dir: %w; create it (root-owned, 0711) or change interposer.state_dir", err)
	}
	key, err := stateKey(ic.StateDir)
	if err != nil {
		return fmt.Errorf("interposer: %w; check that state_dir is writable by the plugin", err)
	}
	dir := filepath.Join(ic.StateDir, keyedDirName(key, name))
	preload := filepath.Join(ic.StateDir, preloadFile)
	if err := writeFileAtomic(preload, []byte(ic.Library+"\n"), 0o444); err != nil {
		return fmt.Errorf("interposer: %w; check that state_dir is writable by the plugin", err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("interposer: cannot create the reservation's directory: %w", err)
	}
	// the umask must not decide the modes: the task's processes read
	// limits and reach the region directory, whatever user they run as
	if err := os.Chmod(dir, 0o755); err != nil {
		return fmt.Errorf("interposer: %w", err)
	}
	lim.timesliceID = timesliceID(filepath.Base(dir))
	if err := writeFileAtomic(filepath.Join(dir, limitsFile), lim.file(), 0o444); err != nil {
		return fmt.Errorf("interposer: %w", err)
	}
	if err := writeFileAtomic(filepath.Join(dir, sharesFile), []byte(strings.Join(ids, "\n")+"\n"), 0o444); err != nil {
		return fmt.Errorf("interposer: %w", err)
	}
	// The usage region is the task's to create (the library's first
	// process: 0600, its user's), in region/<key> (1733), the key in the
	// task's environment only: region/ is root's, so another user who
	// learnt the reservation's path cannot create the file first (issue
	// 44; before, region/ was 1733 and a file another user put there was
	// adopted). Before that, the plugin created it 0666, writable by every
	// user of the host who learnt its path.
	rkey, err := p.regionKey(filepath.Join(dir, regionDir))
	if err != nil {
		return fmt.Errorf("interposer: %w", err)
	}
	region := filepath.Join(dir, regionDir)
	// an older plugin's 0666 region beside limits goes unless a live
	// process holds it; removed, so a process that still maps it keeps it
	// rather than fault
	legacy := filepath.Join(dir, usageFile)
	live, err := liveSlots(legacy)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil || live == 0:
		if err := os.Remove(legacy); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("interposer: %w", err)
		}
	default:
		p.logger.Info("interposer: reservation reused while processes still hold its usage region; keeping their charges",
			"dir", dir, "live_processes", live)
	}
	channel, err := tgsChannel(ic.StateDir, key, gpu)
	if err != nil {
		return fmt.Errorf("interposer: %w", err)
	}
	tgs := filepath.Join(dir, tgsFile)
	if err := linkOnce(channel, tgs); err != nil {
		return fmt.Errorf("interposer: %w", err)
	}
	rotation, err := sliceRotation(ic.StateDir, key, gpu)
	if err != nil {
		return fmt.Errorf("interposer: %w", err)
	}
	slice := filepath.Join(dir, sliceFile)
	if err := linkOnce(rotation, slice); err != nil {
		return fmt.Errorf("interposer: %w", err)
	}
	now := time.Now()
	_ = os.Chtimes(dir, now, now) // the garbage collector's clock
	res.Envs[EnvLimits] = dir
	res.Envs[EnvRegion] = rkey
	res.Envs[EnvPreload] = ic.Library
	res.Mounts = append(res.Mounts,
		&device.Mount{TaskPath: LimitsTaskDir, HostPath: dir, ReadOnly: true},
		&device.Mount{TaskPath: LimitsTaskDir + "/" + regionDir, HostPath: region, ReadOnly: false},
		&device.Mount{TaskPath: LimitsTaskDir + "/" + tgsFile, HostPath: tgs, ReadOnly: false},
		&device.Mount{TaskPath: LimitsTaskDir + "/" + sliceFile, HostPath: slice, ReadOnly: false},
		&device.Mount{TaskPath: ic.Library, HostPath: ic.Library, ReadOnly: true},
		&device.Mount{TaskPath: PreloadTaskPath, HostPath: preload, ReadOnly: true},
	)
	p.logger.Debug("interposer: reservation limits written", "dir", dir,
		"memory_bytes", lim.memoryBytes, "compute_pct", lim.computePct,
		"unified_memory", lim.unifiedMemory, "unified_extra_bytes", lim.unifiedExtraBytes)
	return nil
}

// tgsChannelName names gpu's TGS channel in state_dir/tgs: keyed by
// state_dir's key like the reservations' directories, so that a task
// knowing a GPU's UUID cannot derive it; the directory is not listable.
// Only the tasks with shares of the GPU reach it, through their own
// reservation's hard link.
func tgsChannelName(key []byte, gpu string) string {
	return "t-" + keyedDirName(key, "tgs:"+gpu)[2:]
}

// tgsChannel returns the path of gpu's TGS channel,
// <state_dir>/tgs/<tgsChannelName>, creating it if absent: a fixed-size
// file, 0666 (every task's processes on the GPU map it, whatever user they
// run as) in a directory no one but root lists (0711), created once and
// never replaced, so every process that maps it, in any reservation,
// shares the same counters.
func tgsChannel(stateDir string, key []byte, gpu string) (string, error) {
	header := make([]byte, 8)
	binary.LittleEndian.PutUint32(header, tgsMagic)
	binary.LittleEndian.PutUint32(header[4:], tgsVersion)
	return perGPUFile(stateDir, tgsDir, gpu, tgsChannelName(key, gpu), "TGS channel", header, tgsSize)
}

// perGPUFile returns the path of one of gpu's shared files (the TGS
// channel, the time-slice rotation), <state_dir>/<dir>/<name>, creating it
// if absent: header, then zeros to size bytes, 0666 (every task's
// processes on the GPU map it, whatever user they run as), in a directory
// no one but root lists (0711), created once and never replaced, so every
// process that maps it, in any reservation, shares it. what names it in
// errors.
func perGPUFile(stateDir, dir, gpu, name, what string, header []byte, size int) (string, error) {
	if gpu == "" || strings.ContainsAny(gpu, "/\x00") || gpu == "." || gpu == ".." {
		return "", fmt.Errorf("GPU UUID %q cannot name a %s file", gpu, what)
	}
	d := filepath.Join(stateDir, dir)
	err := os.Mkdir(d, 0o711)
	if err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("cannot create %s: %w", d, err)
	}
	if err := os.Chmod(d, 0o711); err != nil {
		return "", err
	}
	path := filepath.Join(d, name)
	if st, err := os.Stat(path); err == nil {
		if st.Size() != int64(size) {
			return "", fmt.Errorf("%s is %d bytes, not a %s of this version (%d); remove it when no task uses the GPU", path, st.Size(), what, size)
		}
		return path, nil
	}
	// written aside, then linked into place: a process never maps a
	// half-written file, and a concurrent creator's stays (Link fails)
	data := make([]byte, size)
	copy(data, header)
	f, err := os.CreateTemp(d, "."+name+".tmp-*")
	if err != nil {
		return "", fmt.Errorf("cannot create %s: %w", path, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(0o666)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Link(tmp, path)
	}
	if err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("cannot create %s: %w", path, err)
	}
	return path, nil
}

// linkOnce makes dst a hard link to src, unless it already is one.
func linkOnce(src, dst string) error {
	s, err := os.Stat(src)
	if err != nil {
		return err
	}
	if d, err := os.Lstat(dst); err == nil {
		if os.SameFile(s, d) {
			return nil
		}
		if err := os.Remove(dst); err != nil {
			return err
		}
	}
	if err := os.Link(src, dst); err != nil {
		return fmt.Errorf("cannot link %s into the reservation: %w", filepath.Base(dst), err)
	}
	return nil
}

// writeFileAtomic writes path through a temporary file renamed over it, so
// a reader sees the old content or the new, with mode set whatever the
// umask.
func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("cannot write %s: %w", path, err)
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(mode)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("cannot write %s: %w", path, err)
	}
	return nil
}

// liveSlots counts the usage region's slots held by live processes. The
// library's processes hold a write lock (fcntl) on their slot's bytes
// while they live and mark the slot "locked": such a slot is live while
// the lock is held, which works across pid namespaces (a docker or exec
// task's pids are its own, not the host's). A slot without the mark is
// looked up in /proc: a pid that exists, is not a zombie and started when
// the slot says.
func liveSlots(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return 0, err
	}
	if len(b) == 0 {
		return 0, nil
	}
	if len(b) < 8+regionSlots*slotSize || binary.LittleEndian.Uint32(b) != regionMagic ||
		binary.LittleEndian.Uint32(b[4:]) != regionSlots {
		return 0, fmt.Errorf("%s is not a usage region of this version", path)
	}
	base := len(b) - regionSlots*slotSize
	live := 0
	for i := 0; i < regionSlots; i++ {
		off := base + i*slotSize
		s := b[off:]
		pid := int32(binary.LittleEndian.Uint32(s))
		switch {
		case pid <= 0:
		case binary.LittleEndian.Uint32(s[4:]) == 1: // locked
			if slotLocked(f, int64(off)) {
				live++
			}
		case procAlive(int(pid), binary.LittleEndian.Uint64(s[8:])):
			live++
		}
	}
	return live, nil
}

// slotLocked: a process holds the lock on the slot at off (or it cannot
// be told: counted live, so nothing is collected under a live task).
func slotLocked(f *os.File, off int64) bool {
	l := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: io.SeekStart, Start: off, Len: slotSize}
	if err := syscall.FcntlFlock(f.Fd(), syscall.F_GETLK, &l); err != nil {
		return true
	}
	return l.Type != syscall.F_UNLCK
}

// procAlive: pid runs and started at start (clock ticks since boot,
// /proc/<pid>/stat field 22), as the library records it.
func procAlive(pid int, start uint64) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 || f[0] == "Z" || f[0] == "X" {
		return false
	}
	st, err := strconv.ParseUint(f[19], 10, 64)
	return err == nil && (start == 0 || st == start)
}

// liveRegion: a live process holds a usage region of the reservation
// directory dir (regionFiles).
func liveRegion(dir string) bool {
	for _, usage := range regionFiles(dir) {
		if live, err := liveSlots(usage); err == nil && live > 0 {
			return true
		}
	}
	return false
}

// collectGarbage removes the reservation directories not reserved for
// gcAfter whose usage region no live process holds. It runs from the
// fingerprint loop (device plugins are never told a reservation ended).
func (p *Plugin) collectGarbage(ic InterposerConfig, gcAfter time.Duration, now time.Time) {
	p.stateMu.Lock()
	defer p.stateMu.Unlock()
	entries, err := os.ReadDir(ic.StateDir)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			p.logger.Warn("interposer: cannot list state_dir for garbage collection", "state_dir", ic.StateDir, "error", err)
		}
		return
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		dir := filepath.Join(ic.StateDir, e.Name())
		info, err := os.Stat(dir)
		if err != nil || now.Sub(info.ModTime()) < gcAfter {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, limitsFile)); err != nil {
			continue // not one of ours
		}
		if liveRegion(dir) {
			continue
		}
		if err := os.RemoveAll(dir); err != nil {
			p.logger.Warn("interposer: cannot remove an old reservation directory", "dir", dir, "error", err)
			continue
		}
		p.logger.Info("interposer: removed the directory of shares not reserved recently", "dir", dir, "unused_for", now.Sub(info.ModTime()).Round(time.Minute))
	}
}

// gcEvery spaces the garbage collections of state_dir.
const gcEvery = 10 * time.Minute

func (p *Plugin) maybeCollectGarbage(ic InterposerConfig, now time.Time) {
	p.mu.Lock()
	due := p.lastGC.IsZero() || now.Sub(p.lastGC) >= gcEvery
	if due {
		p.lastGC = now
	}
	p.mu.Unlock()
	if !due {
		return
	}
	gcAfter, err := time.ParseDuration(ic.GCAfter)
	if err != nil {
		return // validated in SetConfig
	}
	p.collectGarbage(ic, gcAfter, now)
}
