package e2e

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/gpushare/fixtures"
	"github.com/gpushare/gpushare/internal/devcluster"
	"github.com/gpushare/gpushare/plugin/interposer"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// interposerJob is a raw_exec batch job on 25 shares pinned to share_ids;
// its task prints the two variables Reserve set, then runs the driver-API
// test program under the interposer over the fake libcuda.so.1.
const interposerJob = `
variable "share_ids" { type = string }
variable "bin" { type = string }

job "x" {
  type        = "batch"
  datacenters = ["*"]
  group "g" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    reschedule {
      attempts  = 0
      unlimited = false
    }
    task "cuprog" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args = ["-c", <<-EOT
          echo "limits $GPUSHARE_LIMITS"
          echo "preload $LD_PRELOAD"
          exec ${var.bin}/cuprog dlsym info alloc:3221225472 alloc:2147483648 info fake
        EOT
        ]
      }
      env {
        LD_LIBRARY_PATH       = var.bin
        GPUSHARE_REAL_LIBCUDA = "${var.bin}/libcuda.so.1"
        FAKECUDA_TOTAL_BYTES  = "17179869184"
      }
      resources {
        cpu    = 50
        memory = 32
        device "nvidia/gpushare" {
          count = 25
          constraint {
            attribute = "${device.ids}"
            operator  = "set_contains_any"
            value     = var.share_ids
          }
        }
      }
    }
  }
}
`

// buildInterposer compiles the library, the fake driver and the dlopen
// build of the test program as plugin/interposer's tests do.
func buildInterposer(t *testing.T) string {
	t.Helper()
	root, err := devcluster.RepoRoot()
	must.NoError(t, err)
	cc := "cc"
	if _, err := exec.LookPath(cc); err != nil {
		cc = "gcc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no C compiler in CI: %v", err)
		}
		t.Skipf("no C compiler: %v", err)
	}
	// the tasks run as the agent's user: a directory they can read
	bin, err := os.MkdirTemp("", "gpushare-interposer-")
	must.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(bin) })
	must.NoError(t, os.Chmod(bin, 0o755))
	src := filepath.Join(root, "plugin", "interposer")
	for _, args := range [][]string{
		append(append([]string{"-shared", "-fPIC", "-O2", "-fvisibility=hidden", "-o", filepath.Join(bin, "libgpushare-cuda.so")},
			interposer.Sources(src)...), "-ldl", "-lpthread"),
		{"-shared", "-fPIC", "-O2", "-Wl,-Bsymbolic", "-Wl,-soname,libcuda.so.1", "-o", filepath.Join(bin, "libcuda.so.1"),
			filepath.Join(src, "testdata", "fakecuda.c"), filepath.Join(src, "testdata", "fakegpu.c"), "-lpthread"},
		{"-O2", "-o", filepath.Join(bin, "cuprog"), filepath.Join(src, "testdata", "cuprog.c"), "-ldl"},
	} {
		out, err := exec.Command(cc, args...).CombinedOutput()
		must.NoError(t, err, must.Sprintf("%s %s\n%s", cc, strings.Join(args, " "), out))
	}
	return bin
}

