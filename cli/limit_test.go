package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/shoenig/test/must"
)

// TestMain removes what buildInterposer built.
func TestMain(m *testing.M) {
	code := m.Run()
	if interposerBin.dir != "" {
		os.RemoveAll(interposerBin.dir)
	}
	os.Exit(code)
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]uint64{
		"":        0,
		"4GiB":    4 << 30,
		"512MiB":  512 << 20,
		"512mib":  512 << 20,
		"1.5GiB":  3 << 29,
		"8 MiB":   8 << 20,
		"64KiB":   64 << 10,
		"2TiB":    2 << 40,
		"1GB":     1e9,
		"1048576": 1 << 20,
		"100B":    100,
	} {
		got, err := parseSize(in)
		must.NoError(t, err, must.Sprint(in))
		must.Eq(t, want, got, must.Sprint(in))
	}
	for in, msg := range map[string]string{
		"4G":      `"4G" is not a size: write a number and a unit, such as 4GiB or 512MiB`,
		"GiB":     `"GiB" is not a size`,
		"lots":    `"lots" is not a size`,
		"-1GiB":   "must be at least 1 byte",
		"0":       "leave -memory out for no cap",
		"1e30GiB": "too large",
	} {
		_, err := parseSize(in)
		must.ErrorContains(t, err, msg, must.Sprint(in))
	}
}

func TestParsePercent(t *testing.T) {
	for in, want := range map[string]int{"25": 25, "25%": 25, " 100% ": 100, "1": 1} {
		got, err := parsePercent(in)
		must.NoError(t, err, must.Sprint(in))
		must.Eq(t, want, got)
	}
	for in, msg := range map[string]string{
		"0":    "0% is out of range: from 1 to 100",
		"101%": "101% is out of range",
		"2.5":  `"2.5" is not a percentage: write a whole number from 1 to 100`,
		"%":    "is not a percentage",
	} {
		_, err := parsePercent(in)
		must.ErrorContains(t, err, msg, must.Sprint(in))
	}
}

func TestLimitFlags(t *testing.T) {
	var e strings.Builder
	o, code := parseLimit([]string{"-memory", "4GiB", "-compute", "25%", "-class", "production", "--", "./prog", "-x", "y"}, IO{Out: &e, Err: &e})
	must.Eq(t, -1, code, must.Sprint(e.String()))
	must.Eq(t, limitOpts{memory: 4 << 30, compute: 25, class: "production", argv: []string{"./prog", "-x", "y"}}, o)
	must.Eq(t, "# written by gpushare limit\nmemory_bytes=4294967296\ncompute_pct=25\nclass=production\n", limitsFile(o))
	// without a memory cap the key is left out: the library caps nothing
	o, code = parseLimit([]string{"prog"}, IO{Out: &e, Err: &e})
	must.Eq(t, -1, code)
	must.Eq(t, "# written by gpushare limit\ncompute_pct=100\n", limitsFile(o))

	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"-memory", "4G", "--", "p"}, `-memory: "4G" is not a size`},
		{[]string{"-compute", "150", "--", "p"}, "-compute: 150% is out of range"},
		{[]string{"-class", "batch", "--", "p"}, `-class "batch": want "production", "opportunistic" or empty`},
		{[]string{"-memory", "1GiB"}, "no program to run: put it after the flags"},
		{[]string{"-nope"}, "flag provided but not defined: -nope"},
	} {
		code, _, errOut := run(append([]string{"limit"}, c.args...)...)
		must.Eq(t, 1, code, must.Sprint(c.args)) // bad usage, as Nomad's commands exit
		must.StrContains(t, errOut, c.msg)
	}
	code, _, errOut := run("limit", "-h")
	must.Eq(t, 0, code)
	must.StrContains(t, errOut, "gpushare limit -memory 4GiB -compute 25 -- python train.py")
}

func TestLimitEnv(t *testing.T) {
	got := limitEnv([]string{"A=1", "LD_PRELOAD=/x.so", "GPUSHARE_LIMITS=/mine", "B=2"}, "/lib.so", "/tmp/d")
	must.Eq(t, []string{"A=1", "B=2", "LD_PRELOAD=/lib.so /x.so", "GPUSHARE_LIMITS=/tmp/d"}, got)
	got = limitEnv([]string{"A=1"}, "/lib.so", "/tmp/d")
	must.Eq(t, []string{"A=1", "LD_PRELOAD=/lib.so", "GPUSHARE_LIMITS=/tmp/d"}, got)
}

func TestFindLibrary(t *testing.T) {
	_, err := findLibrary("/nonexistent/libgpushare-cuda.so")
	must.ErrorContains(t, err, "-library /nonexistent/libgpushare-cuda.so: not a file: build it with 'make build'")

	t.Chdir(t.TempDir())
	_, err = findLibrary("")
	must.ErrorContains(t, err, "libgpushare-cuda.so not found (looked at ")
	must.ErrorContains(t, err, "bin/libgpushare-cuda.so): build it with 'make build'")
	code, _, errOut := run("limit", "-memory", "1GiB", "--", "true")
	must.Eq(t, 1, code)
	must.StrContains(t, errOut, "or name it with -library PATH")

	must.NoError(t, os.Mkdir("bin", 0o755))
	must.NoError(t, os.WriteFile(filepath.Join("bin", libraryName), nil, 0o644))
	got, err := findLibrary("")
	must.NoError(t, err)
	must.Eq(t, libraryName, filepath.Base(got))
	must.True(t, filepath.IsAbs(got))
}

