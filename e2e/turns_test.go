package e2e

import (
	"testing"
	"time"

	"github.com/gpushare/gpushare/scheduler/service"
	"github.com/shoenig/test/must"
)

// cappedJob is a gated raw_exec batch job of 25 shares (a 25% compute cap
// where the plugin shares without MPS) that prints its limits file and
// launches 2 ms kernels on the fake driver's GPU (one file both jobs name)
// for 6 s, each kernel logged.
const cappedJob = `
variable "bin" { type = string }
variable "gpu" { type = string }
variable "log" { type = string }

job "x" {
  type        = "batch"
  datacenters = ["*"]
  group "g" {
    constraint {
      attribute = "${meta.gpushare_gate}"
      value     = "pending"
    }
    restart {
      attempts = 0
      mode     = "fail"
    }
    reschedule {
      attempts  = 0
      unlimited = false
    }
    task "work" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args = ["-c", "cat $GPUSHARE_LIMITS/limits; exec ${var.bin}/kernprog dlsym kern:2000 run:6000:0:6000"]
      }
      env {
        LD_LIBRARY_PATH       = var.bin
        GPUSHARE_REAL_LIBCUDA = "${var.bin}/libcuda.so.1"
        FAKECUDA_GPU          = var.gpu
        FAKECUDA_LOG          = var.log
      }
      resources {
        cpu    = 50
        memory = 32
        device "nvidia/gpushare" {
          count = 25
        }
      }
    }
  }
}
`

// Issue 46 part 3, end to end: two capped jobs (25 shares each, not
// time-sliced) pinned by the scheduler onto the one GPU of a fixture
// client whose plugin shares without MPS (sharing = "timeslice") and
// preloads the interposer. The plugin writes compute_pct=25 and the round
// of turns (interposer.turn_ms = 200) into each reservation's limits, and
// the library has the two take turns on the GPU's rotation: their kernels
// on the shared fake GPU come in runs of a turn's worth (25% of 200 ms at
// the pool of both caps: about 12 kernels of 2 ms) rather than kernel by
// kernel, and the scheduler shows no time-slicing for them (capped members
// are not time-sliced).
func TestCappedJobsTakeTurns(t *testing.T) {
	ids := []string{"turns-a", "turns-b"}
	e, s, bin := kernelJobs(t, "sharing = \"timeslice\"\n", "  turn_ms = 200\n", "gpushare-turns-", "", cappedJob, ids)
	sliced := 0 // time-slice figures the scheduler showed for them
	waitKernelJobs(t, e, s, ids, 90*time.Second, func(_ string, st service.JobStatus) {
		for _, g := range st.Groups {
			sliced += len(g.Timeslice)
		}
	})
	for _, id := range ids {
		b := finishedStdout(t, e, id)
		must.StrContains(t, b, "\ncompute_pct=25\n", must.Sprintf("job %s", id))
		must.StrContains(t, b, "\nturn_ms=200\n", must.Sprintf("job %s", id))
		must.StrContains(t, b, "run 0 ", must.Sprintf("job %s ran its kernels", id))
	}
	runs, per, median := kernelRuns(t, bin)
	t.Logf("%d runs (median %d kernels), per process %v; time-slice figures shown: %d", len(runs), median, per, sliced)
	must.MapLen(t, 2, per, must.Sprint("both tasks launched"))
	for _, n := range per {
		must.Greater(t, 100, n)
	}
	// they ran together, in turns: runs of a turn's kernels (50 ms of each
	// 100: about 60 turns each in 6 s), where each paced on its own they
	// alternate kernel by kernel (median 1, thousands of runs)
	must.Between(t, 20, len(runs), 600)
	must.Greater(t, 4, median)
	must.EqOp(t, 0, sliced)
}