// TestInterposerReservation: two raw_exec tasks of two jobs get 25 shares
// each of one fixture V100 (16 GiB) with the interposer on. Each sees its
// share's 4 GiB (cuMemGetInfo), allocates 3 GiB and is refused 2 GiB more,
// each in its own reservation's region, while the fake driver has 16 GiB.
func TestInterposerReservation(t *testing.T) {
	bin := buildInterposer(t)
	fixture, err := fixtures.WriteTo(fixtures.DGX1V100, t.TempDir())
	must.NoError(t, err)
	state := filepath.Join(bin, "reservations")
	c := startCluster(t, devcluster.Client{Name: "dgx1", Fixture: fixture, PluginConfig: fmt.Sprintf(
		"interposer {\n  enabled = true\n  library = %q\n  state_dir = %q\n}\n", filepath.Join(bin, "libgpushare-cuda.so"), state)})
	nomad := c.API()

	jobs := map[string][]string{"lim-a": shareIDs(3, 0, 25), "lim-b": shareIDs(3, 25, 50)}
	for id, ids := range jobs {
		job, err := nomad.Jobs().ParseHCLOpts(&api.JobsParseRequest{
			JobHCL:       interposerJob,
			Variables:    fmt.Sprintf("share_ids = %q\nbin = %q\n", strings.Join(ids, ","), bin),
			Canonicalize: true,
		})
		must.NoError(t, err)
		job.ID, job.Name = &id, &id
		_, _, err = nomad.Jobs().Register(job, nil)
		must.NoError(t, err)
		t.Cleanup(func() { _, _, _ = nomad.Jobs().Deregister(id, true, nil) })
	}
	channel := "" // GPU 3's TGS channel, as the first job found it
	for id, ids := range jobs {
		alloc := waitFinished(t, nomad, id)
		must.Eq(t, "complete", alloc.ClientStatus, must.Sprintf("task events: %s", events(alloc)))
		must.Eq(t, sorted(ids), sorted(allocatedIDs(alloc)))
		r, err := nomad.AllocFS().Cat(alloc, "alloc/logs/cuprog.stdout.0", nil)
		must.NoError(t, err)
		out, err := io.ReadAll(r)
		r.Close()
		must.NoError(t, err)
		// the reservation's directory: a keyed name under state_dir that
		// names no share (issue 29, defect 7); its shares file says whose
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		dir, _ := strings.CutPrefix(lines[0], "limits ")
		must.Eq(t, state, filepath.Dir(dir), must.Sprintf("job %s: %s", id, out))
		must.StrNotContains(t, filepath.Base(dir), dgx1GPU)
		listed, err := os.ReadFile(filepath.Join(dir, "shares"))
		must.NoError(t, err)
		must.Eq(t, sorted(ids), sorted(strings.Fields(string(listed))))
		must.Eq(t, []string{
			"limits " + dir,
			"preload " + filepath.Join(bin, "libgpushare-cuda.so"),
			"info 0 4294967296 4294967296", // the share's 4 GiB of 16
			"alloc 0",                      // 3 GiB
			"alloc 2",                      // 2 GiB more: CUDA_ERROR_OUT_OF_MEMORY
			"info 0 1073741824 4294967296",
			"fake 0 3221225472", // the driver never saw the refused 2 GiB
		}, strings.Split(strings.TrimSpace(string(out)), "\n"), must.Sprintf("job %s", id))
		limits, err := os.ReadFile(filepath.Join(dir, "limits"))
		must.NoError(t, err)
		// the dev cluster shares by MPS, whose daemon limits the SMs: not
		// paced twice (cb1e0b7, issue 29 defect 3)
		must.StrContains(t, string(limits), "memory_bytes=4294967296\ncompute_pct=100\n# compute limited by MPS: CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25\n")
		// both reservations share GPU 3's TGS channel
		tgs, err := os.Stat(filepath.Join(dir, "tgs"))
		must.NoError(t, err)
		// state_dir/tgs holds one channel per GPU under a keyed name (no
		// task derives it from the GPU's UUID): this one is GPU 3's only
		// channel, which the other reservation links too
		_, err = os.Stat(filepath.Join(state, "tgs", dgx1GPU+"3"))
		must.ErrorIs(t, err, fs.ErrNotExist)
		channels, err := os.ReadDir(filepath.Join(state, "tgs"))
		must.NoError(t, err)
		var same []string
		for _, c := range channels {
			if st, err := os.Stat(filepath.Join(state, "tgs", c.Name())); err == nil && os.SameFile(st, tgs) {
				same = append(same, c.Name())
			}
		}
		must.Len(t, 1, same, must.Sprintf("job %s: tgs is not one channel of state_dir/tgs", id))
		if channel == "" {
			channel = same[0]
		}
		must.Eq(t, channel, same[0], must.Sprint("both reservations on GPU 3 share its channel"))
	}
}

