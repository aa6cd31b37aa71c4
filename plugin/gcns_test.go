package plugin

import (
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/shoenig/test/must"
	"golang.org/x/sys/unix"
)

// A docker or exec task records its pids from its own pid namespace: the
// host's /proc does not know them (here a pid above any pid_max, which no
// process on the host has). Its processes hold a write lock on their slot
// while they live (the library, src/region.c), and the garbage collector
// asks the lock: a reservation whose process holds it is kept however
// long ago it was reserved; once the lock is gone (the process exited, the
// kernel released it) it is collected. The lock is taken here as an OFD
// lock, which the collector's F_GETLK sees as another owner's, as it sees
// a task's process's. Before the fix the collector looked the pid up in
// /proc and removed the running task's directory. (Issue 29, defect 4;
// interposer TestLivenessAcrossPidNamespaces runs the library in a pid
// namespace of its own.)
func TestGarbageCollectionAcrossPidNamespaces(t *testing.T) {
	p, _, _ := interposerPlugin(t)
	res, err := p.Reserve(shares(1, 0, 25))
	must.NoError(t, err)
	dir := res.Envs[EnvLimits]
	usage := filepath.Join(dir, "region", res.Envs[EnvRegion], "usage")
	writeRegion(t, usage, 1<<30, 12345)
	b, err := os.ReadFile(usage)
	must.NoError(t, err)
	off := len(b) - regionSlots*slotSize + 5*slotSize // writeRegion's slot
	binary.LittleEndian.PutUint32(b[off+4:], 1)       // locked
	must.NoError(t, os.WriteFile(usage, b, 0o666))

	f, err := os.OpenFile(usage, os.O_RDWR, 0)
	must.NoError(t, err)
	defer f.Close()
	l := unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart, Start: int64(off), Len: slotSize}
	must.NoError(t, unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &l))

	long := time.Now().Add(-200 * time.Hour)
	must.NoError(t, os.Chtimes(dir, long, long))
	p.collectGarbage(p.cfg.Interposer, 168*time.Hour, time.Now())
	_, err = os.Stat(dir)
	must.NoError(t, err, must.Sprint("kept: its process lives, in a pid namespace of its own"))

	l.Type = unix.F_UNLCK // the process exits
	must.NoError(t, unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &l))
	p.collectGarbage(p.cfg.Interposer, 168*time.Hour, time.Now())
	_, err = os.Stat(dir)
	must.ErrorIs(t, err, os.ErrNotExist, must.Sprint("collected: no process holds its region"))
}
