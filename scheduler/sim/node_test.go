package sim

import (
	"testing"

	"github.com/gpushare/gpushare/devicefn/topologies"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/shoenig/test/must"
)

func TestNodeFromSpec(t *testing.T) {
	n, err := NodeFromSpec(NodeSpec{ID: "dgx", Rack: "r1", CPU: 1000, MemoryMiB: 1024, GPUs: 8, Model: "V100", Topology: topologies.DGX1V100})
	must.NoError(t, err)
	must.Eq(t, "r1", n.Rack)
	must.SliceLen(t, 8, n.GPUs)
	must.Eq(t, 1, n.GPUs[7].NUMA)

	_, err = NodeFromSpec(NodeSpec{ID: "x", GPUs: 4, Topology: topologies.DGX1V100})
	must.ErrorIs(t, err, placement.ErrBadNode)
	must.ErrorContains(t, err, "topology dgx1-v100 has 8 GPUs, not 4")
	_, err = NodeFromSpec(NodeSpec{ID: "x", GPUs: 4, Topology: "no-such-server"})
	must.ErrorContains(t, err, `unknown topology "no-such-server"`)
	n, err = NodeFromSpec(NodeSpec{ID: "plain", GPUs: 2})
	must.NoError(t, err)
	must.SliceLen(t, 2, n.GPUs)
}