func waitFinished(t *testing.T, nomad *api.Client, id string) *api.Allocation {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), liveness)
	defer cancel()
	for {
		allocs, _, err := nomad.Jobs().Allocations(id, true, nil)
		must.NoError(t, err)
		for _, a := range allocs {
			if a.ClientStatus == "complete" || a.ClientStatus == "failed" {
				full, _, err := nomad.Allocations().Info(a.ID, nil)
				must.NoError(t, err)
				return full
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("job %s did not finish within %s; allocations %d", id, liveness, len(allocs))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// execJob is interposerJob's program run by the exec driver (a chroot
// with the plugin's mounts), fetched as artifacts from the test's HTTP
// server. The task clears LD_PRELOAD and points GPUSHARE_LIMITS at limits
// of its own: /etc/ld.so.preload and /run/gpushare still hold it.
const execJob = `
variable "share_ids" { type = string }
variable "url" { type = string }

job "x" {
  type        = "batch"
  datacenters = ["*"]
  group "g" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    reschedule {
      attempts  = 0
      unlimited = false
    }
    task "cuprog" {
      driver = "exec"
      artifact {
        source = "${var.url}/cuprog"
        mode   = "file"
        destination = "local/cuprog"
      }
      artifact {
        source = "${var.url}/libcuda.so.1"
        mode   = "file"
        destination = "local/libcuda.so.1"
      }
      config {
        command = "/bin/sh"
        args = ["-c", <<-EOT
          chmod +x /local/cuprog
          mkdir -p /local/own && echo memory_bytes=17179869184 > /local/own/limits
          echo "preload-file $(cat /etc/ld.so.preload)"
          exec env -u LD_PRELOAD GPUSHARE_LIMITS=/local/own /local/cuprog dlsym info alloc:3221225472 alloc:2147483648 info fake
        EOT
        ]
      }
      env {
        LD_LIBRARY_PATH       = "/local"
        GPUSHARE_REAL_LIBCUDA = "/local/libcuda.so.1"
        FAKECUDA_TOTAL_BYTES  = "17179869184"
      }
      resources {
        cpu    = 50
        memory = 64
        device "nvidia/gpushare" {
          count = 25
          constraint {
            attribute = "${device.ids}"
            operator  = "set_contains_any"
            value     = var.share_ids
          }
        }
      }
    }
  }
}
`

// TestInterposerExec: with the exec driver, a task that clears LD_PRELOAD
// and sets its own GPUSHARE_LIMITS still gets the library (from the
// read-only /etc/ld.so.preload) and its share's cap (from the read-only
// /run/gpushare). Needs root and cgroups (the exec driver); skips when the
// client offers no exec driver.
func TestInterposerExec(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the exec driver needs root")
	}
	bin := buildInterposer(t)
	srv := httptest.NewServer(http.FileServer(http.Dir(bin)))
	t.Cleanup(srv.Close)
	fixture, err := fixtures.WriteTo(fixtures.DGX1V100, t.TempDir())
	must.NoError(t, err)
	state := filepath.Join(bin, "reservations")
	lib := filepath.Join(bin, "libgpushare-cuda.so")
	c := startCluster(t, devcluster.Client{Name: "dgx1", Fixture: fixture, PluginConfig: fmt.Sprintf(
		"interposer {\n  enabled = true\n  library = %q\n  state_dir = %q\n}\n", lib, state)})
	nomad := c.API()
	nodeID := onlyNode(t, nomad)
	deadline := time.Now().Add(liveness) // liveness only: an absent driver skips at once
	for {
		node, _, err := nomad.Nodes().Info(nodeID, nil)
		must.NoError(t, err)
		if d := node.Drivers["exec"]; d != nil && d.Detected && d.Healthy {
			break
		}
		if d := node.Drivers["exec"]; (d != nil && !d.Detected) || time.Now().After(deadline) {
			t.Skipf("the client offers no healthy exec driver: %+v", d)
		}
		time.Sleep(250 * time.Millisecond)
	}

	ids := shareIDs(5, 50, 75)
	job, err := nomad.Jobs().ParseHCLOpts(&api.JobsParseRequest{
		JobHCL:       execJob,
		Variables:    fmt.Sprintf("share_ids = %q\nurl = %q\n", strings.Join(ids, ","), srv.URL),
		Canonicalize: true,
	})
	must.NoError(t, err)
	id := "lim-exec"
	job.ID, job.Name = &id, &id
	_, _, err = nomad.Jobs().Register(job, nil)
	must.NoError(t, err)
	t.Cleanup(func() { _, _, _ = nomad.Jobs().Deregister(id, true, nil) })
	alloc := waitFinished(t, nomad, id)
	must.Eq(t, "complete", alloc.ClientStatus, must.Sprintf("task events: %s", events(alloc)))
	r, err := nomad.AllocFS().Cat(alloc, "alloc/logs/cuprog.stdout.0", nil)
	must.NoError(t, err)
	out, err := io.ReadAll(r)
	r.Close()
	must.NoError(t, err)
	must.Eq(t, []string{
		"preload-file " + lib,
		"info 0 4294967296 4294967296", // the share's, not the task's own 16 GiB
		"alloc 0",
		"alloc 2",
		"info 0 1073741824 4294967296",
		"fake 0 3221225472",
	}, strings.Split(strings.TrimSpace(string(out)), "\n"))
}
