package e2e

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/gpushare/fixtures"
	"github.com/gpushare/gpushare/internal/devcluster"
	"github.com/gpushare/gpushare/jobspecs"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// releaseMustHold are the files a user with only the archive is told to
// use (in the README's prose and code spans, not only its links).
var releaseMustHold = []string{
	"gpushare", "nomad-device-gpushare", "libgpushare-cuda.so", "README.md", "LICENSE",
	"deploy/nomad/client.hcl", "deploy/nomad/dev.hcl",
	"deploy/nomad/gpushare-scheduler.nomad.hcl", "deploy/nomad/gpushare-scheduler.policy.hcl",
	"deploy/systemd/gpushare-scheduler.service", "deploy/systemd/scheduler.hcl", "deploy/grafana/gpushare.json",
	"deploy/pack/gpushare_scheduler/README.md", "deploy/pack/gpushare_scheduler/metadata.hcl",
	"deploy/pack/gpushare_scheduler/variables.hcl", "deploy/pack/gpushare_scheduler/templates/gpushare_scheduler.nomad.tpl",
	"docs/gate-and-pin.md", "fixtures/topo/PROVENANCE.md", "plugin/interposer/README.md",
}

// TestReleaseArchiveStandsAlone is THE RELEASE TEST: make release for the
// host's architecture only, then the archive alone (about 20 s when the
// build cache is warm; the first build of the release binaries takes
// longer). It unpacks the archive into an empty directory, outside any
// checkout, and checks that it stands alone: every file the README and
// the other shipped documents link to is in it, and so are the fixtures,
// the examples, the example agent configurations and LICENSE (MPL-2.0);
// nothing cites the design notes kept outside the repository; the
// README's commands that need no cluster work from it (job lint of the
// examples with the nomad binary on PATH, fixture check); deploy/nomad/dev.hcl starts a dev agent whose
// node offers the fixture's GPUs; gpushare demo, with Nomad from -nomad,
// finds the plugin beside it and its embedded fixtures and examples, runs
// them all and exits 0; without Nomad it says how to get one.
func TestReleaseArchiveStandsAlone(t *testing.T) {
	root, err := devcluster.RepoRoot()
	must.NoError(t, err)
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make release needs make")
	}
	other := otherArch(t)
	dist := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 3*liveness) // liveness only: the whole test, make release included
	defer cancel()
	// make release as an operator types it, on a host without the other
	// architecture's cross compiler: the host's archive is built, the
	// other skipped with a message saying why and what to install
	mk := releaseMake(ctx, root, "CC_"+other+"=gpushare-no-such-cc", "DIST="+dist)
	start := time.Now()
	out, err := mk.CombinedOutput()
	must.NoError(t, err, must.Sprintf("make release:\n%s", out))
	t.Logf("make release for linux/%s in %s", runtime.GOARCH, time.Since(start).Round(time.Millisecond))
	must.StrContains(t, string(out), "SKIPPING linux/"+other)
	must.StrContains(t, string(out), "NOT BUILT, no C compiler: "+other)
	must.StrContains(t, string(out), "apt-get install -y")
	all, _ := filepath.Glob(filepath.Join(dist, "*.tar.gz"))
	archives, _ := filepath.Glob(filepath.Join(dist, "gpushare_*_linux_"+runtime.GOARCH+".tar.gz"))
	must.SliceLen(t, 1, archives, must.Sprintf("make release:\n%s", out))
	must.Eq(t, archives, all, must.Sprint("only the host's archive"))
	sums, err := os.ReadFile(filepath.Join(dist, "SHA256SUMS"))
	must.NoError(t, err)
	must.EqOp(t, 1, strings.Count(string(sums), "\n"))
	must.StrContains(t, string(sums), filepath.Base(archives[0]))

	unpacked := t.TempDir()
	top := untar(t, archives[0], unpacked)
	must.EqOp(t, strings.TrimSuffix(filepath.Base(archives[0]), ".tar.gz"), top)
	dir := filepath.Join(unpacked, top)

	t.Run("files", func(t *testing.T) {
		want := append([]string{}, releaseMustHold...)
		for _, f := range []string{fixtures.HGXH100, fixtures.DGX1V100, fixtures.DGXA100, fixtures.PCIe4GPU, fixtures.DGX1PCIe} {
			want = append(want, "fixtures/"+f)
		}
		want = append(want, jobspecsPaths()...)
		for _, f := range want {
			_, err := os.Stat(filepath.Join(dir, f))
			must.NoError(t, err, must.Sprintf("the archive has no %s", f))
		}
		for _, f := range []string{"gpushare", "nomad-device-gpushare"} {
			fi, err := os.Stat(filepath.Join(dir, f))
			must.NoError(t, err)
			must.EqOp(t, os.FileMode(0o755), fi.Mode().Perm(), must.Sprintf("%s", f))
		}
		lic, err := os.ReadFile(filepath.Join(dir, "LICENSE"))
		must.NoError(t, err)
		must.True(t, strings.HasPrefix(string(lic), "Mozilla Public License Version 2.0\n"), must.Sprint("LICENSE is not the MPL-2.0 text"))
		must.StrContains(t, string(lic), `Exhibit B - "Incompatible With Secondary Licenses" Notice`)
	})

	t.Run("no design notes outside the repository", func(t *testing.T) {
		// comments and documents cite docs/, never the design notes kept
		// beside the repository, which a reader of the archive or of the
		// repository does not have
		notes := "DESIGN" + ".md"
		var cites []string
		err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".md") && !strings.HasSuffix(p, ".hcl") {
				return err
			}
			b, err := os.ReadFile(p)
			if err == nil && strings.Contains(string(b), notes) {
				cites = append(cites, p[len(dir)+1:])
			}
			return err
		})
		must.NoError(t, err)
		ls := exec.Command("git", "grep", "-l", notes)
		ls.Dir = root
		out, _ := ls.Output() // exit 1: no match
		cites = append(cites, strings.Fields(string(out))...)
		must.SliceEmpty(t, cites, must.Sprintf("files that cite %s: %v", notes, cites))
	})

	t.Run("links", func(t *testing.T) {
		broken := brokenLinks(t, dir)
		must.SliceEmpty(t, broken, must.Sprintf("links that lead nowhere in the unpacked archive:\n%s", strings.Join(broken, "\n")))
	})

	gpushare := filepath.Join(dir, "gpushare")
	run := func(t *testing.T, env []string, args ...string) (string, error) {
		t.Helper()
		cmd := exec.CommandContext(ctx, gpushare, args...)
		cmd.Dir = dir // the README's relative paths
		cmd.Env = env
		cmd.Stdin = nil // /dev/null: the demo does not wait for Ctrl-C
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	// no nomad on PATH, no $GPUSHARE_NOMAD
	bare := []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir()}

	t.Run("commands", func(t *testing.T) {
		examples, _ := filepath.Glob(filepath.Join(dir, "jobspecs", "examples", "*.nomad.hcl"))
		must.SliceLen(t, len(jobspecs.ExampleNames()), examples)
		// gpushare links no jobspec parser: lint parses with Nomad, here
		// the nomad binary on PATH, as on a machine Nomad is installed on
		withNomad := append([]string{"PATH=" + nomadDir(t) + ":/usr/bin:/bin"}, bare[1:]...)
		// the Nomad under test ($GPUSHARE_NOMAD), whatever its file's name
		onPath, err := exec.Command("env", append(withNomad, "nomad", "version")...).CombinedOutput()
		must.NoError(t, err, must.Sprint(string(onPath)))
		want, err := exec.Command(nomadBin, "version").CombinedOutput()
		must.NoError(t, err, must.Sprint(string(want)))
		must.Eq(t, string(want), string(onPath))
		out, err := run(t, withNomad, append([]string{"job", "lint", "-scheduler", ""}, examples...)...)
		must.NoError(t, err, must.Sprint(out))
		// and without one it says what it needs
		out, err = run(t, bare, "job", "lint", "-scheduler", "", examples[0])
		must.Error(t, err)
		must.StrContains(t, out, "no Nomad to parse the jobspec with")
		fx, _ := filepath.Glob(filepath.Join(dir, "fixtures", "*.hcl"))
		out, err = run(t, bare, append([]string{"fixture", "check"}, fx...)...)
		must.NoError(t, err, must.Sprint(out))
	})

	t.Run("demo without Nomad says how to get it", func(t *testing.T) {
		out, err := run(t, bare, "demo")
		must.Error(t, err)
		must.StrContains(t, out, "no Nomad binary found")
		must.StrContains(t, out, "releases.hashicorp.com/nomad/")
	})

	t.Run("dev agent", func(t *testing.T) {
		// as the README says: the dev agent, the scheduler, an example
		addr := devAgent(t, ctx, dir)
		sched := "http://127.0.0.1:" + strconv.Itoa(freePort(t))
		logf, err := os.Create(filepath.Join(t.TempDir(), "scheduler.log"))
		must.NoError(t, err)
		cmd := exec.Command(gpushare, "scheduler", "-nomad-address", addr, "-http-address", strings.TrimPrefix(sched, "http://"))
		cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = dir, bare, logf, logf
		must.NoError(t, cmd.Start())
		t.Cleanup(func() {
			stopProcess(cmd)
			logf.Close()
			if t.Failed() {
				b, _ := os.ReadFile(logf.Name())
				t.Logf("gpushare scheduler:\n%s", b)
			}
		})
		out, err := run(t, bare, "job", "run", "-address", addr, "-scheduler", sched, "-timeout", liveness.String(), "jobspecs/examples/training-nvlink-pair.nomad.hcl")
		must.NoError(t, err, must.Sprint(out))
		must.StrContains(t, out, "pinned to 1 node(s), 2 GPU(s), 200 share(s) in NV")
		out, err = run(t, bare, "status", "-address", addr, "-scheduler", sched)
		must.NoError(t, err, must.Sprint(out))
		must.StrContains(t, out, "train-pair/trainer")
		t.Logf("gpushare status on the dev agent:\n%s", out)
	})

	t.Run("demo", func(t *testing.T) {
		start := time.Now()
		out, err := run(t, bare, "demo", "-nomad", nomadBin, "-timeout", liveness.String())
		t.Logf("gpushare demo from the archive (%s):\n%s", time.Since(start).Round(time.Millisecond), out)
		must.NoError(t, err)
		must.StrContains(t, out, "plugin: "+filepath.Join(dir, "nomad-device-gpushare"))
		n := len(jobspecs.DemoExampleNames())
		must.StrContains(t, out, "==> "+strconv.Itoa(n)+" of "+strconv.Itoa(n)+" example jobs placed and running")
		must.StrContains(t, out, "train-pair/trainer: pinned to 1 node(s), 2 GPU(s)")
		must.StrContains(t, out, "dgx1-v100")
		must.StrContains(t, out, "==> stopping the cluster")
	})
}

