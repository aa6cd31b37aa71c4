package placement

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/gpushare/gpushare/scheduler/interference"
	"github.com/shoenig/test/must"
)

// A placement's reason writes its numbers as fmt's %.2f and %+.2f would,
// signs, zeros, NaN and infinities included.
func TestAppendFixed2IsFmts(t *testing.T) {
	for _, v := range []float64{0, math.Copysign(0, -1), 1.234, -1.235, 0.005, -0.004, 1e9, math.NaN(), math.Inf(1), math.Inf(-1)} {
		must.Eq(t, fmt.Sprintf("%.2f", v), string(appendFixed2(nil, v, false)))
		must.Eq(t, fmt.Sprintf("%+.2f", v), string(appendFixed2([]byte{}, v, true)))
	}
	must.Eq(t, "x: +0.50", string(appendFixed2([]byte("x: "), 0.5, true)))
}

// A fraction placed beside others says whom it shares the GPU with, in
// ID order, and its predicted throughput, as the formula written with
// fmt says it.
func TestAPairedPlacementSaysWhomItSharesWith(t *testing.T) {
	s := cluster(t, NodeSpec{ID: "n1", GPUs: 1, Model: "Tesla V100-SXM2-16GB"})
	p := policy(t, PolicyGpushare, Options{})
	prof := interference.Profile{SM: 0.4, MemBW: 0.2}
	place(t, s, p, Request{ID: "b", Shares: 25, Profile: prof})
	place(t, s, p, Request{ID: "a", Shares: 25, Profile: interference.Profile{Name: "ResNet-50 (batch size 64)"}})
	r := Request{ID: "c", Count: 1, Shares: 25, Profile: prof}
	d := place(t, s, p, r)
	pl := d.Placements[0]
	names := []string{"a[0] (ResNet-50 (batch size 64))", "b[0] (" + prof.String() + ")"}
	want := fmt.Sprintf("shares its GPU with %s: predicted %.2fx of alone for %s (%s)", strings.Join(names, ", "), pl.Predicted, r.ID, r.Profile)
	must.StrHasSuffix(t, "; "+want, pl.Reason)
	must.StrHasPrefix(t, "25 shares of GPU 0 on node n1; fragmentation ", pl.Reason)
}

// A group of more allocations than the cluster has room for, each of
// which would fit, says so with how many fit: before, it was refused as
// if one allocation needed more GPUs than any node had free ("needs 1
// free GPUs ... the most on any node is 1").
func TestAGroupLargerThanTheRoomSaysHowManyFit(t *testing.T) {
	s := cluster(t, NodeSpec{ID: "n1", GPUs: 4, Model: "Tesla V100-SXM2-16GB"}, NodeSpec{ID: "n2", GPUs: 4, Model: "Tesla V100-SXM2-16GB"})
	p := policy(t, PolicyGpushare, Options{})
	place(t, s, p, Request{ID: "busy", Count: 1, Shares: 300})
	d := p.Decide(s, Request{ID: "wide", Count: 6, Shares: 100})
	must.False(t, d.Placed())
	must.StrContains(t, d.Refusal.Message, "needs 6 allocations of 100 shares")
	must.StrContains(t, d.Refusal.Message, "hold about 2 of them now", must.Sprint("one whole GPU per node for a group on per-model nodes that are not staged: n1 has 1 free, n2 holds 1 (OnePerNode)"))
}
