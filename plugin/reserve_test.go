package plugin

import (
	"errors"
	"fmt"
	"testing"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/fixtures"
	"github.com/gpushare/gpushare/internal/nomadplugin/base"
	"github.com/hashicorp/go-hclog"
	"github.com/shoenig/test/must"
)

const v100 = "GPU-d1000000-0000-4000-8000-00000000000"

// shares returns share IDs from..to-1 of DGX-1 GPU g.
func shares(g, from, to int) []string {
	var ids []string
	for k := from; k < to; k++ {
		ids = append(ids, fmt.Sprintf("%s%d:%d", v100, g, k))
	}
	return ids
}

func TestReserveFraction(t *testing.T) {
	p, _, _ := newPlugin(t, fixtures.DGX1V100, "")
	p.exists = func(path string) bool { return path == "/dev/nvidiactl" }
	res, err := p.Reserve(shares(3, 10, 35))
	must.NoError(t, err)
	must.Eq(t, map[string]string{
		EnvNvidiaVisible:   v100 + "3",
		EnvCUDAVisible:     v100 + "3",
		EnvShares:          "25",
		EnvShareIDs:        v100 + "3:10-34",
		EnvSharesPerGPU:    "100",
		EnvFraction:        "0.25",
		EnvShareMemory:     "4096",
		EnvSharing:         "mps",
		EnvMPSPipe:         "/tmp/nvidia-mps",
		EnvMPSLog:          "/var/log/nvidia-mps",
		EnvMPSThreads:      "25",
		EnvMPSPinnedMemory: "0=4096M",
		// unique per GPU: kept when Nomad merges a task's reservations
		"GPUSHARE_GPU_3":        v100 + "3",
		"GPUSHARE_GPU_3_SHARES": "25",
	}, res.Envs)
	must.SliceLen(t, 2, res.Mounts)
	must.Eq(t, "/tmp/nvidia-mps", res.Mounts[0].HostPath)
	must.SliceLen(t, 1, res.Devices)
	must.Eq(t, "/dev/nvidiactl", res.Devices[0].HostPath)
}

func TestReserveWholeGPUs(t *testing.T) {
	p, _, _ := newPlugin(t, fixtures.DGX1V100, "")
	ids := append(shares(4, 0, 100), shares(0, 0, 100)...)
	res, err := p.Reserve(ids)
	must.NoError(t, err)
	// NVML index order, whatever order Nomad used
	must.Eq(t, v100+"0,"+v100+"4", res.Envs[EnvCUDAVisible])
	must.Eq(t, v100+"0:0-99 "+v100+"4:0-99", res.Envs[EnvShareIDs])
	must.Eq(t, "2", res.Envs[EnvFraction])
	must.Eq(t, "100", res.Envs[EnvMPSThreads])
	must.Eq(t, "0=16384M,1=16384M", res.Envs[EnvMPSPinnedMemory])
	for _, i := range []string{"0", "4"} {
		must.Eq(t, v100+i, res.Envs[EnvGPUPrefix+i])
		must.Eq(t, "100", res.Envs[EnvGPUPrefix+i+EnvGPUSharesSuffix])
	}
	must.MapNotContainsKey(t, res.Envs, EnvGPUPrefix+"1")
}

func TestReserveTimesliceHasNoMPS(t *testing.T) {
	p, _, _ := newPlugin(t, fixtures.DGX1V100, `sharing = "timeslice"`)
	res, err := p.Reserve(shares(1, 0, 50))
	must.NoError(t, err)
	must.MapNotContainsKey(t, res.Envs, EnvMPSPipe)
	must.SliceEmpty(t, res.Mounts)
	must.Eq(t, "0.5", res.Envs[EnvFraction])
}