// untar unpacks a .tar.gz into dir as tar xzf does (files, directories,
// modes) and returns its single top-level directory.
func untar(t *testing.T, archive, dir string) string {
	t.Helper()
	f, err := os.Open(archive)
	must.NoError(t, err)
	defer f.Close()
	zr, err := gzip.NewReader(f)
	must.NoError(t, err)
	tr := tar.NewReader(zr)
	tops := map[string]bool{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		must.NoError(t, err)
		name := filepath.Clean(h.Name)
		must.False(t, strings.HasPrefix(name, "..") || filepath.IsAbs(name), must.Sprintf("entry %q", h.Name))
		tops[strings.Split(name, string(filepath.Separator))[0]] = true
		p := filepath.Join(dir, name)
		switch h.Typeflag {
		case tar.TypeDir:
			must.NoError(t, os.MkdirAll(p, 0o755))
		case tar.TypeReg:
			must.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
			w, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode).Perm())
			must.NoError(t, err)
			_, err = io.Copy(w, tr)
			must.NoError(t, err)
			must.NoError(t, w.Close())
		default:
			t.Fatalf("archive entry %s: type %c (only files and directories expected)", h.Name, h.Typeflag)
		}
	}
	must.MapLen(t, 1, tops, must.Sprint("one top-level directory"))
	for top := range tops {
		return top
	}
	return ""
}

