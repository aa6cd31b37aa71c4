package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// useNomadBinary puts a nomad binary first on PATH ($GPUSHARE_NOMAD, the
// repository's bin/nomad, or the one on PATH) and points NOMAD_ADDR
// nowhere, so `gpushare job lint` parses with the binary; without one the
// test is skipped (gpushare links no jobspec parser).
func useNomadBinary(t *testing.T) {
	t.Helper()
	bin := os.Getenv("GPUSHARE_NOMAD")
	if bin == "" {
		if root, err := filepath.Abs(".."); err == nil && exec.Command(filepath.Join(root, "bin", "nomad"), "version").Run() == nil {
			bin = filepath.Join(root, "bin", "nomad")
		} else if p, err := exec.LookPath("nomad"); err == nil {
			bin = p
		} else {
			t.Skip("no nomad binary to parse jobspecs with: set GPUSHARE_NOMAD, run make nomad, or put nomad on PATH")
		}
	}
	dir := t.TempDir()
	if err := os.Symlink(bin, filepath.Join(dir, "nomad")); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv("NOMAD_ADDR", "http://127.0.0.1:1")
}
