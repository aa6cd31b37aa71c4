package e2e

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/gpushare/fixtures"
	"github.com/gpushare/gpushare/internal/devcluster"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// mpsJob is a batch job on count shares pinned to share_ids whose task
// asks the MPS control daemon it finds for its default active thread
// percentage: once through CUDA_MPS_PIPE_DIRECTORY, once with every
// CUDA_MPS_* variable cleared (CUDA's default /tmp/nvidia-mps).
const mpsJob = `
variable "share_ids" { type = string }
variable "driver" { type = string }
variable "count" { type = number }

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
    task "mps" {
      driver = var.driver
      config {
        command = "/bin/sh"
        args = ["-c", <<-EOT
          echo "env $CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
          echo "pipe $(echo get_default_active_thread_percentage | nvidia-cuda-mps-control 2>&1)"
          echo "cleared $(echo get_default_active_thread_percentage | env -u CUDA_MPS_PIPE_DIRECTORY -u CUDA_MPS_ACTIVE_THREAD_PERCENTAGE nvidia-cuda-mps-control 2>&1)"
        EOT
        ]
      }
      resources {
        cpu    = 50
        memory = 64
        device "nvidia/gpushare" {
          count = var.count
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

// TestMPSDaemonPerReservation runs the plugin with per-reservation daemons
// and NVIDIA's real nvidia-cuda-mps-control (which starts without a GPU):
// an exec task on 25 shares and a raw_exec task on 50 shares of the same
// GPU each reach a daemon whose default is their own share; the exec task
// does so even with its CUDA_MPS_* variables cleared, through the mount at
// /tmp/nvidia-mps. Optional: skips without the binary, or without root
// (the exec driver, and the plugin starting daemons). The exec task keeps
// exec's default capabilities: with CAP_DAC_OVERRIDE the front end would
// take the daemon's root-only control_privileged socket, and be refused,
// were it not hidden under an empty file in the task.
func TestMPSDaemonPerReservation(t *testing.T) {
	control, err := exec.LookPath("nvidia-cuda-mps-control")
	if err != nil {
		t.Skip("nvidia-cuda-mps-control not installed (Debian: nvidia-cuda-mps)")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	daemonDir, err := os.MkdirTemp("", "e2empsd")
	must.NoError(t, err)
	// after the cluster stops: quit the daemons it left
	t.Cleanup(func() {
		entries, _ := os.ReadDir(daemonDir)
		for _, e := range entries {
			if !e.IsDir() {
				continue
			}
			cmd := exec.CommandContext(context.Background(), control)
			cmd.Env = append(os.Environ(), "CUDA_MPS_PIPE_DIRECTORY="+filepath.Join(daemonDir, e.Name(), "pipe"))
			cmd.Stdin = strings.NewReader("quit\n")
			_ = cmd.Run()
		}
		os.RemoveAll(daemonDir)
	})
	fixture, err := fixtures.WriteTo(fixtures.DGX1V100, t.TempDir())
	must.NoError(t, err)
	c := startCluster(t, devcluster.Client{Name: "dgx1", Fixture: fixture,
		MPS: fmt.Sprintf("daemons = \"reservation\"\ncontrol = %q\ndaemon_dir = %q", control, daemonDir)})
	nomad := c.API()
	nodeID := onlyNode(t, nomad)
	deadline := time.Now().Add(liveness) // liveness only: an absent driver skips at once
	for {
		node, _, err := nomad.Nodes().Info(nodeID, nil)
		must.NoError(t, err)
		g := gpushareGroup(t, node)
		if d := node.Drivers["exec"]; d != nil && d.Detected && d.Healthy && g.Attributes["mps_daemon"] != nil {
			must.Eq(t, "running", g.Attributes["mps_daemon"].String())
			break
		}
		if d := node.Drivers["exec"]; (d != nil && !d.Detected) || time.Now().After(deadline) {
			t.Skipf("the client offers no healthy exec driver: %+v", d)
		}
		time.Sleep(250 * time.Millisecond)
	}

	run := func(id, driver string, ids []string) []string {
		job, err := nomad.Jobs().ParseHCLOpts(&api.JobsParseRequest{
			JobHCL:       mpsJob,
			Variables:    fmt.Sprintf("share_ids = %q\ndriver = %q\ncount = %d\n", strings.Join(ids, ","), driver, len(ids)),
			Canonicalize: true,
		})
		must.NoError(t, err)
		job.ID, job.Name = &id, &id
		_, _, err = nomad.Jobs().Register(job, nil)
		must.NoError(t, err)
		t.Cleanup(func() { _, _, _ = nomad.Jobs().Deregister(id, true, nil) })
		alloc := waitFinished(t, nomad, id)
		must.Eq(t, "complete", alloc.ClientStatus, must.Sprintf("task events: %s", events(alloc)))
		r, err := nomad.AllocFS().Cat(alloc, "alloc/logs/mps.stdout.0", nil)
		must.NoError(t, err)
		out, err := io.ReadAll(r)
		r.Close()
		must.NoError(t, err)
		return strings.Split(strings.TrimSpace(string(out)), "\n")
	}
	must.Eq(t, []string{"env 25", "pipe 25.0", "cleared 25.0"}, run("mps-exec", "exec", shareIDs(2, 0, 25)))
	// raw_exec has no mounts: cleared, it finds no daemon at the host's
	// /tmp/nvidia-mps (the escape the README names), so only the pipe line
	raw := run("mps-raw", "raw_exec", shareIDs(2, 50, 100))
	must.SliceLen(t, 3, raw)
	must.Eq(t, []string{"env 50", "pipe 50.0"}, raw[:2])
	must.StrHasPrefix(t, "cleared ", raw[2])
	must.NotEq(t, "cleared 50.0", raw[2])
	t.Logf("raw_exec with CUDA_MPS_* cleared: %s", raw[2])
	entries, err := os.ReadDir(daemonDir)
	must.NoError(t, err)
	daemons := 0
	for _, e := range entries {
		if e.IsDir() {
			daemons++
		}
	}
	must.Eq(t, 2, daemons, must.Sprint("one daemon per reservation"))
}
