package plugin

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/fixtures"
	"github.com/gpushare/gpushare/internal/nomadplugin/base"
	"github.com/gpushare/gpushare/internal/nomadplugin/hclspec"
	"github.com/hashicorp/go-hclog"
	"github.com/shoenig/test/must"
)

// fuzzPlugin is a DGX-1 plugin (fingerprinted once, no loop) with the
// given sharing and shares per GPU; GPU 7 is unhealthy.
func fuzzPlugin(t testing.TB, sharing string, perGPU int) *Plugin {
	path, err := fixtures.WriteTo(fixtures.DGX1V100, t.TempDir())
	must.NoError(t, err)
	cfg := Config{Enabled: true, SharesPerGPU: perGPU, Sharing: sharing, Fixture: path, FingerprintPeriod: "1m",
		MIGInstances: devicefn.MIGWhole, DeviceGroups: devicefn.DeviceGroupsModel, IgnoredGPUIDs: []string{v100 + "6"},
		MPS: MPSConfig{PipeDirectory: "/tmp/nvidia-mps", LogDirectory: "/var/log/nvidia-mps", Daemons: MPSDaemonsNode}}
	buf, err := hclspec.Encode(configSpec, cfg)
	must.NoError(t, err)
	p := New(hclog.NewNullLogger(), nil)
	p.exists = func(path string) bool { return path != "/dev/nvidia-uvm-tools" }
	must.NoError(t, p.SetConfig(&base.Config{PluginConfig: buf}))
	must.NoError(t, p.fingerprintOnce(t.Context()).Error)
	p.mu.Lock()
	sick := *p.gpus[v100+"7"]
	sick.healthy, sick.reason = false, "XID 79"
	p.gpus[v100+"7"] = &sick
	p.mu.Unlock()
	return p
}

// fuzzIDs reads share IDs separated by "|"; "@g:a-b" stands for the
// shares a..b-1 of DGX-1 GPU g, so that whole GPUs are easy to reach.
func fuzzIDs(s string) []string {
	var ids []string
	for tok := range strings.SplitSeq(s, "|") {
		g, span, ok := strings.Cut(strings.TrimPrefix(tok, "@"), ":")
		from, to, ok2 := strings.Cut(span, "-")
		a, err1 := strconv.Atoi(from)
		b, err2 := strconv.Atoi(to)
		if !strings.HasPrefix(tok, "@") || !ok || !ok2 || err1 != nil || err2 != nil || b-a > 2000 {
			ids = append(ids, tok)
			continue
		}
		for k := a; k < b; k++ {
			ids = append(ids, fmt.Sprintf("%s%s:%d", v100, g, k))
		}
	}
	return ids
}

var reserveErrs = []error{ErrUnknownShare, ErrUnhealthyShare, ErrSplitFraction, ErrPartialGPU, ErrExclusive, ErrDuplicateShare, ErrEmptyReservation}

// FuzzReserve: any list of device IDs, under every sharing mode: Reserve
// never panics; it refuses with one of its errors, naming the IDs, or
// hands out shares that obey the rules of its doc comment.
func FuzzReserve(f *testing.F) {
	modes := []struct {
		sharing string
		perGPU  int
	}{{devicefn.SharingMPS, 100}, {devicefn.SharingTimeslice, 7}, {devicefn.SharingExclusive, 4}, {devicefn.SharingMPS, 1}}
	plugins := make([]*Plugin, len(modes))
	for i, m := range modes {
		plugins[i] = fuzzPlugin(f, m.sharing, m.perGPU)
	}
	for _, s := range []string{
		"@3:10-35", "@4:0-100|@0:0-100", "@1:0-50", "@2:0-4", "@2:0-3", "@0:0-1|@1:0-1",
		"", "|", ",", "@0:0-10|@0:5-6", "@0:0-100|@1:0-50", "@0:0-60|@1:0-60",
		"@7:0-1", "@6:0-1", "@8:0-1", "@0:100-101", "@0:-1-0",
		v100 + "0:9223372036854775807", v100 + "0:99999999999999999999", v100 + "0:+1", v100 + "0:01", v100 + "0:-0",
		v100 + "0:1," + v100 + "1:1", ":1", "GPU-nope:1", "banana", v100 + "0", v100 + "0:", " " + v100 + "0:1",
		v100 + "0:1|" + v100 + "0:1", "@0:0-3|" + v100 + "1:0", "@0:0-7|@1:0-7|@7:0-7",
	} {
		for mode := range modes {
			f.Add(uint8(mode), s)
		}
	}
	f.Fuzz(func(t *testing.T, mode uint8, s string) {
		m := modes[int(mode)%len(modes)]
		p := plugins[int(mode)%len(modes)]
		ids := fuzzIDs(s)
		res, err := p.Reserve(ids)
		if err != nil {
			if !slices.ContainsFunc(reserveErrs, func(e error) bool { return errors.Is(err, e) }) {
				t.Fatalf("refusal %q wraps none of the reservation errors", err)
			}
			return
		}
		n := len(ids)
		byGPU := map[string]int{}
		for _, id := range ids {
			sid, err := devicefn.ParseShareID(id)
			if err != nil || sid.Index >= m.perGPU {
				t.Fatalf("reserved share %q: %v", id, err)
			}
			if slices.Contains([]string{v100 + "6", v100 + "7"}, sid.UUID) {
				t.Fatalf("reserved share %q of an ignored or unhealthy GPU", id)
			}
			byGPU[sid.UUID]++
		}
		if len(byGPU) == 0 || (n < m.perGPU && len(byGPU) != 1) {
			t.Fatalf("%d shares over %d GPUs", n, len(byGPU))
		}
		for u, k := range byGPU {
			if k > m.perGPU || (n >= m.perGPU && k != m.perGPU) {
				t.Fatalf("%s has %d of %d shares in a request of %d (duplicates?)", u, k, m.perGPU, n)
			}
		}
		if m.sharing == devicefn.SharingExclusive && n%m.perGPU != 0 {
			t.Fatalf("exclusive sharing handed out %d shares", n)
		}
		visible := strings.Split(res.Envs[EnvCUDAVisible], ",")
		if len(visible) != len(byGPU) || res.Envs[EnvNvidiaVisible] != res.Envs[EnvCUDAVisible] || res.Envs[EnvShares] != strconv.Itoa(n) {
			t.Fatalf("envs %v for shares of %v", res.Envs, byGPU)
		}
		for _, u := range visible {
			if byGPU[u] == 0 {
				t.Fatalf("%s is visible but holds no share", u)
			}
		}
		if f, err := strconv.ParseFloat(res.Envs[EnvFraction], 64); err != nil || math.Abs(f-float64(n)/float64(m.perGPU)) > 1e-9 {
			t.Fatalf("fraction %q for %d shares", res.Envs[EnvFraction], n)
		}
		if m.sharing == devicefn.SharingMPS {
			th, err := strconv.Atoi(res.Envs[EnvMPSThreads])
			if err != nil || th < 1 || th > 100 {
				t.Fatalf("MPS thread percentage %q", res.Envs[EnvMPSThreads])
			}
		}
	})
}
