package cli

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/gpushare/gpushare/internal/devcluster"
)

// PluginName is the device plugin's file name: the release archive ships it
// beside gpushare, make build writes it beside bin/gpushare.
const PluginName = "nomad-device-gpushare"

// Errors of finding the demo's binaries; the messages around them say how
// to get what is missing.
var (
	ErrNoNomad  = errors.New("no Nomad binary found")
	ErrNoPlugin = errors.New("no device plugin binary found")
)

// demoHost is what the demo looks at to find its binaries, so a test can
// give it a directory of its own instead of the machine's.
type demoHost struct {
	// exe is the running gpushare binary.
	exe string
	// root is the gpushare checkout the working directory is in, or "".
	root string
	// lookPath finds a command on PATH (exec.LookPath).
	lookPath func(string) (string, error)
	// getenv reads the environment (os.Getenv).
	getenv func(string) string
}

// thisHost is the demoHost of the running process.
func thisHost() demoHost {
	h := demoHost{lookPath: exec.LookPath, getenv: os.Getenv}
	if exe, err := os.Executable(); err == nil {
		if real, err := filepath.EvalSymlinks(exe); err == nil {
			exe = real
		}
		h.exe = exe
	}
	h.root, _ = devcluster.RepoRoot()
	return h
}

// nomad finds the Nomad binary: -nomad, else $GPUSHARE_NOMAD, else in a
// checkout "" (the caller builds bin/nomad, as make nomad does), else
// nomad on PATH.
func (h demoHost) nomad(flag string) (string, error) {
	if flag != "" {
		return executable("-nomad", flag)
	}
	if p := h.getenv("GPUSHARE_NOMAD"); p != "" {
		return executable("$GPUSHARE_NOMAD", p)
	}
	if h.root != "" {
		return "", nil
	}
	if p, err := h.lookPath("nomad"); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%w: pass -nomad PATH or put nomad on PATH; download Nomad %s for linux/%s from "+
		"https://releases.hashicorp.com/nomad/%s/ (unzip it: one binary), or in a checkout of gpushare run make nomad",
		ErrNoNomad, devcluster.NomadVersion, runtime.GOARCH, strings.TrimPrefix(devcluster.NomadVersion, "v"))
}

// plugin finds the device plugin: -plugin, else beside the gpushare
// binary (the release archive's layout, and bin/ after make build), else
// in a checkout "" (the caller builds it).
func (h demoHost) plugin(flag string) (string, error) {
	if flag != "" {
		return executable("-plugin", flag)
	}
	if h.exe != "" {
		beside := filepath.Join(filepath.Dir(h.exe), PluginName)
		if _, err := os.Stat(beside); err == nil {
			return executable("the plugin beside gpushare", beside)
		}
	}
	if h.root != "" {
		return "", nil
	}
	dir := "the gpushare binary's directory"
	if h.exe != "" {
		dir = filepath.Dir(h.exe)
	}
	return "", fmt.Errorf("%w: %s is not in %s; keep it beside gpushare as the release archive "+
		"gpushare_<version>_linux_%s.tar.gz unpacks them, or pass -plugin PATH (in a checkout of gpushare, make build writes bin/%s)",
		ErrNoPlugin, PluginName, dir, runtime.GOARCH, PluginName)
}

// executable checks that path names an executable file; what names it
// (a flag, a variable) goes into the error.
func executable(what, path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("%s %s: %w", what, path, err)
	}
	if fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
		return "", fmt.Errorf("%s %s: not an executable file (chmod +x it?)", what, path)
	}
	return filepath.Abs(path)
}

// nomadVersion runs `nomad version` and returns its first line, or an error
// that says the binary does not run.
func nomadVersion(path string) (string, error) {
	out, err := exec.Command(path, "version").Output()
	if err != nil {
		return "", fmt.Errorf("%s version: %w (is it a Nomad binary for linux/%s?)", path, err, runtime.GOARCH)
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	if !strings.HasPrefix(line, "Nomad v") {
		return "", fmt.Errorf("%s version printed %q: not Nomad", path, line)
	}
	return line, nil
}

// commandName is how a user in the working directory wd runs the gpushare
// binary exe: "gpushare" when PATH finds that very binary, else a path
// relative to wd when exe is below it, else exe.
func (h demoHost) commandName(wd string) string {
	if h.exe == "" {
		return "gpushare"
	}
	if p, err := h.lookPath("gpushare"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil && real == h.exe {
			return "gpushare"
		}
	}
	if rel, err := filepath.Rel(wd, h.exe); err == nil && !strings.HasPrefix(rel, "..") {
		return "./" + rel
	}
	if h.root != "" {
		// go run: the binary is gone when it ends; make build's stays
		if rel, err := filepath.Rel(wd, filepath.Join(h.root, "bin", "gpushare")); err == nil {
			return "./" + rel
		}
	}
	return h.exe
}
