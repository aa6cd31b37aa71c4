package memlimit

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/gpushare/gpushare/internal/bytesize"
)

// CgroupShare is the part of a cgroup's memory limit given to the Go
// runtime: the rest is room for what the limit counts and the runtime
// does not (the kernel's page cache charged to the cgroup, a burst
// between two collections).
const CgroupShare = 0.9

// Off is the configured value that sets no limit.
const Off = "off"

// Limit is a soft memory limit and where it came from.
type Limit struct {
	Bytes uint64 // 0: no limit
	// Source: "memory_limit" (the configuration), "GOMEMLIMIT=<value>"
	// (the environment, which the runtime read itself), the share of
	// which cgroup's limit, or why there is none
	Source string
}

func (l Limit) String() string {
	if l.Bytes == 0 {
		return "none (" + l.Source + ")"
	}
	return bytesize.String(l.Bytes) + " (" + l.Source + ")"
}

// Validate checks a configured memory_limit: "", "off" or a size.
func Validate(configured string) error {
	_, err := parse(configured)
	return err
}

// parse reads a configured value: its bytes, or 0 for "" (Choose picks)
// and "off".
func parse(configured string) (uint64, error) {
	switch v := strings.TrimSpace(configured); {
	case v == "", strings.EqualFold(v, Off):
		return 0, nil
	default:
		b, err := bytesize.Parse(v)
		if err != nil {
			return 0, fmt.Errorf("memory_limit = %q: %w; write a size such as \"2GiB\", or \"off\" for no limit", configured, err)
		}
		return b, nil
	}
}

// Choose picks the limit: configured (a size, or "off"), else GOMEMLIMIT
// when getenv has it, else CgroupShare of the smallest memory limit on
// the path of the cgroup the process runs in, read from fsys (the root
// file system: proc/self/cgroup, sys/fs/cgroup/...), cgroup v2 or v1.
func Choose(configured string, getenv func(string) string, fsys fs.FS) (Limit, error) {
	b, err := parse(configured)
	switch {
	case err != nil:
		return Limit{}, err
	case b > 0:
		return Limit{Bytes: b, Source: "memory_limit"}, nil
	case strings.TrimSpace(configured) != "":
		return Limit{Source: "memory_limit = \"off\""}, nil
	}
	if v := getenv("GOMEMLIMIT"); v != "" {
		return Limit{Source: "GOMEMLIMIT=" + v}, nil
	}
	limit, where, err := cgroupLimit(fsys)
	switch {
	case err != nil:
		return Limit{Source: "no cgroup memory limit read: " + err.Error()}, nil
	case limit == 0:
		return Limit{Source: "its cgroup sets no memory limit"}, nil
	}
	return Limit{Bytes: uint64(float64(limit) * CgroupShare), Source: fmt.Sprintf("%.0f%% of %s, the memory limit of cgroup %s", CgroupShare*100, bytesize.String(limit), where)}, nil
}

// Apply gives the runtime the limit, when Choose chose one (GOMEMLIMIT
// the runtime applied at start), and returns the limit in force.
func Apply(l Limit) int64 {
	if l.Bytes > 0 {
		debug.SetMemoryLimit(int64(min(l.Bytes, 1<<62)))
	}
	return debug.SetMemoryLimit(-1)
}

// cgroupLimit is the smallest memory limit on the path of the process's
// cgroup, and the cgroup that sets it; 0 when none does.
func cgroupLimit(fsys fs.FS) (uint64, string, error) {
	src, err := fs.ReadFile(fsys, "proc/self/cgroup")
	if err != nil {
		return 0, "", err
	}
	var v2, v1 string // the paths of the cgroup in each hierarchy ("/" at least)
	sc := bufio.NewScanner(bytes.NewReader(src))
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), ":", 3)
		if len(f) != 3 {
			continue
		}
		if f[0] == "0" && f[1] == "" {
			v2 = f[2]
		}
		for _, c := range strings.Split(f[1], ",") {
			if c == "memory" {
				v1 = f[2]
			}
		}
	}
	switch {
	case v1 != "":
		return smallest(fsys, "sys/fs/cgroup/memory", v1, "memory.limit_in_bytes")
	case v2 != "":
		return smallest(fsys, "sys/fs/cgroup", v2, "memory.max")
	}
	return 0, "", errors.New("proc/self/cgroup names no memory cgroup")
}

// smallest walks from the cgroup at dir up to the mount's root and
// returns the smallest limit file sets ("max", or v1's near-2^63, is
// none; a missing file is none: the root cgroup has none).
func smallest(fsys fs.FS, mount, dir, file string) (uint64, string, error) {
	var best uint64
	var where string
	for p := path.Clean("/" + dir); ; p = path.Dir(p) {
		b, err := fs.ReadFile(fsys, path.Join(mount, p, file))
		if err == nil {
			v := strings.TrimSpace(string(b))
			if n, err := strconv.ParseUint(v, 10, 64); err == nil && n > 0 && n < 1<<62 && (best == 0 || n < best) {
				best, where = n, p
			} else if err != nil && v != "max" {
				return 0, "", fmt.Errorf("%s: %q is not a memory limit", path.Join(mount, p, file), v)
			}
		}
		if p == "/" {
			return best, where, nil
		}
	}
}
