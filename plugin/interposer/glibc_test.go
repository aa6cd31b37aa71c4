package interposer

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// glibcBaseline is the newest glibc symbol version the shipped library may
// ask for (README, "A library every image can load"): 2.17, which every
// image the CUDA images are built on has (UBI 8: 2.28, Ubuntu 20.04: 2.31).
var glibcBaseline = [2]int{2, 17}

// glibcVersion parses "GLIBC_2.34" (or "GLIBC_2.2.5") into major, minor;
// ok is false for other version names (GLIBC_PRIVATE, GCC_3.0, ...).
func glibcVersion(name string) (v [2]int, ok bool) {
	rest, found := strings.CutPrefix(name, "GLIBC_")
	if !found {
		return v, false
	}
	parts := strings.Split(rest, ".")
	if len(parts) < 2 {
		return v, false
	}
	for i := range 2 {
		n, err := strconv.Atoi(parts[i])
		if err != nil {
			return v, false
		}
		v[i] = n
	}
	return v, true
}

func newerThanBaseline(v [2]int) bool {
	return v[0] > glibcBaseline[0] || v[0] == glibcBaseline[0] && v[1] > glibcBaseline[1]
}

// buildShipped builds the library with the recipe of `make build` (the
// GNUmakefile's bin/libgpushare-cuda.so, printed by make -n), into a
// temporary file instead of bin/.
func buildShipped(t *testing.T) string {
	t.Helper()
	build(t) // a C compiler, or skip
	if _, err := exec.LookPath("make"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no make in CI: %v", err)
		}
		t.Skipf("no make: %v", err)
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	const target = "bin/libgpushare-cuda.so"
	cmd := exec.Command("make", "-s", "-n", "-B", "--no-print-directory", target)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make -n %s: %v\n%s", target, err, out)
	}
	lib := filepath.Join(t.TempDir(), "libgpushare-cuda.so")
	var recipe string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "-o "+target+" ") {
			recipe = strings.Replace(line, "-o "+target+" ", "-o "+lib+" ", 1)
		}
	}
	if recipe == "" {
		t.Fatalf("make -n %s printed no compile line with -o %s:\n%s", target, target, out)
	}
	sh := exec.Command("sh", "-c", recipe)
	sh.Dir = root
	if out, err := sh.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", recipe, err, out)
	}
	return lib
}

// TestLibraryLoadsOnOldGlibc: the library as `make build` ships it asks for
// no glibc symbol version newer than the baseline, and needs libdl.so.2 and
// libpthread.so.0, where a glibc older than 2.34 keeps the dl* and
// pthread_* functions it calls. A preloaded library that asks for a version
// the image's glibc lacks stops every process of the task before main
// (before src/glibc_compat.h: 11 symbols at GLIBC_2.34 and fstat at 2.33).
func TestLibraryLoadsOnOldGlibc(t *testing.T) {
	lib := buildShipped(t)
	f, err := elf.Open(lib)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()

	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	var newer []string
	glibcSyms := 0
	for _, s := range syms {
		if s.Section != elf.SHN_UNDEF {
			continue
		}
		v, ok := glibcVersion(s.Version)
		if !ok {
			continue
		}
		glibcSyms++
		if newerThanBaseline(v) {
			newer = append(newer, s.Name+"@"+s.Version)
		}
		if slices.Contains(c23Redirected, s.Name) {
			newer = append(newer, s.Name+" (built on glibc 2.38 or newer it becomes __isoc23_"+s.Name+"@GLIBC_2.38)")
		}
	}
	needs, err := f.DynamicVersionNeeds()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range needs {
		for _, d := range n.Needs {
			if v, ok := glibcVersion(d.Dep); ok && newerThanBaseline(v) {
				newer = append(newer, n.Name+": "+d.Dep)
			}
		}
	}
	if glibcSyms == 0 {
		t.Skip("no GLIBC_ symbol versions: not built against glibc")
	}
	slices.Sort(newer)
	if len(newer) > 0 {
		t.Errorf("the library needs glibc newer than %d.%d (pin them in src/glibc_compat.h, or do without):\n  %s",
			glibcBaseline[0], glibcBaseline[1], strings.Join(newer, "\n  "))
	}

	libs, err := f.ImportedLibraries()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"libdl.so.2", "libpthread.so.0"} {
		if !slices.Contains(libs, want) {
			t.Errorf("the library does not need %s (needs %v): on a glibc before 2.34 its dl*/pthread_* functions would not resolve", want, libs)
		}
	}
	t.Logf("%d glibc symbols (baseline %d.%d); needs %v", glibcSyms, glibcBaseline[0], glibcBaseline[1], libs)
}

// c23Redirected are the functions glibc 2.38's headers redirect to
// __isoc23_* (GLIBC_2.38) under _GNU_SOURCE, which the library defines: a
// library built on a newer glibc than this machine's would need 2.38 for
// them (seen building on Ubuntu 24.04, glibc 2.39: __isoc23_strtol and
// __isoc23_strtoull). The library parses numbers itself (limits.c
// gs_parse_u64).
var c23Redirected = []string{"strtol", "strtoul", "strtoll", "strtoull", "strtoimax", "strtoumax",
	"sscanf", "fscanf", "scanf", "vsscanf", "vfscanf", "vscanf",
	"wcstol", "wcstoul", "wcstoll", "wcstoull", "swscanf", "fwscanf", "wscanf", "vswscanf", "vfwscanf", "vwscanf"}
