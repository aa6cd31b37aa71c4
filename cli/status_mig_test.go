package cli

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/devicefn/fixture"
	"github.com/gpushare/gpushare/fixtures"
	"github.com/gpushare/gpushare/scheduler/nomadattr"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// gpushare status shows each shared MIG instance under its parent GPU,
// with the shares it offers and those its allocations hold.
func TestStatusShowsSharedMIGInstances(t *testing.T) {
	cleanEnv(t)
	const mig3 = "MIG-a2000000-0000-4000-8000-000000000001"
	st, err := fixture.ParseShipped(fixtures.A100MIG)
	must.NoError(t, err)
	node := &api.Node{ID: "a100-0000-1111", Name: "a100", Status: "ready", NodeResources: &api.NodeResources{}}
	for _, g := range devicefn.SharedMIGGroups(&st.Inventory, 100, devicefn.SharingMPS, nil) {
		d := nomadattr.Device(&g)
		node.NodeResources.Devices = append(node.NodeResources.Devices, d)
	}
	alloc := &api.AllocationListStub{ID: "aaaaaaaa-1", Namespace: "default", JobID: "infer", TaskGroup: "g", ClientStatus: "running", DesiredStatus: "run",
		AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{"t": {Devices: []*api.AllocatedDeviceResource{
			{Vendor: "nvidia", Type: "gpushare", Name: "NVIDIA A100-SXM4-40GB MIG 3g.20gb", DeviceIDs: devicefn.ShareIDs(mig3, 20)}}}}}}
	nomad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/nodes":
			_ = json.NewEncoder(w).Encode([]*api.NodeListStub{{ID: node.ID, Name: node.Name}})
		case "/v1/node/" + node.ID:
			_ = json.NewEncoder(w).Encode(node)
		case "/v1/allocations":
			_ = json.NewEncoder(w).Encode([]*api.AllocationListStub{alloc})
		default:
			http.NotFound(w, r)
		}
	}))
	defer nomad.Close()
	code, out, errOut := run("status", "-address", nomad.URL, "-scheduler", "")
	must.EqOp(t, 0, code, must.Sprint(errOut))
	must.StrContains(t, out, "2 x NVIDIA A100-SXM4-40GB  sharing=mps  mig=shared  20/198 shares used")
	must.StrContains(t, out, "    MIG 3g.20gb    "+mig3+"  [##########..........]   20/42   infer/g[aaaaaaaa]:20")
	must.StrContains(t, out, "    MIG 2g.10gb    MIG-a2000000-0000-4000-8000-000000000002  [....................]    0/28   free")
}
