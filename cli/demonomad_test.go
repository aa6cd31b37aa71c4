package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoenig/test/must"
)

// syncOut is a strings.Builder safe to write from the build's goroutine
// and read from the test's.
type syncOut struct {
	mu sync.Mutex
	b  strings.Builder
}

func (o *syncOut) say(format string, a ...any) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.b.WriteString("==> " + strings.TrimSpace(fmt.Sprintf(format, a...)) + "\n")
}

func (o *syncOut) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.String()
}

// In a checkout with no Nomad binary, the demo says so before it builds:
// where it looked, what it builds, about how long on this machine's cores
// and how to skip the build; while the build runs it says how far it is;
// it does not build when bin/nomad is Nomad's pinned version.
func TestDemoSaysItBuildsNomadFirst(t *testing.T) {
	root := t.TempDir()
	must.NoError(t, os.MkdirAll(filepath.Join(root, "bin"), 0o755))
	out := &syncOut{}
	var before string
	built := false
	fake := func(ctx context.Context, r, bin string, progress func(string)) error {
		before = out.String() // what the user saw before the build began
		progress("github.com/hashicorp/nomad/api")
		for !strings.Contains(out.String(), "packages compiled") {
			time.Sleep(time.Millisecond)
		}
		built = true
		return os.WriteFile(bin, []byte("#!/bin/sh\necho 'Nomad v1.11.3'\n"), 0o755)
	}
	h := demoHost{root: root, lookPath: noPath, getenv: func(string) string { return "" }}
	bin, err := checkoutNomad(context.Background(), h, 2, fake, 5*time.Millisecond, out.say)
	must.NoError(t, err)
	must.True(t, built)
	must.EqOp(t, filepath.Join(root, "bin", "nomad"), bin)
	for _, want := range []string{
		"no Nomad binary found; looked at: -nomad (not given), $GPUSHARE_NOMAD (not set), " + bin + " (missing), nomad on PATH (none)",
		"building Nomad v1.11.3 from the Go module proxy into " + bin + ": about 9 minutes on this machine's 2 cores",
		"to skip the build: stop this (Ctrl-C) and pass -nomad PATH, set $GPUSHARE_NOMAD, or install Nomad v1.11.3 on PATH",
	} {
		must.StrContains(t, before, want)
	}
	must.StrContains(t, out.String(), "1 packages compiled (last: github.com/hashicorp/nomad/api)")
	must.StrContains(t, out.String(), "built "+bin+" in ")

	// now bin/nomad is there: no build, nothing said
	out = &syncOut{}
	bin, err = checkoutNomad(context.Background(), h, 2, func(context.Context, string, string, func(string)) error {
		t.Fatal("built although bin/nomad is Nomad v1.11.3")
		return nil
	}, time.Hour, out.say)
	must.NoError(t, err)
	must.EqOp(t, filepath.Join(root, "bin", "nomad"), bin)
	must.EqOp(t, "", out.String())

	// another version in bin/nomad, the pinned one on PATH: that one, no build
	must.NoError(t, os.WriteFile(bin, []byte("#!/bin/sh\necho 'Nomad v1.10.0'\n"), 0o755))
	pathDir := t.TempDir()
	onPath := filepath.Join(pathDir, "nomad")
	must.NoError(t, os.WriteFile(onPath, []byte("#!/bin/sh\necho 'Nomad v1.11.3'\n"), 0o755))
	h.lookPath = func(string) (string, error) { return onPath, nil }
	got, err := checkoutNomad(context.Background(), h, 2, func(context.Context, string, string, func(string)) error {
		t.Fatal("built although nomad on PATH is Nomad v1.11.3")
		return nil
	}, time.Hour, out.say)
	must.NoError(t, err)
	must.EqOp(t, onPath, got)

	// a failed build is the demo's error
	must.NoError(t, os.WriteFile(onPath, []byte("#!/bin/sh\necho 'Nomad v1.9.0'\n"), 0o755))
	out = &syncOut{}
	_, err = checkoutNomad(context.Background(), h, 8, func(context.Context, string, string, func(string)) error {
		return errors.New("building nomad: no network")
	}, time.Hour, out.say)
	must.ErrorContains(t, err, "no network")
	must.StrContains(t, out.String(), bin+" (Nomad v1.10.0, not v1.11.3), nomad on PATH: "+onPath+" (Nomad v1.9.0, not v1.11.3)")
	must.StrContains(t, out.String(), "about 3 minutes on this machine's 8 cores")
}

// The build's estimate: 18 core-minutes, at least 2.
func TestNomadBuildMinutes(t *testing.T) {
	must.EqOp(t, 18, nomadBuildMinutes(1))
	must.EqOp(t, 9, nomadBuildMinutes(2))
	must.EqOp(t, 5, nomadBuildMinutes(4))
	must.EqOp(t, 2, nomadBuildMinutes(64))
	must.EqOp(t, 18, nomadBuildMinutes(0))
}

// A kept demo says how to stop it: Ctrl-C from a terminal; a detached one
// (no terminal) the command that stops it, never Ctrl-C.
func TestDemoStopHint(t *testing.T) {
	t.Setenv(envDemoReady, "")
	must.EqOp(t, "press Ctrl-C to stop", demoStopHint("gpushare"))

	t.Setenv(envDemoReady, filepath.Join(defaultDemoState(), demoReadyFile))
	hint := demoStopHint("./bin/gpushare")
	must.EqOp(t, "stop it with: ./bin/gpushare demo -stop", hint)
	must.StrNotContains(t, hint, "Ctrl-C")

	state := t.TempDir()
	t.Setenv(envDemoReady, filepath.Join(state, demoReadyFile))
	hint = demoStopHint("gpushare")
	must.EqOp(t, "stop it with: gpushare demo -stop -state "+state, hint)
	must.StrNotContains(t, hint, "Ctrl-C")
}
