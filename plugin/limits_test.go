package plugin

import (
	"encoding/binary"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpushare/gpushare/fixtures"
	"github.com/gpushare/gpushare/internal/nomadplugin/device"
	"github.com/shoenig/test/must"
)

// interposerPlugin is a DGX-1 plugin with the interposer on, its state_dir
// in a temporary directory.
func interposerPlugin(t *testing.T) (*Plugin, string, string) {
	t.Helper()
	dir := t.TempDir()
	lib := filepath.Join(dir, "libgpushare-cuda.so")
	must.NoError(t, os.WriteFile(lib, []byte("not really"), 0o644))
	state := filepath.Join(dir, "reservations")
	p, _, _ := newPlugin(t, fixtures.DGX1V100, `interposer {
  enabled = true
  library = "`+lib+`"
  state_dir = "`+state+`"
}`)
	return p, lib, state
}

// reservationDir is where the plugin puts the reservation whose share IDs
// give name (reservationDirName): keyed by state_dir's key.
func reservationDir(t *testing.T, state, name string) string {
	t.Helper()
	key, err := os.ReadFile(filepath.Join(state, "key"))
	must.NoError(t, err)
	return filepath.Join(state, keyedDirName(key, name))
}

// Another task cannot derive a reservation's directory (issue 29, defect
// 7): its name holds neither the share IDs nor their plain hash, differs
// between two state_dirs (two keys) for the same shares, stays the same
// for the same shares in one; state_dir cannot be listed by others and
// its key is the plugin's alone.
func TestReservationDirUnguessable(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	ids := shares(3, 10, 35)
	var names []string
	for range 2 {
		p, _, state := interposerPlugin(t)
		res, err := p.Reserve(ids)
		must.NoError(t, err)
		again, err := p.Reserve(ids)
		must.NoError(t, err)
		must.Eq(t, res.Envs[EnvLimits], again.Envs[EnvLimits], must.Sprint("the same shares, the same directory"))
		name := filepath.Base(res.Envs[EnvLimits])
		must.Eq(t, state, filepath.Dir(res.Envs[EnvLimits]))
		must.StrNotContains(t, name, v100)
		must.StrNotContains(t, name, "10-34")
		must.NotEq(t, reservationDirName([]string{v100 + "3"}, map[string][]int{v100 + "3": rangeOf(10, 35)}), name)
		must.Eq(t, os.ModeDir|0o711, mode(t, state))
		must.Eq(t, 0o600, mode(t, filepath.Join(state, "key")))
		names = append(names, name)
	}
	must.NotEq(t, names[0], names[1], must.Sprint("two keys, two names: the name is not a function of the shares alone"))
}

func rangeOf(from, to int) []int {
	var r []int
	for i := from; i < to; i++ {
		r = append(r, i)
	}
	return r
}

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	st, err := os.Stat(path)
	must.NoError(t, err)
	return st.Mode()
}