// mdLink is a markdown link or image: [text](target) or ![alt](target).
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// brokenLinks returns every relative link of every .md file under dir
// that names no file or directory under dir ("file.md: target").
func brokenLinks(t *testing.T, dir string) []string {
	t.Helper()
	var broken []string
	files := 0
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".md") {
			return err
		}
		files++
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range mdLink.FindAllStringSubmatch(string(b), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "#") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			target, _, _ = strings.Cut(target, "#")
			abs := filepath.Join(filepath.Dir(p), target)
			rel, _ := filepath.Rel(dir, abs)
			if strings.HasPrefix(rel, "..") {
				broken = append(broken, p[len(dir)+1:]+": "+m[1]+" (outside the archive)")
				continue
			}
			if _, err := os.Stat(abs); err != nil {
				broken = append(broken, p[len(dir)+1:]+": "+m[1])
			}
		}
		return nil
	})
	must.NoError(t, err)
	must.Positive(t, files)
	return broken
}

// jobspecsPaths are the examples' paths as the archive holds them.
func jobspecsPaths() []string {
	var paths []string
	for _, name := range jobspecs.ExampleNames() {
		paths = append(paths, "jobspecs/"+name)
	}
	return paths
}

// devAgent runs deploy/nomad/dev.hcl as its header says, from the unpacked
// archive dir (on ports of its own), waits for its node to offer the
// fixture's 8 GPUs as 800 shares and returns its address; it stops when
// the test ends.
func devAgent(t *testing.T, ctx context.Context, dir string) string {
	plugins := filepath.Join(dir, "plugins")
	must.NoError(t, os.MkdirAll(plugins, 0o755))
	b, err := os.ReadFile(filepath.Join(dir, "nomad-device-gpushare"))
	must.NoError(t, err)
	must.NoError(t, os.WriteFile(filepath.Join(plugins, "nomad-device-gpushare"), b, 0o755))
	ports := [3]int{freePort(t), freePort(t), freePort(t)}
	portsFile := filepath.Join(t.TempDir(), "ports.hcl")
	must.NoError(t, os.WriteFile(portsFile, []byte(fmt.Sprintf("ports {\n  http = %d\n  rpc = %d\n  serf = %d\n}\n", ports[0], ports[1], ports[2])), 0o644))
	logf, err := os.Create(filepath.Join(t.TempDir(), "nomad.log"))
	must.NoError(t, err)
	cmd := exec.Command(nomadBin, "agent", "-dev", "-config", "deploy/nomad/dev.hcl", "-config", portsFile, "-plugin-dir", plugins)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logf, logf
	// a dev agent's client directories (NomadClient*) are left in TMPDIR
	cmd.Env = append(os.Environ(), "TMPDIR="+t.TempDir())
	must.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("nomad agent -dev -config deploy/nomad/dev.hcl:\n%s", b)
		}
	})
	addr := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	client, err := api.NewClient(&api.Config{Address: addr})
	must.NoError(t, err)
	deadline := time.Now().Add(liveness)
	for {
		nodes, _, err := client.Nodes().List(&api.QueryOptions{Params: map[string]string{"resources": "true"}})
		if err == nil && len(nodes) == 1 && nodes[0].NodeResources != nil {
			for _, d := range nodes[0].NodeResources.Devices {
				if d.Type == "gpushare" && len(d.Instances) == 800 {
					t.Logf("dev agent: %s %s, %d shares", d.Vendor, d.Name, len(d.Instances))
					return addr
				}
			}
		}
		select {
		case err := <-exited:
			exited <- err // for the stop at cleanup
			t.Fatalf("the dev agent exited: %v", err)
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no node with the fixture's 800 gpushare shares after 90s (last error: %v)", err)
		}
	}
}

