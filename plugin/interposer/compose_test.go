package interposer

import (
	"strings"
	"testing"
)

// mergedEnv is the environment Nomad's task runner gives a task of one
// device block per GPU: each reservation's GPUSHARE_GPU_<index> and
// GPUSHARE_GPU_<index>_SHARES (names unique per GPU) kept, the rest the
// last block's. gpus are "index=uuid=shares", in block order.
func mergedEnv(gpus ...string) []string {
	var env []string
	last := ""
	for _, g := range gpus {
		f := strings.Split(g, "=")
		env = append(env, "GPUSHARE_GPU_"+f[0]+"="+f[1], "GPUSHARE_GPU_"+f[0]+"_SHARES="+f[2])
		last = f[1]
	}
	return append(env, "GPUSHARE_SHARES_PER_GPU=100", "GPUSHARE_SHARES=100", "GPUSHARE_FRACTION=1",
		"CUDA_VISIBLE_DEVICES="+last, "NVIDIA_VISIBLE_DEVICES="+last)
}

// composeRun runs the test program under limits with env and returns its
// lines and its stderr.
func composeRun(t *testing.T, limits string, env []string, args ...string) ([]string, string) {
	t.Helper()
	b := build(t)
	c := run{limits: reservation(t, limits), env: env, mode: "direct"}.cmd(b, args...)
	var stderr strings.Builder
	c.Stderr = &stderr
	out, err := c.Output()
	if err != nil {
		t.Fatalf("%v: %v\n%s", args, err, stderr.String())
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n"), stderr.String()
}

// The last reservation's limits: one whole GPU's memory (here 10 MiB).
const wholeLimits = "memory_bytes=10485760\ncompute_pct=100\nwhole_gpus=1\n"

var composeArgs = []string{"visible", "getenv:NVIDIA_VISIBLE_DEVICES", "getenv:GPUSHARE_SHARES",
	"getenv:GPUSHARE_FRACTION", "alloc:16777216"}

// Two whole-GPU reservations merged as Nomad merges them (GPU 10's block
// last, so Nomad left CUDA_VISIBLE_DEVICES at it): the driver sees both
// GPUs at cuInit, in NVML index order (2 before 10), the task's totals
// are two GPUs', and the memory cap, the last reservation's one GPU,
// is lifted: 16 MiB on a 10 MiB cap is granted. Without compose.c the
// driver sees GPU-j alone and the allocation is refused.
func TestComposeWholeGPUs(t *testing.T) {
	got, stderr := composeRun(t, wholeLimits, mergedEnv("2=GPU-a=100", "10=GPU-j=100"), composeArgs...)
	check(t, got, "visible 0 GPU-a,GPU-j", "getenv 0 GPU-a,GPU-j", "getenv 0 200", "getenv 0 2", "alloc 0")
	if stderr != "" {
		t.Errorf("stderr: %q", stderr)
	}

	// an opportunistic task under unified memory: its room was counted
	// from the lifted cap, so its allocations stay device memory
	got, _ = composeRun(t, wholeLimits+"class=opportunistic\nunified_memory=1\nunified_extra_bytes=1048576\n",
		mergedEnv("0=GPU-a=100", "1=GPU-b=100"), "alloc:16777216", "umem")
	check(t, got, "alloc 0", "umem 0 0 0")

	// three blocks, in any order
	got, _ = composeRun(t, wholeLimits, mergedEnv("1=GPU-b=100", "0=GPU-a=100", "3=GPU-d=100"), "visible")
	check(t, got, "visible 0 GPU-a,GPU-b,GPU-d")
}

// One GPU (one block): nothing changes, the cap holds, and a
// CUDA_VISIBLE_DEVICES the job set itself (an ordinal) stays.
func TestComposeOneGPUUnchanged(t *testing.T) {
	env := mergedEnv("3=GPU-d=100")
	env[len(env)-2] = "CUDA_VISIBLE_DEVICES=0"
	got, stderr := composeRun(t, wholeLimits, env, composeArgs...)
	check(t, got, "visible 0 0", "getenv 0 GPU-d", "getenv 0 100", "getenv 0 1", "alloc 2")
	if stderr != "" {
		t.Errorf("stderr: %q", stderr)
	}
}

// A fraction among the GPUs (30 shares of GPU 0, then GPU 1 whole; then
// the other order, where the whole GPU's GPUSHARE_SHARES is overwritten by
// the fraction's): the environment stays as Nomad merged it, the cap
// holds, and one line on stderr says why.
func TestComposeFractionAmongSeveralUnchanged(t *testing.T) {
	for _, order := range [][]string{{"0=GPU-a=30", "1=GPU-b=100"}, {"1=GPU-b=100", "0=GPU-a=30"}} {
		env := mergedEnv(order...)
		last := strings.Split(order[1], "=")[1]
		got, stderr := composeRun(t, wholeLimits, env, composeArgs...)
		check(t, got, "visible 0 "+last, "getenv 0 "+last, "getenv 0 100", "getenv 0 1", "alloc 2")
		want := "gpushare: 2 GPUs in this task's reservations, not all whole (GPU 0 holds 30 of its 100 shares): " +
			"leaving CUDA_VISIBLE_DEVICES=" + last + " as Nomad merged it\n"
		if stderr != want {
			t.Errorf("stderr:\n got %q\nwant %q", stderr, want)
		}
	}
	// a GPU without its share count is not taken for whole
	_, stderr := composeRun(t, wholeLimits, append(mergedEnv("1=GPU-b=100"), "GPUSHARE_GPU_0=GPU-a"), "visible")
	if !strings.Contains(stderr, "GPU 0 has no valid GPUSHARE_GPU_0_SHARES") {
		t.Errorf("stderr: %q", stderr)
	}
}

// The cap is lifted only when the limits file, not the environment, says
// its reservation was whole GPUs, and fewer than the task composed: a
// fraction's reservation with GPU variables added by the task keeps its
// cap; a single reservation of two whole GPUs (the model contract) keeps
// its cap of both.
func TestComposeCapLiftNeedsWholeLimits(t *testing.T) {
	env := mergedEnv("0=GPU-a=100", "1=GPU-b=100")
	got, _ := composeRun(t, "memory_bytes=10485760\ncompute_pct=30\n", env, "visible", "alloc:16777216")
	check(t, got, "visible 0 GPU-a,GPU-b", "alloc 2")
	got, _ = composeRun(t, "memory_bytes=10485760\ncompute_pct=100\nwhole_gpus=2\n", env, "visible", "alloc:16777216")
	check(t, got, "visible 0 GPU-a,GPU-b", "alloc 2")
}
