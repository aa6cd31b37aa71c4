package memlimit

import (
	"runtime/debug"
	"testing"
	"testing/fstest"

	"github.com/shoenig/test/must"
)

func noEnv(string) string { return "" }

func file(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }

// A Nomad task's cgroup (v2) under a slice that sets a larger limit: the
// task's own, the smallest on the path, is the one taken.
func TestChooseTakesTheSmallestCgroupLimitOnThePath(t *testing.T) {
	fsys := fstest.MapFS{
		"proc/self/cgroup":                                                file("0::/nomad.slice/share.slice/a1.sched.scope\n"),
		"sys/fs/cgroup/nomad.slice/memory.max":                            file("8589934592\n"),
		"sys/fs/cgroup/nomad.slice/share.slice/memory.max":                file("max\n"),
		"sys/fs/cgroup/nomad.slice/share.slice/a1.sched.scope/memory.max": file("2147483648\n"),
	}
	l, err := Choose("", noEnv, fsys)
	must.NoError(t, err)
	must.Eq(t, uint64(1932735283), l.Bytes)
	must.StrContains(t, l.Source, "90% of 2.0GiB")
	must.StrContains(t, l.Source, "/nomad.slice/share.slice/a1.sched.scope")

	// a parent's smaller limit holds the task too
	fsys["sys/fs/cgroup/nomad.slice/memory.max"] = file("1073741824\n")
	l, err = Choose("", noEnv, fsys)
	must.NoError(t, err)
	must.Eq(t, uint64(966367641), l.Bytes)
	must.StrContains(t, l.Source, "cgroup /nomad.slice")
}

func TestChooseReadsCgroupV1(t *testing.T) {
	fsys := fstest.MapFS{
		"proc/self/cgroup": file("12:pids:/docker/abc\n4:memory:/docker/abc\n1:name=systemd:/docker/abc\n"),
		"sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes": file("4294967296\n"),
		"sys/fs/cgroup/memory/memory.limit_in_bytes":            file("9223372036854771712\n"), // none
	}
	l, err := Choose("", noEnv, fsys)
	must.NoError(t, err)
	must.Eq(t, uint64(3865470566), l.Bytes)
}

func TestChooseWithoutACgroupLimitSetsNone(t *testing.T) {
	for name, fsys := range map[string]fstest.MapFS{
		"max":       {"proc/self/cgroup": file("0::/user.slice\n"), "sys/fs/cgroup/user.slice/memory.max": file("max\n")},
		"no file":   {"proc/self/cgroup": file("0::/\n")},
		"no cgroup": {},
	} {
		l, err := Choose("", noEnv, fsys)
		must.NoError(t, err, must.Sprint(name))
		must.Eq(t, uint64(0), l.Bytes, must.Sprint(name))
		must.NotEq(t, "", l.Source, must.Sprint(name))
	}
	// a file that is not a limit is said, not taken
	l, err := Choose("", noEnv, fstest.MapFS{"proc/self/cgroup": file("0::/x\n"), "sys/fs/cgroup/x/memory.max": file("lots\n")})
	must.NoError(t, err)
	must.Eq(t, uint64(0), l.Bytes)
	must.StrContains(t, l.Source, `"lots" is not a memory limit`)
}

// The configuration first, then GOMEMLIMIT, then the cgroup.
func TestChooseOrder(t *testing.T) {
	fsys := fstest.MapFS{
		"proc/self/cgroup": file("0::/t\n"), "sys/fs/cgroup/t/memory.max": file("1073741824\n"),
	}
	env := func(k string) string {
		if k == "GOMEMLIMIT" {
			return "3GiB"
		}
		return ""
	}
	l, err := Choose("2GiB", env, fsys)
	must.NoError(t, err)
	must.Eq(t, Limit{Bytes: 2 << 30, Source: "memory_limit"}, l)
	l, err = Choose("", env, fsys)
	must.NoError(t, err)
	must.Eq(t, uint64(0), l.Bytes) // the runtime applied GOMEMLIMIT itself
	must.StrContains(t, l.Source, "GOMEMLIMIT=3GiB")
	l, err = Choose("off", noEnv, fsys)
	must.NoError(t, err)
	must.Eq(t, uint64(0), l.Bytes)
	must.StrContains(t, l.String(), "none")
	_, err = Choose("2G", noEnv, fsys)
	must.ErrorContains(t, err, `memory_limit = "2G": "2G" is not a size`)
	must.ErrorContains(t, Validate("0"), "at least 1 byte")
	must.NoError(t, Validate("off"))
}

func TestApplySetsTheRuntimesLimit(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
	must.Eq(t, int64(3<<30), Apply(Limit{Bytes: 3 << 30, Source: "memory_limit"}))
	must.Eq(t, int64(3<<30), Apply(Limit{Source: "GOMEMLIMIT=3GiB"})) // none chosen: left as it is
}
