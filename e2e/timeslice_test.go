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
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/gpushare/gpushare/scheduler/service"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// oneGPU is a fixture client with a single GPU: two jobs placed there
// share it, whatever the placement rule.
const oneGPU = `driver_version = "535.161.08"
cuda_version   = "12.2"
links = ["X"]
gpu "GPU-t1000000-0000-4000-8000-000000000000" {
  model              = "Tesla P100-PCIE-16GB"
  memory_mib         = 16384
  pci_bus_id         = "00000000:10:00.0"
  numa_node          = 0
  compute_capability = "6.0"
}
`

// timesliceJob is a gated raw_exec batch job that opts into time-slicing
// and launches 2 ms kernels on the fake driver's GPU (one file both jobs
// name: their kernels share a timeline) for 6 s, each kernel logged.
const timesliceJob = `
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
    meta = {
      "gpushare.timeslice" = "true"
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
        args = ["-c", "echo GPUSHARE_TIMESLICE_QUANTUM_MS=$GPUSHARE_TIMESLICE_QUANTUM_MS; exec ${var.bin}/kernprog dlsym kern:2000 run:6000:0:6000"]
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

// Two jobs that opt into time-slicing (gpushare.timeslice = "true"), on a
// one-GPU fixture client with the interposer on, pinned by the scheduler
// (quantum 500 ms): each task gets the quantum in its environment, their
// kernels on the shared fake GPU come in runs of a turn's worth rather
// than interleaved kernel by kernel, both make progress, and the scheduler
// shows each allocation suspended for some of its turns (the plugin's
// stats, /v1/jobs/<id>).
func TestTimeSlicedJobsAlternate(t *testing.T) {
	ids := []string{"ts-a", "ts-b"}
	e, s, bin := kernelJobs(t, "", "", "gpushare-timeslice-", "timeslice {\n  quantum = \"500ms\"\n}\n", timesliceJob, ids)
	// while they run: the scheduler's figures of each allocation
	seen := map[string]service.AllocTimeslice{}
	waitKernelJobs(t, e, s, ids, 60*time.Second, func(id string, st service.JobStatus) {
		for _, g := range st.Groups {
			for _, ts := range g.Timeslice {
				if ts.Turns >= seen[id].Turns {
					seen[id] = ts
				}
			}
		}
	})
	for _, id := range ids {
		b := finishedStdout(t, e, id)
		must.StrContains(t, b, pin.EnvTimesliceQuantum+"=500\n", must.Sprintf("job %s", id))
		must.StrContains(t, b, "run 0 ", must.Sprintf("job %s ran its kernels", id))
	}
	runs, per, median := kernelRuns(t, bin)
	t.Logf("%d runs (median %d kernels), per process %v; scheduler's figures %+v", len(runs), median, per, seen)
	must.MapLen(t, 2, per, must.Sprint("both tasks launched"))
	for _, n := range per {
		must.Greater(t, 100, n)
	}
	// they alternated: a run per turn of 500 ms while both lived (6 s
	// each), where kernel-by-kernel interleaving would make thousands
	must.Between(t, 3, len(runs), 60)
	must.Greater(t, 20, median)
	// the scheduler saw each suspended, in turns, through the plugin's stats
	for _, id := range ids {
		ts, ok := seen[id]
		must.True(t, ok, must.Sprintf("job %s: no time-slice figures in /v1/jobs", id))
		must.EqOp(t, 0.5, ts.QuantumSeconds)
		must.Greater(t, 0, ts.SuspendedSeconds, must.Sprintf("job %s", id))
		must.Greater(t, uint64(1), ts.Turns, must.Sprintf("job %s", id))
	}
}

// kernelJobs starts a one-client cluster on the one-GPU fixture whose
// plugin preloads the interposer (plugin config before its interposer
// block in before, more lines of that block in inside), with the fake
// driver and kernprog built into bin, a scheduler (more config in
// schedCfg), and registers the gated raw_exec job hcl (variables bin, gpu:
// the fake GPU both share, log: the launch log) once per id.
func kernelJobs(t *testing.T, before, inside, prefix, schedCfg, hcl string, ids []string) (*env, *scheduler, string) {
	t.Helper()
	bin := buildInterposer(t)
	root, err := devcluster.RepoRoot()
	must.NoError(t, err)
	src := filepath.Join(root, "plugin", "interposer", "testdata", "kernprog.c")
	out, err := exec.Command("cc", "-O2", "-o", filepath.Join(bin, "kernprog"), src, "-ldl", "-lpthread").CombinedOutput()
	must.NoError(t, err, must.Sprint(string(out)))
	fixture := filepath.Join(t.TempDir(), "one-gpu.hcl")
	must.NoError(t, os.WriteFile(fixture, []byte(oneGPU), 0o644))
	c := startCluster(t, devcluster.Client{Name: "one", Fixture: fixture, PluginConfig: fmt.Sprintf(
		"%sinterposer {\n  enabled = true\n  library = %q\n  state_dir = %q\n%s}\n",
		before, filepath.Join(bin, "libgpushare-cuda.so"), filepath.Join(bin, "reservations"), inside)})
	e := envOn(t, c, map[string]string{"one": fixture}, prefix)
	s := e.startScheduler("s1", "observe_interval = \"1s\"\n"+schedCfg)
	for _, id := range ids {
		job, err := e.nomad.Jobs().ParseHCLOpts(&api.JobsParseRequest{JobHCL: hcl, Canonicalize: true,
			Variables: fmt.Sprintf("bin = %q\ngpu = %q\nlog = %q\n", bin, filepath.Join(bin, "gpu"), filepath.Join(bin, "launches"))})
		must.NoError(t, err)
		job.ID, job.Name = &id, &id
		_, _, err = e.nomad.Jobs().Register(job, nil)
		must.NoError(t, err)
		t.Cleanup(func() { _, _, _ = e.nomad.Jobs().Deregister(id, true, nil) })
	}
	return e, s, bin
}

// waitKernelJobs waits until every job of ids has finished, handing each
// poll's /v1/jobs/<id> to seen.
func waitKernelJobs(t *testing.T, e *env, s *scheduler, ids []string, timeout time.Duration, seen func(id string, st service.JobStatus)) {
	t.Helper()
	e.eventually(timeout, "both jobs finished", func() bool {
		done := 0
		for _, id := range ids {
			var st service.JobStatus
			if getJSON(s.http+"/v1/jobs/"+id+"?namespace=default", &st) == nil {
				seen(id, st)
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
}

// finishedStdout is what job id's task printed; the job completed.
func finishedStdout(t *testing.T, e *env, id string) string {
	t.Helper()
	a := waitFinished(t, e.nomad, id)
	must.Eq(t, "complete", a.ClientStatus, must.Sprintf("job %s: task events: %s", id, events(a)))
	r, err := e.nomad.AllocFS().Cat(a, "alloc/logs/work.stdout.0", nil)
	must.NoError(t, err)
	defer r.Close()
	raw, err := io.ReadAll(r)
	must.NoError(t, err)
	return string(raw)
}

// kernelRuns reads kernelJobs' launch log: the runs of consecutive kernels
// of one process as (pid, kernels), the kernels per process, and the
// median run.
func kernelRuns(t *testing.T, bin string) ([][2]int, map[int]int, int) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(bin, "launches"))
	must.NoError(t, err)
	var runs [][2]int
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
	must.SliceNotEmpty(t, runs, must.Sprint("no kernel was launched"))
	lens := make([]int, 0, len(runs))
	for _, r := range runs {
		lens = append(lens, r[1])
	}
	slices.Sort(lens)
	return runs, per, lens[len(lens)/2]
}
