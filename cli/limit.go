package cli

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/gpushare/gpushare/internal/bytesize"
	"github.com/gpushare/gpushare/scheduler/placement"
)

// libraryName is the interposer `make build` writes into bin/.
const libraryName = "libgpushare-cuda.so"

const limitSynopsis = "limit [flags] -- PROGRAM [ARGS...]"

const limitHelp = `Runs PROGRAM under the CUDA interposer (%s) with the limits a share
would get, so you can see how a program behaves before trusting it with a job.
It writes the limits into a private temporary directory, starts PROGRAM with
LD_PRELOAD and GPUSHARE_LIMITS pointing there, waits for it, removes the
directory and exits with PROGRAM's exit code.

Example:
  gpushare limit -memory 4GiB -compute 25 -- python train.py --epochs 1

Under a 4 GiB cap, cuMemGetInfo reports 4 GiB total and an allocation past it
returns CUDA_ERROR_OUT_OF_MEMORY; the cap is summed over every process PROGRAM
starts. Under -compute 25 its kernel launches, all its processes together, are
paced to 25%% of the GPU's time, measured with CUDA events. It is not a security boundary (see plugin/interposer/README.md for what
escapes it). The library is looked up next to the gpushare binary, then in
./bin/ (after make build), unless -library names it.

Without a GPU, -fake runs PROGRAM over the fake CUDA driver the interposer's
tests use (plugin/interposer/testdata/fakecuda.c: 1 GiB of device memory per
process, FAKECUDA_TOTAL_BYTES to change it; addresses never backed). In a
checkout, 'make build fake-driver' writes it to bin/fakecuda/libcuda.so.1,
with a test program, bin/fakecuda/cuprog:
  make build fake-driver
  bin/gpushare limit -fake -memory 8MiB -- bin/fakecuda/cuprog direct alloc:4194304 alloc:4194304 alloc:4194304 info
prints "alloc 0", "alloc 0", "alloc 2" (CUDA_ERROR_OUT_OF_MEMORY: the cap) and
"info 0 0 8388608". The fake driver is looked up in fakecuda/ next to the
gpushare binary, then in ./bin/fakecuda/.

Flags:
`

// limitOpts are the parsed flags of gpushare limit.
type limitOpts struct {
	memory  uint64 // bytes; 0: no memory cap
	compute int    // percent, 1-100
	class   string
	library string
	fake    bool // over the fake CUDA driver (make fake-driver)
	quiet   bool
	argv    []string
}

func runLimit(args []string, io IO) int {
	o, code := parseLimit(args, io)
	if code >= 0 {
		return code
	}
	lib, err := findLibrary(o.library)
	if err != nil {
		fmt.Fprintf(io.Err, "gpushare limit: %v\n", err)
		return 1
	}
	driver := ""
	if o.fake {
		if driver, err = findFakeDriver(); err != nil {
			fmt.Fprintf(io.Err, "gpushare limit: %v\n", err)
			return 1
		}
	}
	code, err = limitRun(o, lib, driver, io)
	if err != nil {
		fmt.Fprintf(io.Err, "gpushare limit: %v\n", err)
	}
	return code
}

// parseLimit parses the flags; code is -1 to go on, else the exit code.
func parseLimit(args []string, io IO) (o limitOpts, code int) {
	fs := newFlags("limit", limitSynopsis, io)
	fs.Usage = func() {
		fmt.Fprintf(io.Err, "Usage: gpushare %s\n\n", limitSynopsis)
		fmt.Fprintf(io.Err, limitHelp, libraryName)
		fs.PrintDefaults()
	}
	memory := fs.String("memory", "", "GPU memory cap, summed over all of PROGRAM's processes: a size such as 4GiB, 512MiB, 1.5GiB or 1048576 (bytes); empty: no memory cap")
	compute := fs.String("compute", "100", "share of the GPU's time in percent, 1-100 (25 or 25%); written to the limits for the library's compute pacing")
	fs.StringVar(&o.class, "class", "", "the share's class: production or opportunistic (empty: normal)")
	fs.StringVar(&o.library, "library", "", "path to "+libraryName+" (default: next to gpushare, then ./bin/)")
	fs.BoolVar(&o.fake, "fake", false, "run over the fake CUDA driver (no GPU needed): bin/fakecuda/libcuda.so.1, built by 'make fake-driver' (see above)")
	fs.BoolVar(&o.quiet, "q", false, "do not print the limits line on stderr before PROGRAM starts")
	if code, ok := parse(fs, args); !ok {
		return o, code
	}
	bad := func(format string, a ...any) (limitOpts, int) {
		fmt.Fprintf(io.Err, "gpushare limit: "+format+"\n", a...)
		fmt.Fprintf(io.Err, "Run 'gpushare limit -h' for the flags and an example.\n")
		return o, exitUsage
	}
	var err error
	if o.memory, err = parseSize(*memory); err != nil {
		return bad("-memory: %v", err)
	}
	if o.compute, err = parsePercent(*compute); err != nil {
		return bad("-compute: %v", err)
	}
	switch placement.Class(o.class) {
	case placement.ClassNormal, placement.ClassProduction, placement.ClassOpportunistic:
	default:
		return bad("-class %q: want %q, %q or empty", o.class, placement.ClassProduction, placement.ClassOpportunistic)
	}
	o.argv = fs.Args()
	if len(o.argv) == 0 {
		return bad("no program to run: put it after the flags, e.g. gpushare limit -memory 4GiB -- ./prog args")
	}
	return o, -1
}

