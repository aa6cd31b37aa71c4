package interposer

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A process of a docker or exec task runs in a pid namespace of its own:
// its slot records its pid there (1 here), which on the host is another
// process (init). It holds a write lock on its slot while it lives, and
// the others ask the lock, not /proc: a process on the host, short of
// memory, does not take the namespaced process's charge for a dead one's
// (before the fix it found pid 1 with another start time and freed the
// 6 MiB: "alloc 0"). Once the namespaced process is killed the kernel
// drops its lock and its memory comes back. Needs root and unshare(1).
// (Issue 29, defect 4; the garbage collector's side: plugin
// TestGarbageCollectionAcrossPidNamespaces.)
func TestLivenessAcrossPidNamespaces(t *testing.T) {
	b := build(t)
	unshare, err := exec.LookPath("unshare")
	if err != nil || os.Geteuid() != 0 || exec.Command(unshare, "--pid", "--fork", "--mount-proc", "true").Run() != nil {
		t.Skip("needs root and unshare --pid --fork --mount-proc")
	}
	dir := reservation(t, capOf(10*mib))
	r := run{limits: dir, mode: "direct"}
	c := r.cmd(b, "alloc:6291456", "wait")
	c.Args = append([]string{unshare, "--pid", "--fork", "--kill-child", "--mount-proc", c.Path}, c.Args[1:]...)
	c.Path = unshare
	in, err := c.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c.Stderr = os.Stderr
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(); c.Process.Kill(); c.Wait() })
	if l, _ := bufio.NewReader(out).ReadString('\n'); strings.TrimSpace(l) != "alloc 0" {
		t.Fatalf("holder in its pid namespace: %q", l)
	}

	// while it lives its 6 MiB count, though its pid means another process here
	check(t, r.output(t, b, "alloc:6291456", "info"), "alloc 2", fmt.Sprintf("info 0 %d %d", 4*mib, 10*mib))

	if err := c.Process.Signal(syscall.SIGKILL); err != nil { // unshare --kill-child: the holder too
		t.Fatal(err)
	}
	c.Wait()
	deadline := time.Now().Add(2 * time.Minute) // liveness only: the kernel reaps the holder
	for {
		got := r.output(t, b, "info")
		if got[0] == fmt.Sprintf("info 0 %d %d", 10*mib, 10*mib) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the killed holder's charge never came back: %q", got)
		}
		time.Sleep(10 * time.Millisecond)
	}
	check(t, r.output(t, b, "alloc:10485760"), "alloc 0")
}