func TestReserveRefusals(t *testing.T) {
	p, _, _ := newPlugin(t, fixtures.DGX1V100, "")
	mustRefuse(t, p, []refusal{
		{"empty", nil, ErrEmptyReservation, nil},
		{"unknown gpu", []string{"GPU-nope:1"}, ErrUnknownShare, []string{"GPU-nope:1", "shares 0..99"}},
		{"index past shares_per_gpu", []string{v100 + "0:100"}, ErrUnknownShare, []string{v100 + "0:100"}},
		{"not a share id", []string{"banana"}, ErrUnknownShare, []string{"banana"}},
		{"duplicate", []string{v100 + "0:1", v100 + "0:1"}, ErrDuplicateShare, []string{v100 + "0:1"}},
		{"fraction on two gpus", append(shares(0, 0, 10), shares(5, 0, 10)...), ErrSplitFraction,
			[]string{"20 shares (fewer than shares_per_gpu = 100) span 2 GPUs", v100 + "0 has 10", v100 + "5 has 10"}},
		{"partial gpu in a multi-gpu request", append(shares(0, 0, 100), shares(1, 0, 50)...), ErrPartialGPU,
			[]string{"150 shares", v100 + "1 has 50 of 100", "multiple of 100"}},
		{"more than a gpu spread thin", append(shares(0, 0, 60), shares(1, 0, 60)...), ErrPartialGPU,
			[]string{v100 + "0 has 60 of 100", v100 + "1 has 60 of 100"}},
	})
}

func TestReserveExclusive(t *testing.T) {
	p, _, _ := newPlugin(t, fixtures.DGX1V100, `sharing = "exclusive"`)
	_, err := p.Reserve(shares(2, 0, 30))
	must.True(t, errors.Is(err, ErrExclusive))
	must.ErrorContains(t, err, "ask for 100")
	res, err := p.Reserve(shares(2, 0, 100))
	must.NoError(t, err)
	must.Eq(t, "1", res.Envs[EnvFraction])
}

func TestRanges(t *testing.T) {
	must.Eq(t, "0-2,5,7-8", ranges([]int{8, 7, 5, 2, 1, 0}))
}

func BenchmarkReserve800(b *testing.B) {
	p := benchPlugin(b)
	var ids []string
	for g := range 8 {
		ids = append(ids, shares(g, 0, 100)...)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Reserve(ids); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFingerprint8x100(b *testing.B) {
	p := benchPlugin(b)
	b.ReportAllocs()
	for b.Loop() {
		if fp := p.fingerprintOnce(b.Context()); fp.Error != nil || len(fp.Devices[0].Devices) != 800 {
			b.Fatalf("fingerprint: %v", fp.Error)
		}
	}
}

// BenchmarkDecodeNode decodes the attributes of a fingerprinted DGX-1
// node, as the scheduler does for every node it sees.
func BenchmarkDecodeNode(b *testing.B) {
	p := benchPlugin(b)
	g := p.fingerprintOnce(b.Context()).Devices[0]
	b.ReportAllocs()
	for b.Loop() {
		if _, err := devicefn.DecodeGroup(g.Name, fromSDKAttributes(g.Attributes)); err != nil {
			b.Fatal(err)
		}
	}
}

func benchPlugin(b *testing.B) *Plugin {
	b.Helper()
	path, err := fixtures.WriteTo(fixtures.DGX1V100, b.TempDir())
	must.NoError(b, err)
	// the config as Nomad hands it over: the HCL decoded with the spec's
	// defaults for everything not set
	cfg := fmt.Sprintf("fixture = %q\nsharing = %q\nfingerprint_period = \"1m\"\nmps {\n daemons = %q\n}",
		path, devicefn.SharingMPS, MPSDaemonsNode)
	p := New(hclog.NewNullLogger(), nil)
	must.NoError(b, p.SetConfig(&base.Config{PluginConfig: encodeConfig(b, cfg)}))
	must.NoError(b, p.fingerprintOnce(b.Context()).Error)
	return p
}

// BenchmarkStats8x100 is one stats sample of a fingerprinted DGX-1 node
// (800 shares), which the Nomad client asks for every collection interval.
func BenchmarkStats8x100(b *testing.B) {
	p := benchPlugin(b)
	p.fingerprintOnce(b.Context())
	b.ReportAllocs()
	for b.Loop() {
		if resp := p.statsOnce(b.Context()); resp == nil || resp.Error != nil || len(resp.Groups) == 0 {
			b.Fatalf("stats: %+v", resp)
		}
	}
}
