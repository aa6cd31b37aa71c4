package cli

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// A detached demo (gpushare demo -detach) is the same demo run with -keep
// in a process of its own session, with no terminal: it keeps the cluster
// up until gpushare demo -stop. Its state directory holds demo.pid,
// demo.log (everything it printed) and, once the cluster is up, ready.
const (
	demoPidFile   = "demo.pid"
	demoLogFile   = "demo.log"
	demoReadyFile = "ready"
	// envDemoReady names the file the demo writes once the cluster is up
	// (set by -detach for the demo it starts).
	envDemoReady = "GPUSHARE_DEMO_READY"
)

// defaultDemoState is the state directory of a detached demo: one per
// user of the machine.
func defaultDemoState() string {
	return filepath.Join(os.TempDir(), "gpushare-demo-"+strconv.Itoa(os.Getuid()))
}

// demoRunning returns the pid of the detached demo of state, if it runs.
func demoRunning(state string) (int, bool) {
	b, err := os.ReadFile(filepath.Join(state, demoPidFile))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, false
	}
	return pid, syscall.Kill(pid, 0) == nil
}

// startDetached starts argv (the demo with -keep) in a session of its
// own, its output in state/demo.log and its pid in state/demo.pid, shows
// what it prints until the cluster is up, and returns: the demo keeps
// running. It fails, and stops the demo, if the demo ends first or this
// command is interrupted.
func startDetached(state string, argv []string, io IO) error {
	if pid, ok := demoRunning(state); ok {
		return fmt.Errorf("a detached demo already runs (pid %d, state %s): stop it first with gpushare demo -stop", pid, state)
	}
	if err := os.MkdirAll(state, 0o700); err != nil {
		return err
	}
	logPath, ready := filepath.Join(state, demoLogFile), filepath.Join(state, demoReadyFile)
	os.Remove(ready)
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logf.Close()
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer devnull.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = devnull, logf, logf
	cmd.Env = append(os.Environ(), envDemoReady+"="+ready)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // no terminal: no SIGHUP, no Ctrl-C of the shell
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting the demo: %w", err)
	}
	pid := cmd.Process.Pid
	if err := os.WriteFile(filepath.Join(state, demoPidFile), []byte(strconv.Itoa(pid)+"\n"), 0o600); err != nil {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	shown := int64(0)
	show := func() {
		b, err := os.ReadFile(logPath)
		if err == nil && int64(len(b)) > shown {
			_, _ = io.Out.Write(b[shown:])
			shown = int64(len(b))
		}
	}
	for {
		select {
		case err := <-exited:
			show()
			os.Remove(filepath.Join(state, demoPidFile))
			return fmt.Errorf("the demo ended before the cluster was up (%v); its output: %s", err, logPath)
		case <-sigs:
			_ = cmd.Process.Signal(syscall.SIGTERM)
			<-exited
			show()
			os.Remove(filepath.Join(state, demoPidFile))
			return errors.New("interrupted: the demo is stopped")
		case <-time.After(200 * time.Millisecond):
		}
		show()
		if _, err := os.Stat(ready); err == nil {
			show()
			fmt.Fprintf(io.Out, "==> the demo runs in the background: pid %d, its output in %s; stop it with: gpushare demo -stop", pid, logPath)
			if state != defaultDemoState() {
				fmt.Fprintf(io.Out, " -state %s", state)
			}
			fmt.Fprintln(io.Out)
			return nil
		}
	}
}

// stopDetached stops the detached demo of state (SIGTERM: it stops its
// cluster and ends) and waits, at most wait, until it has ended.
func stopDetached(state string, wait time.Duration, io IO) error {
	pidPath := filepath.Join(state, demoPidFile)
	pid, ok := demoRunning(state)
	if !ok {
		if pid != 0 {
			os.Remove(pidPath)
			return fmt.Errorf("the detached demo (pid %d in %s) is no longer running", pid, pidPath)
		}
		return fmt.Errorf("no detached demo runs: no %s (start one with gpushare demo -detach)", pidPath)
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		return fmt.Errorf("stopping pid %d: %w", pid, err)
	}
	fmt.Fprintf(io.Out, "==> stopping the detached demo (pid %d)\n", pid)
	deadline := time.Now().Add(wait)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			return fmt.Errorf("pid %d still runs %s after SIGTERM; its output: %s", pid, wait, filepath.Join(state, demoLogFile))
		}
		time.Sleep(100 * time.Millisecond)
	}
	os.Remove(pidPath)
	os.Remove(filepath.Join(state, demoReadyFile))
	fmt.Fprintf(io.Out, "==> stopped; its output stays in %s\n", filepath.Join(state, demoLogFile))
	return nil
}

// markReady writes the file -detach waits for, when it asked for one.
func markReady(text string) {
	if p := os.Getenv(envDemoReady); p != "" {
		_ = os.WriteFile(p, bytes.TrimSpace([]byte(text)), 0o600)
	}
}