func TestReserveInterposer(t *testing.T) {
	old := syscall.Umask(0o077) // the modes must not depend on the umask
	defer syscall.Umask(old)
	p, lib, state := interposerPlugin(t)
	ids := shares(3, 10, 35)
	res, err := p.Reserve(ids)
	must.NoError(t, err)

	dir := reservationDir(t, state, v100+"3_10-34")
	must.Eq(t, dir, res.Envs[EnvLimits])
	must.Eq(t, lib, res.Envs[EnvPreload])
	must.Eq(t, os.ModeDir|0o755, mode(t, dir))
	must.Eq(t, os.ModeDir|0o711, mode(t, state)) // traversable, not listable
	must.Eq(t, 0o600, mode(t, filepath.Join(state, "key")))
	must.Eq(t, 0o444, mode(t, filepath.Join(dir, "limits")))
	// the usage region is the task's to create, 0600 (issue 29, part 4):
	// a directory anyone may create in, nobody list; no file the plugin
	// leaves in the reservation's directory is world-writable but the
	// GPU's TGS channel and time-slice rotation, shared by design
	// in region/ (root's, 0711: issue 44) a directory named by a random
	// key that only the task's environment holds, 1733, empty
	must.Eq(t, os.ModeDir|0o711, mode(t, filepath.Join(dir, "region")))
	key := res.Envs[EnvRegion]
	must.True(t, isRegionKey(key), must.Sprintf("key %q", key))
	must.Eq(t, os.ModeDir|os.ModeSticky|0o733, mode(t, filepath.Join(dir, "region", key)))
	_, err = os.Stat(filepath.Join(dir, "region", key, "usage"))
	must.ErrorIs(t, err, os.ErrNotExist)
	entries, err := os.ReadDir(dir)
	must.NoError(t, err)
	for _, e := range entries {
		m := mode(t, filepath.Join(dir, e.Name()))
		if m.IsRegular() && e.Name() != "tgs" && e.Name() != "slice" {
			must.Zero(t, m&0o002, must.Sprintf("%s is world-writable: %v", e.Name(), m))
		}
	}
	limits, err := os.ReadFile(filepath.Join(dir, "limits"))
	must.NoError(t, err)
	must.StrNotContains(t, string(limits), key)
	// 25% of 16 GiB; compute 100: sharing is MPS, whose daemon limits the SMs
	must.StrContains(t, string(limits), "\nmemory_bytes=4294967296\ncompute_pct=100\n# compute limited by MPS: CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25\n")
	must.StrNotContains(t, string(limits), "class=")
	must.StrNotContains(t, string(limits), "unified_") // unified memory is off by default
	if os.Geteuid() == 0 {
		st, _ := os.Stat(filepath.Join(dir, "limits"))
		must.Eq(t, uint32(0), st.Sys().(*syscall.Stat_t).Uid)
	}
	preload, err := os.ReadFile(filepath.Join(state, "ld.so.preload"))
	must.NoError(t, err)
	must.Eq(t, lib+"\n", string(preload))
	must.Eq(t, 0o444, mode(t, filepath.Join(state, "ld.so.preload")))

	// after the two MPS mounts
	must.Eq(t, []*device.Mount{
		{TaskPath: "/run/gpushare", HostPath: dir, ReadOnly: true},
		{TaskPath: "/run/gpushare/region", HostPath: filepath.Join(dir, "region")},
		{TaskPath: "/run/gpushare/tgs", HostPath: filepath.Join(dir, "tgs")},
		{TaskPath: "/run/gpushare/slice", HostPath: filepath.Join(dir, "slice")},
		{TaskPath: lib, HostPath: lib, ReadOnly: true},
		{TaskPath: "/etc/ld.so.preload", HostPath: filepath.Join(state, "ld.so.preload"), ReadOnly: true},
	}, res.Mounts[2:])

	// whole GPUs: their memory summed, compute 100
	res, err = p.Reserve(append(shares(4, 0, 100), shares(0, 0, 100)...))
	must.NoError(t, err)
	must.Eq(t, reservationDir(t, state, v100+"0_0-99+"+v100+"4_0-99"), res.Envs[EnvLimits])
	limits, err = os.ReadFile(filepath.Join(res.Envs[EnvLimits], "limits"))
	must.NoError(t, err)
	must.StrContains(t, string(limits), "\nmemory_bytes=34359738368\ncompute_pct=100\n")
}

