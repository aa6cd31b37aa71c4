package interposer

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// In a filesystem-isolated task the plugin mounts the reservation's
// directory read-only at /run/gpushare: when it holds a limits file, the
// library reads it there and ignores GPUSHARE_LIMITS, so a task that points
// the variable at limits of its own, or clears it, keeps its cap. The
// library is built here with the fixed directory moved into a temporary one
// (GS_FIXED_DIR), as the tests cannot mount over /run/gpushare.
func TestFixedPathWinsOverEnvironment(t *testing.T) {
	b := build(t)
	fixed := t.TempDir()
	if err := os.WriteFile(filepath.Join(fixed, "limits"), []byte(capOf(10*mib)), 0o444); err != nil {
		t.Fatal(err)
	}
	lib := filepath.Join(t.TempDir(), "libgpushare-cuda.so")
	args := append(append(append([]string{}, libFlags...), `-DGS_FIXED_DIR="`+fixed+`"`, "-o", lib),
		append(Sources("."), "-ldl", "-lpthread")...)
	if out, err := exec.Command(compiler(), args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", compiler(), strings.Join(args, " "), err, out)
	}
	fb := *b
	fb.lib = lib
	own := reservation(t, capOf(1<<30)) // the task's own, generous limits
	for name, limits := range map[string]string{"own GPUSHARE_LIMITS": own, "GPUSHARE_LIMITS cleared": ""} {
		t.Run(name, func(t *testing.T) {
			r := run{limits: limits, mode: "direct"}
			got := r.output(t, &fb, "alloc:8388608", "alloc:8388608", "info")
			check(t, got, "alloc 0", "alloc 2", "info 0 2097152 10485760")
		})
	}
	// the usage region is the fixed directory's
	if _, err := os.Stat(filepath.Join(fixed, "usage")); err != nil {
		t.Errorf("no usage region in the fixed directory: %v", err)
	}
	// without a limits file there, the variable rules (raw_exec)
	if err := os.Remove(filepath.Join(fixed, "limits")); err != nil {
		t.Fatal(err)
	}
	r := run{limits: reservation(t, capOf(20*mib)), mode: "direct"}
	check(t, r.output(t, &fb, "alloc:16777216", "alloc:8388608"), "alloc 0", "alloc 2")
}
