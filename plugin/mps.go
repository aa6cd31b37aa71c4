package plugin

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// AttrMPSDaemon is the device group attribute that says, with sharing =
// "mps", whether tasks get an MPS control daemon: "running", or what is
// wrong. With mps { daemons = "reservation" } "running" means the plugin
// started (and quit) a probe daemon, so it can start one per reservation;
// else "control not found: <binary>" or "cannot start <binary>". With
// daemons = "node" it means the node's daemon answers at pipe_directory;
// else "not found at <dir>", "not answering at <dir>", ... Constraints can
// use it: attribute "${device.attr.mps_daemon}" = "running".
const AttrMPSDaemon = "mps_daemon"

// mpsRunning is the attribute's value when the daemon answers.
const mpsRunning = "running"

// mpsStatus is what the fingerprint found at the MPS pipe directory.
type mpsStatus struct {
	// State is the attribute's value: mpsRunning or what is wrong.
	State string
	// Health is the note for the GPUs' health description.
	Health string
}

func (s mpsStatus) running() bool { return s.State == mpsRunning }

// checkMPSDaemon looks for the node's MPS control daemon at dir (mps {
// daemons = "node" }). Its "control" entry must have a listener: a UNIX
// socket (current drivers; tested by connecting and closing at once,
// sending nothing) or a named pipe (older drivers; tested by opening it for
// writing without blocking, which the kernel refuses with ENXIO when no
// process reads it). It runs no nvidia-cuda-mps-control (which could hang
// on a wedged daemon).
func checkMPSDaemon(dir string) mpsStatus {
	pipe := filepath.Join(dir, "control")
	const fix = "start it with CUDA_MPS_PIPE_DIRECTORY=%s nvidia-cuda-mps-control -d, or set mps { pipe_directory } to where it runs"
	notAnswering := mpsStatus{
		State:  "not answering at " + dir,
		Health: fmt.Sprintf("MPS control daemon not answering at %s (the pipe is left over, no daemon reads it): tasks run time-sliced, without MPS (%s)", dir, fmt.Sprintf(fix, dir)),
	}
	running := mpsStatus{State: mpsRunning, Health: "MPS control daemon answers at " + dir}
	st, err := os.Lstat(pipe)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return mpsStatus{
			State:  "not found at " + dir,
			Health: fmt.Sprintf("MPS control daemon not found at %s: tasks run time-sliced, without MPS (%s)", dir, fmt.Sprintf(fix, dir)),
		}
	case err != nil:
		return mpsStatus{
			State:  "unreadable at " + dir,
			Health: fmt.Sprintf("MPS control daemon: cannot check %s: %v (the plugin must be able to read the pipe directory)", pipe, err),
		}
	case st.Mode()&os.ModeSocket != 0:
		// SOCK_SEQPACKET in the drivers seen (535); a stream socket else
		c, err := net.DialTimeout("unixpacket", pipe, time.Second)
		if errors.Is(err, syscall.EPROTOTYPE) {
			c, err = net.DialTimeout("unix", pipe, time.Second)
		}
		switch {
		case err == nil:
			c.Close()
			return running
		case errors.Is(err, syscall.ECONNREFUSED):
			return notAnswering
		}
		return mpsStatus{
			State:  "unreadable at " + dir,
			Health: fmt.Sprintf("MPS control daemon: cannot connect to %s: %v (the plugin must be able to reach the control socket, as root does)", pipe, err),
		}
	case st.Mode()&os.ModeNamedPipe == 0:
		return mpsStatus{
			State:  "not a pipe: " + pipe,
			Health: fmt.Sprintf("MPS control daemon: %s is neither a socket nor a named pipe (%v): tasks run time-sliced, without MPS (%s)", pipe, st.Mode().Type(), fmt.Sprintf(fix, dir)),
		}
	}
	fd, err := syscall.Open(pipe, syscall.O_WRONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err == nil {
		syscall.Close(fd)
		return running
	}
	if errors.Is(err, syscall.ENXIO) {
		return notAnswering
	}
	return mpsStatus{
		State:  "unreadable at " + dir,
		Health: fmt.Sprintf("MPS control daemon: cannot open %s: %v (the plugin must be able to write to the control pipe, as root does)", pipe, err),
	}
}

// withMPSNote is a GPU's health description: a healthy GPU's carries the
// MPS note (shares stay healthy without the daemon: CUDA then runs the tasks
// time-sliced, which works, only without MPS's limits); an unhealthy GPU's
// keeps its own reason alone, the one that matters (mps_daemon still says
// how the daemon is).
func withMPSNote(healthy bool, reason, note string) string {
	if !healthy || note == "" {
		return reason
	}
	if reason == "" {
		return note
	}
	return reason + "; " + note
}