// stopProcess interrupts a process the test started and waits for it,
// killing it after 30 s.
func stopProcess(cmd *exec.Cmd) {
	_ = cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// otherArch is the release architecture that is not the host's (the
// release builds linux amd64 and arm64).
func otherArch(t *testing.T) string {
	t.Helper()
	switch runtime.GOARCH {
	case "amd64":
		return "arm64"
	case "arm64":
		return "amd64"
	}
	t.Skipf("make release builds linux/amd64 and linux/arm64, not this host's %s", runtime.GOARCH)
	return ""
}

// releaseMake is `make release` with args, in the repository, a make of
// its own (not a sub-make of make test's).
func releaseMake(ctx context.Context, root string, args ...string) *exec.Cmd {
	mk := exec.CommandContext(ctx, "make", append([]string{"release"}, args...)...)
	mk.Dir = root
	mk.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "MAKEFLAGS=") || strings.HasPrefix(kv, "MFLAGS=") ||
			strings.HasPrefix(kv, "MAKELEVEL=") || strings.HasPrefix(kv, "RELEASE_ARCHES=")
	})
	return mk
}

// An architecture named in RELEASE_ARCHES whose C compiler is missing
// fails make release before anything is built, and says which compiler
// and package: asked for by name, it is not skipped.
func TestReleaseNamedArchWithoutCompilerFails(t *testing.T) {
	root, err := devcluster.RepoRoot()
	must.NoError(t, err)
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make release needs make")
	}
	other := otherArch(t)
	dist := filepath.Join(t.TempDir(), "dist")
	out, err := releaseMake(t.Context(), root, "RELEASE_ARCHES="+other, "CC_"+other+"=gpushare-no-such-cc", "DIST="+dist).CombinedOutput()
	must.Error(t, err, must.Sprintf("make release:\n%s", out))
	must.StrContains(t, string(out), "a working C compiler for linux/"+other+": gpushare-no-such-cc")
	must.StrContains(t, string(out), "apt-get install -y")
	must.StrContains(t, string(out), "was asked for")
	_, err = os.Stat(dist)
	must.True(t, os.IsNotExist(err), must.Sprint("nothing is built"))
}
