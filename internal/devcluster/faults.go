package devcluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// KillAgent SIGKILLs a client agent and everything it started (its
// plugin, executors, tasks), as a machine that dies would: Nomad marks the
// node down once its heartbeats stop. The first client runs inside the
// server's agent and cannot be killed alone.
func (c *Cluster) KillAgent(name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, p := range c.procs {
		if p.name != name {
			continue
		}
		if i == 0 {
			return fmt.Errorf("client %s runs in the server's agent", name)
		}
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
		return nil
	}
	return fmt.Errorf("no client agent %s", name)
}

// PluginPIDs returns the PIDs of the gpushare device plugin processes the
// agent of a client runs (Nomad launches the plugin as a child process).
func (c *Cluster) PluginPIDs(name string) ([]int, error) {
	c.mu.Lock()
	agent := 0
	for _, p := range c.procs {
		if p.name == name {
			agent = p.cmd.Process.Pid
		}
	}
	c.mu.Unlock()
	if agent == 0 {
		return nil, fmt.Errorf("no agent runs client %s", name)
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.Contains(string(cmdline), "nomad-device-gpushare") {
			continue
		}
		if parentOf(pid) == agent {
			out = append(out, pid)
		}
	}
	return out, nil
}

// parentOf reads a process's parent PID from /proc (0 when unknown).
func parentOf(pid int) int {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0
	}
	// pid (comm) state ppid ...; comm may hold spaces and parentheses
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		f := strings.Fields(s[i+1:])
		if len(f) >= 2 {
			ppid, _ := strconv.Atoi(f[1])
			return ppid
		}
	}
	return 0
}