// parseSize reads a byte size (bytesize.Parse). "" is 0: no cap.
func parseSize(s string) (uint64, error) {
	if strings.TrimSpace(s) == "" {
		return 0, nil
	}
	b, err := bytesize.Parse(s)
	if errors.Is(err, bytesize.ErrTooSmall) {
		return 0, fmt.Errorf("%w (leave -memory out for no cap)", err)
	}
	return b, err
}

// parsePercent reads "25" or "25%": a whole number from 1 to 100.
func parsePercent(s string) (int, error) {
	t := strings.TrimSuffix(strings.TrimSpace(s), "%")
	v, err := strconv.Atoi(strings.TrimSpace(t))
	if err != nil {
		return 0, fmt.Errorf("%q is not a percentage: write a whole number from 1 to 100, such as 25", s)
	}
	if v < 1 || v > 100 {
		return 0, fmt.Errorf("%d%% is out of range: from 1 to 100", v)
	}
	return v, nil
}

// findLibrary returns the interposer: the -library path, else next to the
// running gpushare binary, else ./bin/.
func findLibrary(flagPath string) (string, error) {
	if flagPath != "" {
		if st, err := os.Stat(flagPath); err != nil || st.IsDir() {
			return "", fmt.Errorf("-library %s: not a file: build it with 'make build' (it writes bin/%s)", flagPath, libraryName)
		}
		return filepath.Abs(flagPath)
	}
	var tried []string
	if exe, err := os.Executable(); err == nil {
		if exe, err = filepath.EvalSymlinks(exe); err == nil {
			tried = append(tried, filepath.Join(filepath.Dir(exe), libraryName))
		}
	}
	tried = append(tried, filepath.Join("bin", libraryName))
	for _, p := range tried {
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return filepath.Abs(p)
		}
	}
	return "", fmt.Errorf("%s not found (looked at %s): build it with 'make build' in the gpushare repository (it writes bin/%s), "+
		"or put the one from the release archive next to gpushare, or name it with -library PATH",
		libraryName, strings.Join(tried, ", "), libraryName)
}

// fakeDriverPath is where 'make fake-driver' writes the fake driver,
// relative to bin/.
var fakeDriverPath = filepath.Join("fakecuda", "libcuda.so.1")

// findFakeDriver returns the fake CUDA driver: in fakecuda/ next to the
// running gpushare binary, else in ./bin/fakecuda/.
func findFakeDriver() (string, error) {
	var tried []string
	if exe, err := os.Executable(); err == nil {
		if exe, err = filepath.EvalSymlinks(exe); err == nil {
			tried = append(tried, filepath.Join(filepath.Dir(exe), fakeDriverPath))
		}
	}
	tried = append(tried, filepath.Join("bin", fakeDriverPath))
	for _, p := range tried {
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return filepath.Abs(p)
		}
	}
	return "", fmt.Errorf("-fake: the fake CUDA driver was not found (looked at %s): build it with 'make fake-driver' in the gpushare repository (it writes bin/%s)",
		strings.Join(tried, ", "), fakeDriverPath)
}

