package devcluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// NomadVersion is the Nomad release the project is pinned to.
const NomadVersion = "v1.11.3"

// SupportedNomad reports whether versionLine, the first line `nomad
// version` prints, names a supported release: 1.11.x (NomadVersion, the
// release the tests build) or 2.0.x (the e2e suite passes on v2.0.5: make
// e2e-nomad2).
func SupportedNomad(versionLine string) bool {
	return strings.HasPrefix(versionLine, "Nomad v1.11.") || strings.HasPrefix(versionLine, "Nomad v2.0.")
}

// RepoRoot finds the repository root from the working directory.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "e2e", "nomad", "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("not inside the gpushare repository (no e2e/nomad/go.mod above the working directory)")
		}
		dir = parent
	}
}

// NomadBinary returns the path of the Nomad binary, building it from the
// tools module e2e/nomad into bin/nomad when it is missing or of another
// version. $GPUSHARE_NOMAD overrides the path. The first build takes
// minutes; afterwards the binary is reused.
func NomadBinary(ctx context.Context, root string, log func(string)) (string, error) {
	if p := os.Getenv("GPUSHARE_NOMAD"); p != "" {
		return p, nil
	}
	bin := filepath.Join(root, "bin", "nomad")
	if out, err := exec.CommandContext(ctx, bin, "version").Output(); err == nil && strings.Contains(string(out), "Nomad "+NomadVersion) {
		return bin, nil
	}
	log("building Nomad " + NomadVersion + " from the Go module proxy into bin/nomad (first time only, a few minutes)")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/hashicorp/nomad")
	cmd.Dir = filepath.Join(root, "e2e", "nomad")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building nomad: %v\n%s", err, out)
	}
	return bin, nil
}

// BuildPlugin builds the device plugin into dir/nomad-device-gpushare.
func BuildPlugin(ctx context.Context, root, dir string) (string, error) {
	return build(ctx, root, dir, "nomad-device-gpushare")
}

// BuildCLI builds the gpushare command into dir/gpushare.
func BuildCLI(ctx context.Context, root, dir string) (string, error) {
	return build(ctx, root, dir, "gpushare")
}

func build(ctx context.Context, root, dir, name string) (string, error) {
	bin := filepath.Join(dir, name)
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/"+name)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_CFLAGS=-O2 -g -Wno-deprecated-declarations")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building %s: %v\n%s", name, err, out)
	}
	return bin, nil
}
