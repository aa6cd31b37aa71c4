package devcluster

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestUnescapeMount(t *testing.T) {
	for in, want := range map[string]string{
		`/tmp/a\040b/secrets`: "/tmp/a b/secrets",
		`/tmp/plain`:          "/tmp/plain",
		`/tmp/end\04`:         `/tmp/end\04`, // too short to be an escape
	} {
		if got := unescapeMount(in); got != want {
			t.Errorf("unescapeMount(%q) = %q, want %q", in, got, want)
		}
	}
}

// A stopped cluster leaves no mounts behind: the allocation directories a
// Nomad client mounts are detached, deepest first, and the directory can be
// removed.
func TestUnmountUnder(t *testing.T) {
	dir := t.TempDir()
	outer := filepath.Join(dir, "alloc", "secrets")
	if err := os.MkdirAll(outer, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", outer, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("cannot mount tmpfs here (%v): needs root, as the e2e Nomad clients do", err)
	}
	inner := filepath.Join(outer, "nested")
	if err := os.Mkdir(inner, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", inner, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	unmountUnder(dir)
	mounts, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(mounts), dir) {
		t.Fatalf("mounts left under %s", dir)
	}
	if err := os.RemoveAll(filepath.Join(dir, "alloc")); err != nil {
		t.Fatal(err)
	}
}

func TestSupportedNomad(t *testing.T) {
	for line, want := range map[string]bool{
		"Nomad " + NomadVersion: true,
		"Nomad v1.11.0":         true,
		"Nomad v2.0.5":          true,
		"Nomad v2.0.0-rc.1":     true,
		"Nomad v1.10.5":         false,
		"Nomad v1.1.0":          false,
		"Nomad v2.1.0":          false,
		"Nomad v20.0.1":         false,
		"":                      false,
	} {
		if got := SupportedNomad(line); got != want {
			t.Errorf("SupportedNomad(%q) = %v, want %v", line, got, want)
		}
	}
}
