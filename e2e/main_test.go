package e2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpushare/gpushare/internal/devcluster"
)

// binaries are built once per test run.
var nomadBin, pluginBin, cliBin string

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		fmt.Println("e2e: skipped in -short mode")
		os.Exit(0)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	root, err := devcluster.RepoRoot()
	if err == nil {
		nomadBin, err = devcluster.NomadBinary(ctx, root, func(s string) { fmt.Println("e2e:", s) })
	}
	binDir, _ := os.MkdirTemp("", "gpushare-e2e-bin-")
	if err == nil {
		pluginBin, err = devcluster.BuildPlugin(ctx, root, binDir)
	}
	if err == nil {
		cliBin, err = devcluster.BuildCLI(ctx, root, binDir)
	}
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(binDir)
	os.Exit(code)
}

// startCluster starts a cluster for one test and stops it, with every
// process it started, when the test ends, failed or not. The agents' logs
// are printed when the test failed.
func startCluster(t *testing.T, clients ...devcluster.Client) *devcluster.Cluster {
	t.Helper()
	return startClusterOpts(t, false, clients...)
}

func startClusterOpts(t *testing.T, persistent bool, clients ...devcluster.Client) *devcluster.Cluster {
	t.Helper()
	return startClusterWith(t, devcluster.Options{Clients: clients, Persistent: persistent})
}

// startClusterWith starts a cluster with opts (ACL, TLS, ...); Dir,
// NomadBin, PluginBin and Log are filled in.
func startClusterWith(t testing.TB, opts devcluster.Options) *devcluster.Cluster {
	t.Helper()
	dir, err := os.MkdirTemp("", "gpushare-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	opts.Dir, opts.NomadBin, opts.PluginBin = dir, nomadBin, pluginBin
	opts.Log = func(s string) { t.Log(s) }
	c, err := devcluster.Start(t.Context(), opts)
	if err != nil {
		dumpLogs(t, dir)
		os.RemoveAll(dir)
		t.Fatal(err)
	}
	t.Logf("cluster ready in %s", time.Since(start).Round(time.Millisecond))
	t.Cleanup(func() {
		if t.Failed() {
			dumpLogs(t, dir)
		}
		c.Stop()
		if os.Getenv("GPUSHARE_E2E_KEEP") != "" {
			t.Logf("kept cluster logs in %s", dir)
			return
		}
		os.RemoveAll(dir)
	})
	return c
}

func dumpLogs(t testing.TB, dir string) {
	logs, _ := filepath.Glob(filepath.Join(dir, "*", "*.log"))
	top, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	logs = append(logs, top...)
	for _, l := range logs {
		b, _ := os.ReadFile(l)
		if len(b) > 20000 {
			b = b[len(b)-20000:]
		}
		t.Logf("==== %s (tail) ====\n%s", l, b)
	}
}

// nomadDir is a directory whose nomad is nomadBin, for the PATH of commands
// run as a user runs them (gpushare job lint parses with the nomad on PATH):
// nomadBin's own directory when it is named nomad, else a directory with a
// link of that name (with $GPUSHARE_NOMAD=bin/nomad-2.0.5 its directory's
// nomad is bin/nomad, another release).
func nomadDir(t testing.TB) string {
	t.Helper()
	if filepath.Base(nomadBin) == "nomad" {
		return filepath.Dir(nomadBin)
	}
	abs, err := filepath.Abs(nomadBin)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Symlink(abs, filepath.Join(dir, "nomad")); err != nil {
		t.Fatal(err)
	}
	return dir
}
