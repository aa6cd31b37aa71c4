package interposer

import (
	"encoding/binary"
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
// (region/<key>) 1733 (anyone may create a file in it, nobody list it or
// remove another's file) and the task's first process creates the usage
// file there, 0600 and its own user's. Before, the plugin created the file 0666, and a task
// running as a non-root user could not have created one itself. The
// reservation directory is laid out as the plugin's Reserve lays it out
// (plugin/limits.go; TestReserveInterposer checks the plugin's side).
func TestUsageRegionNotWorldWritable(t *testing.T) {
	b, dir := asOtherUsers(t, "runs the task as other users: needs root")
	// region/ root's (0711), region/<key> 1733, the key in the task's
	// environment (issue 44: TestForeignUsageFileNotAdopted)
	const key = "00112233445566778899aabbccddeeff"
	region := filepath.Join(dir, "region", key)
	for _, err := range []error{
		os.Chmod(dir, 0o755),
		os.WriteFile(filepath.Join(dir, "limits"), []byte("memory_bytes="+strconv.Itoa(512<<20)+"\n"), 0o444),
		os.Mkdir(filepath.Dir(region), 0o711),
		os.Mkdir(region, 0o700),
		os.Chmod(region, os.ModeSticky|0o733),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	const taskUID, otherUID = 65534, 65533
	as := func(uid uint32, args ...string) (string, string, error) {
		c := run{limits: dir, mode: "direct", env: []string{"GPUSHARE_REGION=" + key}}.cmd(b, args...)
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

// A usage file another user made before the task's first process is not
// the task's (issue 44, point 11): the library opens the region in
// region/<key>, the key the plugin's Reserve put in the task's
// environment (GPUSHARE_REGION), which no other user reads, so a file
// another user could make, here region/usage, 0666, in a region/ left 1733
// by an older plugin (the plugin now makes region/ root's, 0711:
// TestReserveRegionIgnoresOtherUsers), is neither adopted nor a reason to
// refuse memory. Before, the task's first process adopted it, and when its
// maker then wrote a huge total into it, every later allocation of the
// task failed.
func TestForeignUsageFileNotAdopted(t *testing.T) {
	b, dir := asOtherUsers(t, "runs the task and another user: needs root")
	const key = "0123456789abcdef0123456789abcdef"
	region := filepath.Join(dir, "region")
	for _, err := range []error{
		os.Chmod(dir, 0o755),
		os.WriteFile(filepath.Join(dir, "limits"), []byte("memory_bytes="+strconv.Itoa(512<<20)+"\n"), 0o444),
		os.Mkdir(region, 0o700),
		os.Chmod(region, os.ModeSticky|0o733),
		os.Mkdir(filepath.Join(region, key), 0o700),
		os.Chmod(filepath.Join(region, key), os.ModeSticky|0o733),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	const taskUID, otherUID = 65534, 65533
	as := func(uid uint32, env []string, args ...string) []string {
		c := run{limits: dir, mode: "direct", env: env}.cmd(b, args...)
		c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
		var stderr strings.Builder
		c.Stderr = &stderr
		out, err := c.Output()
		if err != nil {
			t.Fatalf("%v\n%s", err, stderr.String())
		}
		if stderr.Len() > 0 {
			t.Logf("uid %d: %s", uid, stderr.String())
		}
		return strings.Split(strings.TrimSpace(string(out)), "\n")
	}
	task := []string{"GPUSHARE_REGION=" + key}

	// the other user makes the file a task's first process would open
	squat := filepath.Join(region, "usage")
	sh := exec.Command("/bin/sh", "-c", "umask 0 && : >"+squat)
	sh.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: otherUID, Gid: otherUID}}
	if out, err := sh.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}

	check(t, as(taskUID, task, "alloc:"+strconv.Itoa(256<<20), "info"),
		"alloc 0", "info 0 "+strconv.Itoa(256<<20)+" "+strconv.Itoa(512<<20))
	st, err := os.Stat(squat)
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() > 0 {
		// adopted: its maker, who may write it, fills the total
		b, err := os.ReadFile(squat)
		if err != nil {
			t.Fatal(err)
		}
		const fixed = 8 + 16 + 40 + 8 + 8*72 + 1024*8*8 + 1024*24 // regionshare_test.go's layout
		binary.LittleEndian.PutUint64(b[8+len(b)-fixed:], 1<<62)
		if err := os.WriteFile(squat, b, 0o666); err != nil {
			t.Fatal(err)
		}
		t.Errorf("the task's process adopted %s, which uid %d made (%d bytes)", squat, otherUID, st.Size())
	}
	// the task's next process shares the region and keeps its memory
	check(t, as(taskUID, task, "alloc:"+strconv.Itoa(256<<20), "info"),
		"alloc 0", "info 0 "+strconv.Itoa(256<<20)+" "+strconv.Itoa(512<<20))
	usage := filepath.Join(region, key, "usage")
	st, err = os.Stat(usage)
	if err != nil {
		t.Fatalf("the task made no usage region in %s: %v", filepath.Dir(usage), err)
	}
	if uid := st.Sys().(*syscall.Stat_t).Uid; st.Mode() != 0o600 || uid != taskUID {
		t.Errorf("usage region: mode %v, owner %d; want 0600, %d", st.Mode(), uid, taskUID)
	}

	// a process without the key (its environment cleared) never opens the
	// other user's file either: it has no region, so no memory, and says so
	got := as(taskUID, nil, "alloc:"+strconv.Itoa(1<<20))
	check(t, got, "alloc 2")
}

// asOtherUsers builds the binaries and makes a reservation directory (not
// under the test's own temporary directory: other users must reach both),
// or skips the test when it cannot run processes as other users.
func asOtherUsers(t *testing.T, why string) (*binaries, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip(why)
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
	return b, dir
}
