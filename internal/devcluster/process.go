package devcluster

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Process is a long-running helper process of a test (the gpushare
// scheduler), in its own process group and killed with the test process.
type Process struct {
	cmd  *exec.Cmd
	log  *os.File
	done chan struct{}
}

// StartProcess starts bin with args, appending its output to logPath.
func StartProcess(logPath, bin string, args ...string) (*Process, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	p := &Process{cmd: cmd, log: logf, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	return p, nil
}

// Kill sends SIGKILL and waits for the process to exit.
func (p *Process) Kill() {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
	p.log.Close()
}

// Stop sends SIGTERM, waits up to 10s, then kills.
func (p *Process) Stop() {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
		p.log.Close()
	case <-time.After(10 * time.Second):
		p.Kill()
	}
}

// Exited reports whether the process has ended.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Pause stops the process (SIGSTOP) as a hung or descheduled machine would;
// Resume continues it (SIGCONT).
func (p *Process) Pause() { _ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGSTOP) }

// Resume continues a paused process.
func (p *Process) Resume() { _ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGCONT) }

// Pid is the process id (of the started binary itself, which leads its
// process group), for reading its /proc/<pid> figures.
func (p *Process) Pid() int { return p.cmd.Process.Pid }
