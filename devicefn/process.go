package devicefn

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// EnvShareIDs is the task environment variable Reserve sets to the share
// IDs it reserved, one entry per GPU separated by spaces, each
// "<GPU UUID>:<ranges>" with ranges such as "0-24,50" (FormatShareIDs);
// the shares of a shared MIG instance are "<MIG UUID>:<ranges>", and a
// whole MIG instance (mig_instances = "whole") is its bare "MIG-..." UUID,
// the instance's own Nomad ID. A process that carries it holds those shares: the sources read it from
// /proc/<pid>/environ to tell which share a GPU process uses.
const EnvShareIDs = "GPUSHARE_SHARE_IDS"

// ProcessUtil is what one holder of shares does on a GPU: the processes
// whose environment names the same shares of that GPU, and the share of
// time the GPU's SMs ran their kernels.
type ProcessUtil struct {
	// PIDs are the processes, sorted.
	PIDs []int
	// Shares are the share IDs of this GPU the processes hold, sorted by
	// index.
	Shares []string
	// SMUtilPct is the percentage of time the SMs ran the processes'
	// kernels (summed over the processes, at most 100).
	SMUtilPct uint32
}

// FormatShareIDs writes share IDs compactly for EnvShareIDs: GPUs in the
// order given, each "<uuid>:<ranges>".
func FormatShareIDs(uuids []string, byGPU map[string][]int) string {
	parts := make([]string, 0, len(uuids))
	for _, u := range uuids {
		idx := slices.Sorted(slices.Values(byGPU[u]))
		var rs []string
		for i := 0; i < len(idx); {
			j := i
			for j+1 < len(idx) && idx[j+1] == idx[j]+1 {
				j++
			}
			if i == j {
				rs = append(rs, strconv.Itoa(idx[i]))
			} else {
				rs = append(rs, strconv.Itoa(idx[i])+"-"+strconv.Itoa(idx[j]))
			}
			i = j + 1
		}
		parts = append(parts, u+":"+strings.Join(rs, ","))
	}
	return strings.Join(parts, " ")
}

// maxParsedShares bounds what ParseShareIDs expands: far above any node
// (shares_per_gpu is at most a few hundred, GPUs per node a few dozen).
const maxParsedShares = 1 << 16

// ParseShareIDs reads EnvShareIDs back into share IDs by GPU (or MIG
// device) UUID; a whole MIG instance's entry is its UUID alone.
func ParseShareIDs(s string) (map[string][]string, error) {
	out := map[string][]string{}
	n := 0
	for _, entry := range strings.Fields(s) {
		if strings.HasPrefix(entry, "MIG-") && !strings.Contains(entry, ":") {
			// a whole MIG instance: its ID is its UUID
			if _, dup := out[entry]; dup {
				return nil, fmt.Errorf("%w: MIG instance %s appears twice in %s", ErrBadShareID, entry, EnvShareIDs)
			}
			out[entry] = []string{entry}
			n++
			continue
		}
		i := strings.LastIndexByte(entry, ':')
		if i <= 0 || i == len(entry)-1 {
			return nil, fmt.Errorf("%w %q in %s: want <GPU UUID>:<ranges>, for example GPU-1234:0-24", ErrBadShareID, entry, EnvShareIDs)
		}
		uuid := entry[:i]
		if _, dup := out[uuid]; dup {
			return nil, fmt.Errorf("%w: GPU %s appears twice in %s", ErrBadShareID, uuid, EnvShareIDs)
		}
		for _, r := range strings.Split(entry[i+1:], ",") {
			lo, hi, isRange := strings.Cut(r, "-")
			a, err1 := strconv.Atoi(lo)
			b, err2 := a, error(nil)
			if isRange {
				b, err2 = strconv.Atoi(hi)
			}
			if err1 != nil || err2 != nil || a < 0 || b < a {
				return nil, fmt.Errorf("%w: range %q of GPU %s in %s: want k or lo-hi with 0 <= lo <= hi", ErrBadShareID, r, uuid, EnvShareIDs)
			}
			if n += b - a + 1; n > maxParsedShares {
				return nil, fmt.Errorf("%w: %s names more than %d shares", ErrBadShareID, EnvShareIDs, maxParsedShares)
			}
			for k := a; k <= b; k++ {
				out[uuid] = append(out[uuid], ShareID{UUID: uuid, Index: k}.String())
			}
		}
	}
	return out, nil
}

// ProcFS reads processes from a proc file system (Root "/proc" when
// empty). Tests point Root at a directory laid out like /proc.
type ProcFS struct {
	Root string
}

func (p ProcFS) root() string {
	if p.Root == "" {
		return "/proc"
	}
	return p.Root
}

