package plugin

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/internal/nomadplugin/structs"
	"github.com/shoenig/test/must"
)

// TestSDKAttributesRoundTrip: whatever the plugin fingerprints, Nomad's
// plugin SDK accepts, and devicefn decodes back exactly.
func TestSDKAttributesRoundTrip(t *testing.T) {
	must.Eq(t, structs.UnitMiB, devicefn.UnitMiB)
	r := rand.New(rand.NewPCG(7, 8))
	kinds := []devicefn.Link{{Kind: devicefn.LinkNVLink, NVLinks: 1 + r.IntN(18)}, {Kind: devicefn.LinkPIX}, {Kind: devicefn.LinkPXB}, {Kind: devicefn.LinkPHB}, {Kind: devicefn.LinkNODE}, {Kind: devicefn.LinkSYS}}
	for trial := range 200 {
		n := 1 + r.IntN(16)
		inv := &devicefn.Inventory{DriverVersion: "550.54.15", CUDAVersion: "12.4", Links: make(devicefn.Matrix, n)}
		for i := range n {
			inv.Links[i] = make([]devicefn.Link, n)
		}
		for i := range n {
			inv.Links[i][i] = devicefn.Link{Kind: devicefn.LinkSelf}
			for j := i + 1; j < n; j++ {
				l := kinds[r.IntN(len(kinds))]
				inv.Links[i][j], inv.Links[j][i] = l, l
			}
			inv.GPUs = append(inv.GPUs, devicefn.GPU{
				Index: i, UUID: fmt.Sprintf("GPU-%08x-0000-4000-8000-%012x", r.Uint32(), i), Model: "NVIDIA H100 80GB HBM3",
				MemoryMiB: uint64(1024 + r.IntN(80000)), PCIBusID: fmt.Sprintf("00000000:%02X:00.0", i),
				NUMANode: r.IntN(3) - 1, ComputeCapability: "9.0", Minor: i,
			})
		}
		must.NoError(t, inv.Validate())
		for _, g := range devicefn.Groups(inv, 1+r.IntN(devicefn.MaxSharesPerGPU), devicefn.SharingTimeslice, nil) {
			sdk := sdkAttributes(g.Attributes())
			for k, a := range sdk {
				must.NoError(t, a.Validate(), must.Sprintf("attribute %s", k))
			}
			got, err := devicefn.DecodeGroup(g.Model, fromSDKAttributes(sdk))
			must.NoError(t, err, must.Sprintf("trial %d", trial))
			must.Eq(t, g, *got, must.Sprintf("trial %d", trial))
		}
	}
}