// Each GPU has one TGS channel, <state_dir>/tgs/<keyed name>: created at
// the first Reserve on the GPU (fixed size, magic and version, 0666 whatever
// the umask, in a directory of mode 0711 under a name keyed by state_dir's
// key, so no task can list or derive another GPU's channel), never recreated, hard-linked into every reservation's directory
// on the GPU as "tgs" (mounted read-write at /run/gpushare/tgs), so the
// production and opportunistic tasks of different reservations share its
// counters. A reservation of several GPUs gets its first GPU's (the task's
// CUDA device 0).
func TestReserveInterposerTGSChannel(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	p, _, state := interposerPlugin(t)
	a, err := p.Reserve(shares(3, 0, 10))
	must.NoError(t, err)
	key, err := os.ReadFile(filepath.Join(state, keyFile))
	must.NoError(t, err)
	channel := filepath.Join(state, "tgs", tgsChannelName(key, v100+"3"))
	_, err = os.Stat(filepath.Join(state, "tgs", v100+"3"))
	must.ErrorIs(t, err, fs.ErrNotExist, must.Sprint("a task knowing the GPU's UUID cannot derive its channel's path"))
	b, err := p.Reserve(shares(3, 10, 35))
	must.NoError(t, err)

	data, err := os.ReadFile(channel)
	must.NoError(t, err)
	must.SliceLen(t, 4096, data)
	must.Eq(t, uint32(0x67737467), binary.LittleEndian.Uint32(data))
	must.Eq(t, uint32(1), binary.LittleEndian.Uint32(data[4:]))
	must.Eq(t, 0o666, mode(t, channel))
	must.Eq(t, os.ModeDir|0o711, mode(t, filepath.Join(state, "tgs")), must.Sprint("not listable"))
	ch, err := os.Stat(channel)
	must.NoError(t, err)
	for _, res := range []*device.ContainerReservation{a, b} {
		st, err := os.Stat(filepath.Join(res.Envs[EnvLimits], "tgs"))
		must.NoError(t, err)
		must.True(t, os.SameFile(ch, st), must.Sprint("the reservation's tgs is the GPU's channel"))
		must.SliceContains(t, res.Mounts, &device.Mount{TaskPath: "/run/gpushare/tgs", HostPath: filepath.Join(res.Envs[EnvLimits], "tgs")})
	}

	// never recreated: what production processes added stays
	f, err := os.OpenFile(channel, os.O_WRONLY, 0)
	must.NoError(t, err)
	_, err = f.WriteAt([]byte{42}, 8)
	must.NoError(t, err)
	must.NoError(t, f.Close())
	_, err = p.Reserve(shares(3, 0, 10))
	must.NoError(t, err)
	data, err = os.ReadFile(channel)
	must.NoError(t, err)
	must.Eq(t, byte(42), data[8])

	// several GPUs: the first's (GPU 0 before GPU 4)
	multi, err := p.Reserve(append(shares(4, 0, 100), shares(0, 0, 100)...))
	must.NoError(t, err)
	st, err := os.Stat(filepath.Join(multi.Envs[EnvLimits], "tgs"))
	must.NoError(t, err)
	first, err := os.Stat(filepath.Join(state, "tgs", tgsChannelName(key, v100+"0")))
	must.NoError(t, err)
	must.True(t, os.SameFile(first, st))
	_, err = os.Stat(filepath.Join(state, "tgs", v100+"4"))
	must.True(t, os.IsNotExist(err), must.Sprint("no reservation uses GPU 4's channel"))

	// a stale link (the channel removed by hand and made again) is replaced
	must.NoError(t, os.Remove(channel))
	c, err := p.Reserve(shares(3, 0, 10))
	must.NoError(t, err)
	ch, err = os.Stat(channel)
	must.NoError(t, err)
	st, err = os.Stat(filepath.Join(c.Envs[EnvLimits], "tgs"))
	must.NoError(t, err)
	must.True(t, os.SameFile(ch, st))

	// garbage collection leaves the channels alone
	p.collectGarbage(p.cfg.Interposer, 0, time.Now().Add(time.Hour))
	_, err = os.Stat(channel)
	must.NoError(t, err)
}

// A file of another size where the channel should be is not used, nor
// replaced under the processes that may map it: Reserve says what to do.
func TestReserveInterposerTGSChannelWrongSize(t *testing.T) {
	p, _, state := interposerPlugin(t)
	must.NoError(t, os.MkdirAll(filepath.Join(state, "tgs"), 0o711))
	key, err := stateKey(state)
	must.NoError(t, err)
	must.NoError(t, os.WriteFile(filepath.Join(state, "tgs", tgsChannelName(key, v100+"3")), []byte("short"), 0o666))
	_, err = p.Reserve(shares(3, 0, 10))
	must.ErrorContains(t, err, "not a TGS channel of this version")
	must.ErrorContains(t, err, "remove it")
}

func TestReserveInterposerDisabled(t *testing.T) {
	p, _, _ := newPlugin(t, fixtures.DGX1V100, `interposer { state_dir = "`+filepath.Join(t.TempDir(), "st")+`" }`)
	res, err := p.Reserve(shares(3, 10, 35))
	must.NoError(t, err)
	must.MapNotContainsKey(t, res.Envs, EnvLimits)
	must.MapNotContainsKey(t, res.Envs, EnvPreload)
	must.SliceLen(t, 2, res.Mounts) // the MPS directories only
	_, err = os.Stat(p.cfg.Interposer.StateDir)
	must.True(t, os.IsNotExist(err))
}

// writeRegion writes a usage region holding one slot of pid.
func writeRegion(t *testing.T, path string, pid int32, start uint64) {
	t.Helper()
	b := make([]byte, 64+regionSlots*slotSize)
	binary.LittleEndian.PutUint32(b, regionMagic)
	binary.LittleEndian.PutUint32(b[4:], regionSlots)
	s := b[len(b)-regionSlots*slotSize+5*slotSize:]
	binary.LittleEndian.PutUint32(s, uint32(pid))
	binary.LittleEndian.PutUint64(s[8:], start)
	binary.LittleEndian.PutUint64(s[16:], 1<<20)
	must.NoError(t, os.WriteFile(path, b, 0o666))
}