// ErrNoProcess is wrapped when a process vanished (or never existed).
var ErrNoProcess = errors.New("no such process")

// Environ returns a process's environment. A vanished process wraps
// ErrNoProcess; a process of another user the caller may not read wraps
// fs.ErrPermission.
func (p ProcFS) Environ(pid int) (map[string]string, error) {
	b, err := os.ReadFile(filepath.Join(p.root(), strconv.Itoa(pid), "environ"))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
			return nil, fmt.Errorf("process %d: %w", pid, ErrNoProcess)
		}
		return nil, fmt.Errorf("process %d: %w", pid, err)
	}
	env := map[string]string{}
	for _, kv := range bytes.Split(b, []byte{0}) {
		if k, v, ok := bytes.Cut(kv, []byte{'='}); ok && len(k) > 0 {
			env[string(k)] = string(v)
		}
	}
	return env, nil
}

// PIDs lists the processes, sorted.
func (p ProcFS) PIDs() ([]int, error) {
	ents, err := os.ReadDir(p.root())
	if err != nil {
		return nil, err
	}
	var out []int
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil && pid > 0 {
			out = append(out, pid)
		}
	}
	slices.Sort(out)
	return out, nil
}

// Parent returns a process's parent PID, from /proc/<pid>/stat.
func (p ProcFS) Parent(pid int) (int, error) {
	_, f, err := p.stat(pid)
	if err != nil {
		return 0, err
	}
	if len(f) < 2 {
		return 0, fmt.Errorf("process %d: cannot read its parent from its stat", pid)
	}
	return strconv.Atoi(f[1])
}

// Incarnation names one program run by a process: its command name and
// start time (from /proc/<pid>/stat). A PID used again by another process
// has another start time, and a process that executes another program
// another name; its environment is read again then (an environment read
// between fork and exec is the parent's).
func (p ProcFS) Incarnation(pid int) (string, error) {
	comm, f, err := p.stat(pid)
	if err != nil {
		return "", err
	}
	if len(f) < 20 {
		return "", fmt.Errorf("process %d: cannot read its start time from its stat", pid)
	}
	return f[19] + " " + comm, nil
}

// stat reads /proc/<pid>/stat: the command name and the fields after it
// (from the state on).
func (p ProcFS) stat(pid int) (comm string, fields []string, err error) {
	b, err := os.ReadFile(filepath.Join(p.root(), strconv.Itoa(pid), "stat"))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
			return "", nil, fmt.Errorf("process %d: %w", pid, ErrNoProcess)
		}
		return "", nil, err
	}
	// "pid (comm) state ppid ...": comm may hold spaces and parentheses
	i, j := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if i < 0 || j < i {
		return "", nil, fmt.Errorf("process %d: cannot read its stat %q", pid, b)
	}
	return string(b[i+1 : j]), strings.Fields(string(b[j+1:])), nil
}

// Holder is the shares of one GPU a process's environment says it holds
// (EnvShareIDs); ok is false when it names none of that GPU.
func Holder(env map[string]string, uuid string) (shares []string, ok bool) {
	v, has := env[EnvShareIDs]
	if !has {
		return nil, false
	}
	byGPU, err := ParseShareIDs(v)
	if err != nil || len(byGPU[uuid]) == 0 {
		return nil, false
	}
	return byGPU[uuid], true
}

// Holders groups the processes running on the GPU uuid, with their SM
// utilisation, by the shares their environment names: one ProcessUtil per
// set of shares, its utilisation the sum of its processes' (at most 100).
// Processes that vanished, that the caller may not read, or that name no
// share of the GPU (an MPS server, a process started outside Nomad) are
// left out; unreadable returns the PIDs that could not be read for
// another reason than vanishing.
func (p ProcFS) Holders(uuid string, smByPID map[int]uint32) (out []ProcessUtil, unreadable map[int]error) {
	by := map[string]*ProcessUtil{}
	for _, pid := range slices.Sorted(maps.Keys(smByPID)) {
		env, err := p.Environ(pid)
		if err != nil {
			if !errors.Is(err, ErrNoProcess) {
				if unreadable == nil {
					unreadable = map[int]error{}
				}
				unreadable[pid] = err
			}
			continue
		}
		shares, ok := Holder(env, uuid)
		if !ok {
			continue
		}
		key := strings.Join(shares, ",")
		h := by[key]
		if h == nil {
			h = &ProcessUtil{Shares: shares}
			by[key] = h
		}
		h.PIDs = append(h.PIDs, pid)
		h.SMUtilPct = min(h.SMUtilPct+smByPID[pid], 100)
	}
	for _, k := range slices.Sorted(maps.Keys(by)) {
		out = append(out, *by[k])
	}
	return out, unreadable
}
