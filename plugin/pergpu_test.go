package plugin

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/fixtures"
	"github.com/gpushare/gpushare/internal/nomadplugin/base"
	"github.com/gpushare/gpushare/internal/nomadplugin/device"
	"github.com/hashicorp/go-hclog"
	"github.com/shoenig/test/must"
)

const v100Model = "Tesla V100-SXM2-16GB"

// With device_groups = "gpu" each GPU of a DGX-1 is an nvidia/gpushare
// group of its own, named "<model> GPU <index>", with the GPU's shares,
// today's attributes for its one GPU and the model, index and node_links
// the scheduler merges back into the node's topology.
func TestFingerprintPerGPUGroups(t *testing.T) {
	_, _, fp := newPlugin(t, fixtures.DGX1V100, `device_groups = "gpu"`)
	must.NoError(t, fp.Error)
	must.SliceLen(t, 8, fp.Devices)
	var decoded []devicefn.GPUGroup
	// the cell order of a DGX-1 V100 (0, 3, 1, 2, 4, 7, 5, 6): each
	// double-NVLink pair holds consecutive ranks
	dgx1Ranks := []int64{0, 2, 3, 1, 4, 6, 7, 5}
	for i, g := range fp.Devices {
		must.NoError(t, g.Validate())
		must.Eq(t, "nvidia", g.Vendor)
		must.Eq(t, "gpushare", g.Type)
		must.Eq(t, v100Model+" GPU "+strconv.Itoa(i), g.Name)
		must.SliceLen(t, 100, g.Devices)
		uuid := v100 + strconv.Itoa(i)
		must.Eq(t, uuid+":0", g.Devices[0].ID)
		must.Eq(t, uuid+":99", g.Devices[99].ID)
		must.Eq(t, v100Model, *g.Attributes["model"].String)
		must.Eq(t, int64(i), *g.Attributes["index"].Int)
		must.Eq(t, dgx1Ranks[i], *g.Attributes["cell_rank"].Int)
		must.Eq(t, int64(1), *g.Attributes["gpus"].Int)
		must.Eq(t, uuid, *g.Attributes["gpu0.uuid"].String)
		must.Eq(t, "X", *g.Attributes["gpu0.links"].String)
		must.MapContainsKey(t, g.Attributes, AttrMPSDaemon)
		gg, err := devicefn.DecodeGPUGroup(g.Name, fromSDKAttributes(g.Attributes))
		must.NoError(t, err)
		decoded = append(decoded, *gg)
	}
	must.Eq(t, "NV2,SYS,SYS,SYS,X,NV1,NV1,NV2", *fp.Devices[4].Attributes["node_links"].String)
	must.Eq(t, "00000000:8A:00.0", fp.Devices[7].Devices[0].HwLocality.PciBusID)

	// merged, they are today's group of the model, marked per GPU
	_, _, today := newPlugin(t, fixtures.DGX1V100, "")
	want, err := devicefn.DecodeGroup(v100Model, fromSDKAttributes(today.Devices[0].Attributes))
	must.NoError(t, err)
	want.PerGPU = true
	want.CellRanks = []int{0, 2, 3, 1, 4, 6, 7, 5}
	merged, err := devicefn.MergeGPUGroups(decoded)
	must.NoError(t, err)
	must.Eq(t, []devicefn.Group{*want}, merged)
}

// A server whose best-connected pairs are index pairs ranks its GPUs in
// index order: a 4-GPU PCIe server of two sockets, and a DGX-1 seen
// through PCIe alone.
func TestFingerprintCellRanksInIndexOrder(t *testing.T) {
	for _, fixture := range []string{fixtures.PCIe4GPU, fixtures.DGX1PCIe} {
		t.Run(fixture, func(t *testing.T) {
			_, _, fp := newPlugin(t, fixture, `device_groups = "gpu"`)
			must.NoError(t, fp.Error)
			must.Positive(t, len(fp.Devices))
			for i, g := range fp.Devices {
				must.Eq(t, int64(i), *g.Attributes["index"].Int)
				must.Eq(t, int64(i), *g.Attributes["cell_rank"].Int)
			}
		})
	}
}

// Reserve and health mean the same per GPU: a whole GPU and a fraction of
// one are reserved, shares of two GPUs as a fraction refused, a lost GPU's
// group alone unhealthy.
func TestPerGPUGroupsReserveAndHealth(t *testing.T) {
	p, path, fp := newPlugin(t, fixtures.DGX1V100, "device_groups = \"gpu\"\nsharing = \"timeslice\"")
	must.NoError(t, fp.Error)
	res, err := p.Reserve(devicefn.ShareIDs(v100+"3", 100))
	must.NoError(t, err)
	must.Eq(t, v100+"3", res.Envs["NVIDIA_VISIBLE_DEVICES"])
	_, err = p.Reserve([]string{v100 + "1:0", v100 + "2:0"})
	must.True(t, errors.Is(err, ErrSplitFraction))

	ch, err := p.Fingerprint(t.Context())
	must.NoError(t, err)
	next(t, ch)
	src, err := os.ReadFile(path)
	must.NoError(t, err)
	head := `gpu "` + v100 + `6" {` + "\n"
	sick := strings.Replace(string(src), head, head+"  healthy = false\n  health_reason = \"XID 79: GPU has fallen off the bus\"\n", 1)
	must.NotEq(t, string(src), sick)
	writeLater(t, path, sick)
	for i, g := range next(t, ch).Devices {
		must.Eq(t, i != 6, g.Devices[0].Healthy, must.Sprint(g.Name))
	}
}

// Stats name the per-GPU groups as the fingerprint does, so Nomad files
// every share's stats under its group.
func TestPerGPUGroupsStats(t *testing.T) {
	p, _, fp := newPlugin(t, fixtures.HGXH100, "device_groups = \"gpu\"")
	must.NoError(t, fp.Error)
	ch, err := p.Stats(t.Context(), 50*time.Millisecond)
	must.NoError(t, err)
	var resp *device.StatsResponse
	select {
	case resp = <-ch:
	case <-time.After(time.Minute): // liveness only
		t.Fatal("no stats")
	}
	must.SliceLen(t, len(fp.Devices), resp.Groups)
	for i, g := range resp.Groups {
		must.Eq(t, fp.Devices[i].Name, g.Name)
		must.MapLen(t, 100, g.InstanceStats)
		must.MapContainsKey(t, g.InstanceStats, fp.Devices[i].Devices[42].ID)
	}
}

func TestDeviceGroupsConfig(t *testing.T) {
	p := New(hclog.NewNullLogger(), nil)
	must.NoError(t, p.SetConfig(&base.Config{PluginConfig: encodeConfig(t, `device_groups = "gpu"`)}))
	must.Eq(t, devicefn.DeviceGroupsGPU, p.cfg.DeviceGroups)
	for body, want := range map[string]string{
		`device_groups = "node"`: `device_groups = "node": must be "model" (one device group per GPU model on a node, nvidia/gpushare/<model>) or "gpu"`,
		`device_groups = ""`:     `device_groups = "": must be "model"`,
	} {
		err := New(hclog.NewNullLogger(), nil).SetConfig(&base.Config{PluginConfig: encodeConfig(t, body)})
		must.True(t, errors.Is(err, ErrConfig))
		must.ErrorContains(t, err, want)
	}
}
