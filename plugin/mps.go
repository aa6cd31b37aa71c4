package plugin

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// AttrMPSDaemon is the device group attribute that says, with sharing =
// "mps", whether the node's MPS control daemon answers at the configured
// pipe directory: "running", or what is wrong ("not found at <dir>", ...).
// Constraints can use it: attribute "${device.attr.mps_daemon}" = "running".
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

// checkMPSDaemon looks for the MPS control daemon at dir: its "control"
// pipe must exist, be a FIFO, and have a reader. The last is tested by
// opening the pipe for writing without blocking (the kernel refuses with
// ENXIO when no process has it open for reading) and closing it at once,
// writing nothing: it neither blocks nor sends the daemon a command. It runs
// no nvidia-cuda-mps-control (which could hang on a wedged daemon).
func checkMPSDaemon(dir string) mpsStatus {
	pipe := filepath.Join(dir, "control")
	const fix = "start it with CUDA_MPS_PIPE_DIRECTORY=%s nvidia-cuda-mps-control -d, or set mps { pipe_directory } to where it runs"
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
	case st.Mode()&os.ModeNamedPipe == 0:
		return mpsStatus{
			State:  "not a pipe: " + pipe,
			Health: fmt.Sprintf("MPS control daemon: %s is not a named pipe (%v): tasks run time-sliced, without MPS (%s)", pipe, st.Mode().Type(), fmt.Sprintf(fix, dir)),
		}
	}
	fd, err := syscall.Open(pipe, syscall.O_WRONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err == nil {
		syscall.Close(fd)
		return mpsStatus{State: mpsRunning, Health: "MPS control daemon answers at " + dir}
	}
	if errors.Is(err, syscall.ENXIO) {
		return mpsStatus{
			State:  "not answering at " + dir,
			Health: fmt.Sprintf("MPS control daemon not answering at %s (the pipe is left over, no daemon reads it): tasks run time-sliced, without MPS (%s)", dir, fmt.Sprintf(fix, dir)),
		}
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