// interposer is the library, the fake driver and cuprog from
// plugin/interposer, built with cc once per test run.
type interposer struct{ dir, lib, fake, prog string }

var (
	interposerOnce sync.Once
	interposerBin  interposer
	interposerErr  error
)

func buildInterposer(t *testing.T) interposer {
	t.Helper()
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no C compiler (%s) in CI: %v", cc, err)
		}
		t.Skipf("no C compiler (%s): %v", cc, err)
	}
	interposerOnce.Do(func() {
		dir, err := os.MkdirTemp("", "gpushare-limit-test")
		if err != nil {
			interposerErr = err
			return
		}
		interposerBin.dir = dir // for TestMain to remove, even if a step fails
		src := filepath.Join("..", "plugin", "interposer")
		srcs, _ := filepath.Glob(filepath.Join(src, "src", "*.c"))
		b := interposer{dir: dir, lib: filepath.Join(dir, libraryName), fake: filepath.Join(dir, "libcuda.so.1"), prog: filepath.Join(dir, "cuprog")}
		for _, args := range [][]string{
			append(append([]string{"-shared", "-fPIC", "-O2", "-fvisibility=hidden", "-o", b.lib}, srcs...), "-ldl", "-lpthread"),
			{"-shared", "-fPIC", "-O2", "-Wl,-Bsymbolic", "-Wl,-soname,libcuda.so.1", "-o", b.fake, filepath.Join(src, "testdata", "fakecuda.c"), filepath.Join(src, "testdata", "fakegpu.c"), "-lpthread"},
			{"-O2", "-DLINKED", "-o", b.prog, filepath.Join(src, "testdata", "cuprog.c"), "-L" + dir, "-l:libcuda.so.1", "-ldl"},
		} {
			if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
				interposerErr = &buildError{cc, args, err, string(out)}
				return
			}
		}
		interposerBin = b
	})
	must.NoError(t, interposerErr)
	return interposerBin
}

type buildError struct {
	cc   string
	args []string
	err  error
	out  string
}

func (e *buildError) Error() string {
	return e.cc + " " + strings.Join(e.args, " ") + ": " + e.err.Error() + "\n" + e.out
}

// gpushare limit -memory 8MiB -- cuprog: the third 4 MiB allocation is
// refused with CUDA_ERROR_OUT_OF_MEMORY (2) and the program sees an 8 MiB
// GPU; without -memory the same program gets all three.
func TestLimitHoldsTheCap(t *testing.T) {
	b := buildInterposer(t)
	t.Setenv("LD_LIBRARY_PATH", b.dir)
	t.Setenv("GPUSHARE_REAL_LIBCUDA", b.fake)
	t.Setenv("FAKECUDA_TOTAL_BYTES", "1073741824")
	t.Setenv("GPUSHARE_LIMITS", t.TempDir()) // a stale value is replaced
	prog := []string{"--", b.prog, "direct", "alloc:4194304", "alloc:4194304", "alloc:4194304", "info", "total"}

	code, out, errOut := run(append([]string{"limit", "-memory", "8MiB", "-library", b.lib}, prog...)...)
	must.Eq(t, 0, code, must.Sprint(errOut))
	must.Eq(t, "alloc 0\nalloc 0\nalloc 2\ninfo 0 0 8388608\ntotal 0 8388608\n", out)
	must.StrContains(t, errOut, "gpushare limit: memory 8MiB, compute 100% ("+b.lib+")")

	code, out, errOut = run(append([]string{"limit", "-q", "-library", b.lib}, prog...)...)
	must.Eq(t, 0, code, must.Sprint(errOut))
	must.Eq(t, "alloc 0\nalloc 0\nalloc 0\ninfo 0 1061158912 1073741824\ntotal 0 1073741824\n", out)
	must.Eq(t, "", errOut)
}

// The program's exit code passes through, it sees the limits the flags
// asked for, and the directory is gone afterwards.
func TestLimitRunsAndCleansUp(t *testing.T) {
	b := buildInterposer(t)
	code, out, errOut := run("limit", "-q", "-memory", "1GiB", "-compute", "25%", "-class", "opportunistic", "-library", b.lib,
		"--", "sh", "-c", `echo "$GPUSHARE_LIMITS"; echo "$LD_PRELOAD"; cat "$GPUSHARE_LIMITS/limits"; test -f "$GPUSHARE_LIMITS/usage" && exit 7`)
	must.Eq(t, 7, code, must.Sprint(errOut))
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	must.SliceLen(t, 6, lines)
	must.StrContains(t, lines[0], "gpushare-limit-")
	must.Eq(t, b.lib, lines[1])
	must.Eq(t, "# written by gpushare limit\nmemory_bytes=1073741824\ncompute_pct=25\nclass=opportunistic\n", strings.Join(lines[2:], "\n")+"\n")
	_, err := os.Stat(lines[0])
	must.True(t, os.IsNotExist(err), must.Sprint("the limits directory is left behind"))

	code, _, errOut = run("limit", "-q", "-library", b.lib, "--", "./no-such-program")
	must.Eq(t, 127, code)
	must.StrContains(t, errOut, "./no-such-program: program not found")
	code, _, errOut = run("limit", "-q", "-library", b.lib, "--", "sh", "-c", "kill -KILL $$")
	must.Eq(t, 137, code)
	must.StrContains(t, errOut, "sh was killed by signal 9 (killed)")
}
