package interposer

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// The usage region a task can write is not world-writable on the host
// (issue 29, part 4): the plugin makes the reservation's region directory
// 1733 (anyone may create a file in it, nobody list it or remove another's
// file) and the task's first process creates the usage file there, 0600
// and its own user's. Before, the plugin created the file 0666, and a task
// running as a non-root user could not have created one itself. The
// reservation directory is laid out as the plugin's Reserve lays it out
// (plugin/limits.go; TestReserveInterposer checks the plugin's side).
func TestUsageRegionNotWorldWritable(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("runs the task as other users: needs root")
	}
	b := build(t)
	// the binaries and the reservation, reachable by the task's users
	if err := os.Chmod(b.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "gpushare-reservation")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	region := filepath.Join(dir, "region")
	for _, err := range []error{
		os.Chmod(dir, 0o755),
		os.WriteFile(filepath.Join(dir, "limits"), []byte("memory_bytes="+strconv.Itoa(512<<20)+"\n"), 0o444),
		os.Mkdir(region, 0o700),
		os.Chmod(region, os.ModeSticky|0o733),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	const taskUID, otherUID = 65534, 65533
	as := func(uid uint32, args ...string) (string, string, error) {
		c := run{limits: dir, mode: "direct"}.cmd(b, args...)
		c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
		var stderr strings.Builder
		c.Stderr = &stderr
		out, err := c.Output()
		return strings.TrimSpace(string(out)), stderr.String(), err
	}

	// a task started by a non-root user works: its first process makes
	// the region
	out, stderr, err := as(taskUID, "alloc:"+strconv.Itoa(256<<20), "info")
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	check(t, strings.Split(out, "\n"), "alloc 0", "info 0 "+strconv.Itoa(256<<20)+" "+strconv.Itoa(512<<20))
	usage := filepath.Join(region, "usage")
	st, err := os.Stat(usage)
	if err != nil {
		t.Fatalf("the task made no usage region in %s: %v", region, err)
	}
	if uid := st.Sys().(*syscall.Stat_t).Uid; st.Mode() != 0o600 || uid != taskUID {
		t.Errorf("usage region: mode %v, owner %d; want 0600, %d", st.Mode(), uid, taskUID)
	}
	// the task's later processes open it (the first one's charge went
	// with it), under the same cap
	out, stderr, err = as(taskUID, "alloc:"+strconv.Itoa(512<<20), "alloc:"+strconv.Itoa(256<<20))
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	check(t, strings.Split(out, "\n"), "alloc 0", "alloc 2")

	// no file in the reservation's directory is world-writable
	err = filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() && fi.Mode()&0o002 != 0 {
			t.Errorf("%s is world-writable: %v", p, fi.Mode())
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}

	// another user cannot open it for writing, nor replace it
	sh := exec.Command("/bin/sh", "-c", "exec 3>>"+usage+" || exit 7; exit 0")
	sh.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: otherUID, Gid: otherUID}}
	if err := sh.Run(); err == nil {
		t.Errorf("uid %d opened %s for writing", otherUID, usage)
	}
	sh = exec.Command("/bin/sh", "-c", "rm -f "+usage)
	sh.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: otherUID, Gid: otherUID}}
	_ = sh.Run()
	if _, err := os.Stat(usage); err != nil {
		t.Errorf("uid %d removed %s: %v", otherUID, usage, err)
	}

	// a process of the task under another user: no memory, and why
	out, stderr, err = as(otherUID, "alloc:"+strconv.Itoa(1<<20))
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	check(t, strings.Split(out, "\n"), "alloc 2")
	if !strings.Contains(stderr, "belongs to another user: every process of a task must run as the user") {
		t.Errorf("stderr does not say why: %q", stderr)
	}
}