// fakeEnv points env at the fake driver: the library forwards to it
// (GPUSHARE_REAL_LIBCUDA), and a program linked against libcuda.so.1
// loads it (its directory first in LD_LIBRARY_PATH).
func fakeEnv(env []string, driver string) []string {
	out := make([]string, 0, len(env)+2)
	path := filepath.Dir(driver)
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "GPUSHARE_REAL_LIBCUDA":
			continue
		case "LD_LIBRARY_PATH":
			if v != "" {
				path += ":" + v
			}
			continue
		}
		out = append(out, kv)
	}
	return append(out, "LD_LIBRARY_PATH="+path, "GPUSHARE_REAL_LIBCUDA="+driver)
}

// limitsFile is the limits file the library reads (plugin/interposer/README.md).
func limitsFile(o limitOpts) string {
	var b strings.Builder
	b.WriteString("# written by gpushare limit\n")
	if o.memory > 0 {
		fmt.Fprintf(&b, "memory_bytes=%d\n", o.memory)
	}
	fmt.Fprintf(&b, "compute_pct=%d\n", o.compute)
	if o.class != "" {
		fmt.Fprintf(&b, "class=%s\n", o.class)
	}
	return b.String()
}

// limitEnv is env with GPUSHARE_LIMITS set to dir and lib first in LD_PRELOAD.
func limitEnv(env []string, lib, dir string) []string {
	out := make([]string, 0, len(env)+2)
	preload := lib
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "GPUSHARE_LIMITS":
			continue
		case "LD_PRELOAD":
			if v != "" {
				preload += " " + v
			}
			continue
		}
		out = append(out, kv)
	}
	return append(out, "LD_PRELOAD="+preload, "GPUSHARE_LIMITS="+dir)
}

// limitRun runs the program under the library (over the fake CUDA driver
// when driver is not "") and returns its exit code.
func limitRun(o limitOpts, lib, driver string, io IO) (int, error) {
	dir, err := os.MkdirTemp("", "gpushare-limit-")
	if err != nil {
		return 1, fmt.Errorf("cannot make the limits directory: %v (set TMPDIR to a writable directory)", err)
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "limits"), []byte(limitsFile(o)), 0o600); err != nil {
		return 1, err
	}
	// the usage region the program's processes share; the library sizes it
	if err := os.WriteFile(filepath.Join(dir, "usage"), nil, 0o600); err != nil {
		return 1, err
	}
	if !o.quiet {
		mem := "no memory cap"
		if o.memory > 0 {
			mem = "memory " + formatSize(o.memory)
		}
		class := ""
		if o.class != "" {
			class = ", class " + o.class
		}
		over := ""
		if driver != "" {
			over = ", over the fake CUDA driver " + driver
		}
		fmt.Fprintf(io.Err, "gpushare limit: %s, compute %d%%%s (%s%s)\n", mem, o.compute, class, lib, over)
	}
	cmd := exec.Command(o.argv[0], o.argv[1:]...)
	cmd.Env = limitEnv(os.Environ(), lib, dir)
	if driver != "" {
		cmd.Env = fakeEnv(cmd.Env, driver)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, io.Out, io.Err
	// Ctrl-C reaches the program from the terminal (same process group): we
	// only stay alive to remove the directory. SIGTERM and SIGHUP sent to us
	// alone are passed on.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			return 127, fmt.Errorf("%s: program not found (give a path such as ./%s, or a command on PATH)", o.argv[0], filepath.Base(o.argv[0]))
		}
		return 126, fmt.Errorf("cannot start %s: %v", o.argv[0], err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for {
		select {
		case s := <-sigs:
			if s == syscall.SIGTERM || s == syscall.SIGHUP {
				_ = cmd.Process.Signal(s)
			}
		case err := <-done:
			return exitCode(cmd, err)
		}
	}
}

// exitCode is the program's exit code, or 128+signal as a shell reports it.
func exitCode(cmd *exec.Cmd, err error) (int, error) {
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return 1, err
	}
	st, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ok && st.Signaled() {
		return 128 + int(st.Signal()), fmt.Errorf("%s was killed by signal %d (%v)", cmd.Args[0], int(st.Signal()), st.Signal())
	}
	return cmd.ProcessState.ExitCode(), nil
}

// formatSize prints bytes in the largest binary unit that divides them.
func formatSize(b uint64) string {
	for _, u := range []struct {
		s string
		m uint64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if b%u.m == 0 {
			return fmt.Sprintf("%d%s", b/u.m, u.s)
		}
	}
	return fmt.Sprintf("%d bytes", b)
}
