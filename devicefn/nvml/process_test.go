package nvml

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/shoenig/test/must"

	"github.com/gpushare/gpushare/devicefn"
)

// fakeProc lays out processes' environments like /proc/<pid>/environ.
func fakeProc(t *testing.T, envs map[int][]string) string {
	t.Helper()
	root := t.TempDir()
	for pid, env := range envs {
		dir := filepath.Join(root, strconv.Itoa(pid))
		must.NoError(t, os.MkdirAll(dir, 0o755))
		must.NoError(t, os.WriteFile(filepath.Join(dir, "environ"), []byte(strings.Join(env, "\x00")+"\x00"), 0o644))
	}
	return root
}

// Two tasks share GPU 0: each share reports the SM utilisation of the
// processes that hold it, read per PID from NVML and mapped to shares by
// the processes' GPUSHARE_SHARE_IDS.
func TestStats_processUtilization(t *testing.T) {
	n := newDGXH100(t)
	u := n.devs[0].UUID
	procs := fakeProc(t, map[int][]string{
		100: {"PATH=/bin", devicefn.EnvShareIDs + "=" + u + ":0-24"},
		101: {devicefn.EnvShareIDs + "=" + u + ":0-24"}, // a second process of the same task
		200: {devicefn.EnvShareIDs + "=" + u + ":25-74"},
		300: {"HOME=/root"}, // not a task's process: left out
	})
	var asked []uint64
	n.devs[0].GetProcessUtilizationFunc = func(last uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
		asked = append(asked, last)
		if last >= 2000 {
			return nil, nvml.ERROR_NOT_FOUND
		}
		return []nvml.ProcessUtilizationSample{
			{Pid: 100, TimeStamp: 1000, SmUtil: 20}, {Pid: 100, TimeStamp: 2000, SmUtil: 30},
			{Pid: 101, TimeStamp: 2000, SmUtil: 5},
			{Pid: 200, TimeStamp: 1500, SmUtil: 40},
			{Pid: 300, TimeStamp: 1500, SmUtil: 9},
			{Pid: 999, TimeStamp: 1500, SmUtil: 9}, // vanished
		}, nvml.SUCCESS
	}
	n.devs[0].GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		return []nvml.ProcessInfo{{Pid: 100}, {Pid: 200}}, nvml.SUCCESS
	}
	src := n.source(t, Options{ProcRoot: procs})

	stats, err := src.Stats(context.Background())
	must.NoError(t, err)
	must.Eq(t, []devicefn.ProcessUtil{
		{PIDs: []int{100, 101}, Shares: shareRange(u, 0, 24), SMUtilPct: 30}, // mean 25 + 5
		{PIDs: []int{200}, Shares: shareRange(u, 25, 74), SMUtilPct: 40},
	}, stats[0].Processes)
	must.SliceEmpty(t, stats[1].Processes)

	// the next sample asks for newer samples only; with none, a running
	// compute process reports 0%
	stats, err = src.Stats(context.Background())
	must.NoError(t, err)
	must.Eq(t, []uint64{0, 2000}, asked)
	must.Eq(t, []devicefn.ProcessUtil{
		{PIDs: []int{100}, Shares: shareRange(u, 0, 24), SMUtilPct: 0},
		{PIDs: []int{200}, Shares: shareRange(u, 25, 74), SMUtilPct: 0},
	}, stats[0].Processes)
}

func TestStats_processUtilizationUnsupported(t *testing.T) {
	n := newDGXH100(t)
	n.devs[0].GetProcessUtilizationFunc = func(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
		return nil, nvml.ERROR_NOT_SUPPORTED
	}
	n.devs[1].GetProcessUtilizationFunc = func(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
		return nil, nvml.ERROR_UNKNOWN
	}
	stats, err := n.source(t, Options{ProcRoot: t.TempDir()}).Stats(context.Background())
	must.NoError(t, err)
	must.SliceLen(t, 8, stats) // the GPUs' own counters are still reported
	must.SliceEmpty(t, stats[0].Processes)
	must.SliceEmpty(t, stats[1].Processes)
}

// A process the plugin cannot read is logged once and left out.
func TestStats_processUnreadable(t *testing.T) {
	n := newDGXH100(t)
	procs := t.TempDir()
	// an environ that cannot be read (as one of another user's processes,
	// which root could read)
	must.NoError(t, os.MkdirAll(filepath.Join(procs, "100", "environ"), 0o755))
	n.devs[0].GetProcessUtilizationFunc = func(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
		return []nvml.ProcessUtilizationSample{{Pid: 100, TimeStamp: 1, SmUtil: 50}}, nvml.SUCCESS
	}
	logger, logs := newLogger()
	src := n.source(t, Options{ProcRoot: procs, Logger: logger})
	for range 2 {
		stats, err := src.Stats(context.Background())
		must.NoError(t, err)
		must.SliceEmpty(t, stats[0].Processes)
	}
	must.Eq(t, 1, logs.count("cannot read a GPU process's environment"))
}

func shareRange(uuid string, lo, hi int) []string {
	var out []string
	for k := lo; k <= hi; k++ {
		out = append(out, devicefn.ShareID{UUID: uuid, Index: k}.String())
	}
	return out
}
