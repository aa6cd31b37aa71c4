package cli

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/gpushare/gpushare/internal/devcluster"
)

// nomadBuildCoreMinutes is what building Nomad from the module proxy took,
// in minutes times cores: about 9 minutes on 2 cores (issue 47), modules
// already downloaded. The demo divides it by the machine's cores to say
// how long the build will take.
const nomadBuildCoreMinutes = 18

// nomadBuilder builds Nomad into bin, calling progress with each line the
// build prints (a package compiled); the demo's is goBuildNomad, a test's
// a fake.
type nomadBuilder func(ctx context.Context, root, bin string, progress func(string)) error

// goBuildNomad builds Nomad from the tools module e2e/nomad into bin, as
// make nomad does, with -v so that each package compiled is a line.
func goBuildNomad(ctx context.Context, root, bin string, progress func(string)) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-v", "-o", bin, "github.com/hashicorp/nomad")
	cmd.Dir = filepath.Join(root, "e2e", "nomad")
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		return fmt.Errorf("building nomad: %w", err)
	}
	w.Close()
	var tail []string // the last lines, for the error
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		progress(sc.Text())
		if tail = append(tail, sc.Text()); len(tail) > 30 {
			tail = tail[1:]
		}
	}
	r.Close()
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("building nomad: %v\n%s", err, strings.Join(tail, "\n"))
	}
	return nil
}

// nomadBuildMinutes is about how long building Nomad takes on cores.
func nomadBuildMinutes(cores int) int {
	if cores < 1 {
		cores = 1
	}
	return max(2, (nomadBuildCoreMinutes+cores-1)/cores)
}

// checkoutNomad finds or builds the demo's Nomad in a checkout (root),
// when neither -nomad nor $GPUSHARE_NOMAD named one: bin/nomad if it is
// Nomad's pinned version, else nomad on PATH if it is, else it says that
// none was found, where it looked, what it will build, about how long
// that takes and how to skip it, and builds bin/nomad, saying every
// `every` how far the build is.
func checkoutNomad(ctx context.Context, h demoHost, cores int, build nomadBuilder, every time.Duration, say func(string, ...any)) (string, error) {
	pinned := "Nomad " + devcluster.NomadVersion
	bin := filepath.Join(h.root, "bin", "nomad")
	looked := []string{"-nomad (not given)", "$GPUSHARE_NOMAD (not set)"}
	if v, err := nomadVersion(bin); err == nil && strings.HasPrefix(v, pinned) {
		return bin, nil
	} else if err == nil {
		looked = append(looked, fmt.Sprintf("%s (%s, not %s)", bin, v, devcluster.NomadVersion))
	} else {
		looked = append(looked, bin+" (missing)")
	}
	if p, err := h.lookPath("nomad"); err == nil {
		if v, err := nomadVersion(p); err == nil && strings.HasPrefix(v, pinned) {
			say("using nomad on PATH: %s (%s)", p, v)
			return p, nil
		} else if err == nil {
			looked = append(looked, fmt.Sprintf("nomad on PATH: %s (%s, not %s)", p, v, devcluster.NomadVersion))
		}
	} else {
		looked = append(looked, "nomad on PATH (none)")
	}
	minutes := nomadBuildMinutes(cores)
	say("no Nomad binary found; looked at: %s", strings.Join(looked, ", "))
	say("building Nomad %s from the Go module proxy into %s: about %d minutes on this machine's %d cores "+
		"(once: later demos reuse it)", devcluster.NomadVersion, bin, minutes, cores)
	say("to skip the build: stop this (Ctrl-C) and pass -nomad PATH, set $GPUSHARE_NOMAD, or install Nomad %s "+
		"on PATH (https://releases.hashicorp.com/nomad/%s/)", devcluster.NomadVersion, strings.TrimPrefix(devcluster.NomadVersion, "v"))
	lines := make(chan string, 64)
	done := make(chan error, 1)
	go func() {
		done <- build(ctx, h.root, bin, func(s string) { lines <- s })
	}()
	start, compiled, last := time.Now(), 0, ""
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case s := <-lines:
			compiled++
			last = s
		case err := <-done:
			if err != nil {
				return "", err
			}
			say("built %s in %s", bin, time.Since(start).Round(time.Second))
			return bin, nil
		case <-tick.C:
			msg := fmt.Sprintf("building Nomad: %s of about %d minutes, %d packages compiled", time.Since(start).Round(time.Second), minutes, compiled)
			if last != "" {
				msg += " (last: " + last + ")"
			}
			say("%s", msg)
		}
	}
}

// demoCores is the number of cores a build uses.
func demoCores() int { return runtime.NumCPU() }

// demoStopHint says how to stop a demo kept running: the command, for a
// detached demo (it has no terminal to press Ctrl-C in), else Ctrl-C.
// cmd is how the user runs gpushare.
func demoStopHint(cmd string) string {
	p := os.Getenv(envDemoReady)
	if p == "" {
		return "press Ctrl-C to stop"
	}
	stop := cmd + " demo -stop"
	if state := filepath.Dir(p); state != defaultDemoState() {
		stop += " -state " + state
	}
	return "stop it with: " + stop
}