func myStart(t *testing.T) uint64 {
	b, err := os.ReadFile("/proc/self/stat")
	must.NoError(t, err)
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	var v uint64
	for _, c := range f[19] {
		v = v*10 + uint64(c-'0')
	}
	return v
}

// The same shares get the same directory; its usage region is replaced
// when no live process holds a slot, kept when one does.
func TestReserveInterposerReuse(t *testing.T) {
	p, _, _ := interposerPlugin(t)
	ids := shares(2, 0, 25)
	res, err := p.Reserve(ids)
	must.NoError(t, err)
	usage := filepath.Join(res.Envs[EnvLimits], "region", res.Envs[EnvRegion], "usage")

	writeRegion(t, usage, int32(os.Getpid()), myStart(t)) // a live process
	res2, err := p.Reserve(ids)
	must.NoError(t, err)
	must.Eq(t, res.Envs[EnvLimits], res2.Envs[EnvLimits])
	must.Eq(t, res.Envs[EnvRegion], res2.Envs[EnvRegion], must.Sprint("the live region's key"))
	st, err := os.Stat(usage)
	must.NoError(t, err)
	must.Positive(t, st.Size(), must.Sprint("kept: a live process holds a slot"))

	writeRegion(t, usage, int32(os.Getpid()), myStart(t)+1) // the pid reused by another process
	res3, err := p.Reserve(ids)
	must.NoError(t, err)
	_, err = os.Stat(filepath.Dir(usage))
	must.ErrorIs(t, err, os.ErrNotExist, must.Sprint("removed: no live slot; the next task's first process makes its own"))
	must.NotEq(t, res.Envs[EnvRegion], res3.Envs[EnvRegion], must.Sprint("a fresh key"))

	// an older plugin's 0666 region beside limits goes too
	legacy := filepath.Join(res.Envs[EnvLimits], "usage")
	writeRegion(t, legacy, int32(os.Getpid()), myStart(t)+1)
	_, err = p.Reserve(ids)
	must.NoError(t, err)
	_, err = os.Stat(legacy)
	must.ErrorIs(t, err, os.ErrNotExist)
}

// What another user put in a reservation's region/ while it was an older
// plugin's 1733 (issue 44, point 11: a usage file made before the task's
// first process, which the library adopted and its maker could later
// write) is gone at Reserve: a directory named like a key, even one whose
// region looks live, is used only if the plugin made it. region/ is root's
// from then on, so nothing more can be put there.
func TestReserveRegionIgnoresOtherUsers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("makes files of another user: needs root")
	}
	p, _, _ := interposerPlugin(t)
	ids := shares(2, 0, 25)
	res, err := p.Reserve(ids)
	must.NoError(t, err)
	region := filepath.Join(res.Envs[EnvLimits], "region")
	must.NoError(t, os.Chmod(region, os.ModeSticky|0o733)) // an older plugin's
	const other = 65533
	squat := filepath.Join(region, "usage")
	writeRegion(t, squat, 1<<30, 1) // no live process
	fake := filepath.Join(region, strings.Repeat("ab", 16))
	must.NoError(t, os.Mkdir(fake, 0o777))
	writeRegion(t, filepath.Join(fake, "usage"), int32(os.Getpid()), myStart(t)) // looks live
	for _, f := range []string{squat, fake, filepath.Join(fake, "usage")} {
		must.NoError(t, os.Lchown(f, other, other))
	}

	res2, err := p.Reserve(ids)
	must.NoError(t, err)
	must.NotEq(t, filepath.Base(fake), res2.Envs[EnvRegion], must.Sprint("another user's directory is never the task's"))
	for _, f := range []string{squat, fake} {
		_, err := os.Lstat(f)
		must.ErrorIs(t, err, os.ErrNotExist, must.Sprint(f))
	}
	must.Eq(t, os.ModeDir|0o711, mode(t, region))
	entries, err := os.ReadDir(region)
	must.NoError(t, err)
	must.SliceLen(t, 1, entries)
	must.Eq(t, res2.Envs[EnvRegion], entries[0].Name())
}

