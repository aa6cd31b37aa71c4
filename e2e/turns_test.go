package e2e

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/gpushare/internal/devcluster"
	"github.com/gpushare/gpushare/scheduler/service"
	"github.com/hashicorp/nomad/api"
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
	bin := buildInterposer(t)
	root, err := devcluster.RepoRoot()
	must.NoError(t, err)
	src := filepath.Join(root, "plugin", "interposer", "testdata", "kernprog.c")
	out, err := exec.Command("cc", "-O2", "-o", filepath.Join(bin, "kernprog"), src, "-ldl", "-lpthread").CombinedOutput()
	must.NoError(t, err, must.Sprint(string(out)))
	fixture := filepath.Join(t.TempDir(), "one-gpu.hcl")
	must.NoError(t, os.WriteFile(fixture, []byte(oneGPU), 0o644))
	c := startCluster(t, devcluster.Client{Name: "one", Fixture: fixture, PluginConfig: fmt.Sprintf(
		"sharing = \"timeslice\"\ninterposer {\n  enabled = true\n  library = %q\n  state_dir = %q\n  turn_ms = 200\n}\n",
		filepath.Join(bin, "libgpushare-cuda.so"), filepath.Join(bin, "reservations"))})
	e := envOn(t, c, map[string]string{"one": fixture}, "gpushare-turns-")
	s := e.startScheduler("s1", "observe_interval = \"1s\"\n")

	gpu, log := filepath.Join(bin, "gpu"), filepath.Join(bin, "launches")
	ids := []string{"turns-a", "turns-b"}
	for _, id := range ids {
		job, err := e.nomad.Jobs().ParseHCLOpts(&api.JobsParseRequest{JobHCL: cappedJob,
			Variables: fmt.Sprintf("bin = %q\ngpu = %q\nlog = %q\n", bin, gpu, log), Canonicalize: true})
		must.NoError(t, err)
		job.ID, job.Name = &id, &id
		_, _, err = e.nomad.Jobs().Register(job, nil)
		must.NoError(t, err)
		t.Cleanup(func() { _, _, _ = e.nomad.Jobs().Deregister(id, true, nil) })
	}
	sliced := 0 // time-slice figures the scheduler showed for them
	e.eventually(90*time.Second, "both jobs finished", func() bool {
		done := 0
		for _, id := range ids {
			var st service.JobStatus
			if getJSON(s.http+"/v1/jobs/"+id+"?namespace=default", &st) == nil {
				for _, g := range st.Groups {
					sliced += len(g.Timeslice)
				}
			}
			allocs, _, _ := e.nomad.Jobs().Allocations(id, true, nil)
			for _, a := range allocs {
				if a.ClientStatus == "complete" || a.ClientStatus == "failed" {
					done++
				}
			}
		}
		return done == len(ids)
	})
	for _, id := range ids {
		a := waitFinished(t, e.nomad, id)
		must.Eq(t, "complete", a.ClientStatus, must.Sprintf("job %s: task events: %s", id, events(a)))
		r, err := e.nomad.AllocFS().Cat(a, "alloc/logs/work.stdout.0", nil)
		must.NoError(t, err)
		raw, err := io.ReadAll(r)
		r.Close()
		must.NoError(t, err)
		b := string(raw)
		must.StrContains(t, b, "\ncompute_pct=25\n", must.Sprintf("job %s", id))
		must.StrContains(t, b, "\nturn_ms=200\n", must.Sprintf("job %s", id))
		must.StrContains(t, b, "run 0 ", must.Sprintf("job %s ran its kernels", id))
	}
	data, err := os.ReadFile(log)
	must.NoError(t, err)
	var runs [][2]int // (pid, kernels) of consecutive kernels of one process
	per := map[int]int{}
	for _, l := range strings.Fields(string(data)) {
		pid, err := strconv.Atoi(l)
		must.NoError(t, err)
		per[pid]++
		if n := len(runs); n > 0 && runs[n-1][0] == pid {
			runs[n-1][1]++
		} else {
			runs = append(runs, [2]int{pid, 1})
		}
	}
	lens := make([]int, 0, len(runs))
	for _, r := range runs {
		lens = append(lens, r[1])
	}
	slices.Sort(lens)
	t.Logf("%d kernels in %d runs (median %d kernels), per process %v; time-slice figures shown: %d",
		len(strings.Fields(string(data))), len(runs), lens[len(lens)/2], per, sliced)
	must.MapLen(t, 2, per, must.Sprint("both tasks launched"))
	for _, n := range per {
		must.Greater(t, 100, n)
	}
	// they ran together, in turns: runs of a turn's kernels (50 ms of each
	// 100: about 60 turns each in 6 s), where each paced on its own they
	// alternate kernel by kernel (median 1, thousands of runs)
	must.Between(t, 20, len(runs), 600)
	must.Greater(t, 4, lens[len(lens)/2])
	must.EqOp(t, 0, sliced)
}