func TestInterposerGarbageCollection(t *testing.T) {
	p, _, state := interposerPlugin(t)
	old, err := p.Reserve(shares(1, 0, 25))
	must.NoError(t, err)
	held, err := p.Reserve(shares(1, 25, 50))
	must.NoError(t, err)
	recent, err := p.Reserve(shares(1, 50, 75))
	must.NoError(t, err)
	writeRegion(t, filepath.Join(held.Envs[EnvLimits], "region", held.Envs[EnvRegion], "usage"), int32(os.Getpid()), myStart(t))
	stranger := filepath.Join(state, "not-ours")
	must.NoError(t, os.Mkdir(stranger, 0o755))
	long := time.Now().Add(-200 * time.Hour)
	for _, d := range []string{old.Envs[EnvLimits], held.Envs[EnvLimits], stranger} {
		must.NoError(t, os.Chtimes(d, long, long))
	}

	p.collectGarbage(p.cfg.Interposer, 168*time.Hour, time.Now())
	for dir, kept := range map[string]bool{
		old.Envs[EnvLimits]:    false, // not reserved for 200h
		held.Envs[EnvLimits]:   true,  // a live process holds its region
		recent.Envs[EnvLimits]: true,
		stranger:               true, // no limits file: not ours
	} {
		_, err := os.Stat(dir)
		must.Eq(t, kept, err == nil, must.Sprint(dir))
	}
}

func TestReservationDirName(t *testing.T) {
	byGPU := map[string][]int{"GPU-b": {3, 1, 2, 7}, "GPU-a": {0}}
	must.Eq(t, "GPU-a_0+GPU-b_1-3.7", reservationDirName([]string{"GPU-b", "GPU-a"}, byGPU))
	long := map[string][]int{}
	var uuids []string
	for i := range 8 {
		u := strings.Repeat("x", 40) + string(rune('a'+i))
		uuids = append(uuids, u)
		long[u] = []int{0, 1, 2, 3}
	}
	name := reservationDirName(uuids, long)
	must.StrHasPrefix(t, "h-", name)
	must.Eq(t, name, reservationDirName(uuids, long))
	must.StrNotContains(t, name, "/")
}

// The fingerprint loop collects state_dir at most every gcEvery.
func TestInterposerGarbageCollectionFromFingerprint(t *testing.T) {
	p, _, _ := interposerPlugin(t) // its first fingerprint collected once
	res, err := p.Reserve(shares(6, 0, 25))
	must.NoError(t, err)
	long := time.Now().Add(-200 * time.Hour)
	must.NoError(t, os.Chtimes(res.Envs[EnvLimits], long, long))

	p.maybeCollectGarbage(p.cfg.Interposer, time.Now())
	_, err = os.Stat(res.Envs[EnvLimits])
	must.NoError(t, err, must.Sprint("collected again within gcEvery"))

	p.maybeCollectGarbage(p.cfg.Interposer, time.Now().Add(gcEvery+time.Second))
	_, err = os.Stat(res.Envs[EnvLimits])
	must.True(t, os.IsNotExist(err))
}

// With interposer.unified_memory the limits file tells the library to make
// an opportunistic task's allocations managed memory, and how far beyond the
// share it may go: unified_oversubscription_pct of memory_bytes (default 100).
func TestReserveInterposerUnifiedMemory(t *testing.T) {
	for _, c := range []struct {
		extra string
		want  string
	}{
		{"", "\nmemory_bytes=4294967296\ncompute_pct=100\n# compute limited by MPS: CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25\nunified_memory=1\nunified_extra_bytes=4294967296\n"},
		{"unified_oversubscription_pct = 50\n", "\nunified_memory=1\nunified_extra_bytes=2147483648\n"},
		{"unified_oversubscription_pct = 0\n", "\nunified_memory=1\nunified_extra_bytes=0\n"},
	} {
		t.Run(c.extra, func(t *testing.T) {
			dir := t.TempDir()
			lib := filepath.Join(dir, "libgpushare-cuda.so")
			must.NoError(t, os.WriteFile(lib, []byte("not really"), 0o644))
			p, _, _ := newPlugin(t, fixtures.DGX1V100, `interposer {
  enabled = true
  library = "`+lib+`"
  state_dir = "`+filepath.Join(dir, "reservations")+`"
  unified_memory = true
  `+c.extra+`}`)
			res, err := p.Reserve(shares(3, 10, 35))
			must.NoError(t, err)
			limits, err := os.ReadFile(filepath.Join(res.Envs[EnvLimits], "limits"))
			must.NoError(t, err)
			must.StrContains(t, string(limits), c.want)
		})
	}
}
