package pin

import (
	"testing"

	"github.com/gpushare/gpushare/scheduler/interference"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/shoenig/test/must"
)

func TestApplyMeta(t *testing.T) {
	m := interference.Default()
	r := placement.Request{ID: "j", Count: 1}
	must.NoError(t, ApplyMeta(&r, map[string]string{MetaVC: "research", MetaClass: "production", MetaProfile: "ResNet-50 (batch size 32)"}, m))
	must.Eq(t, "research", r.VC)
	must.Eq(t, placement.ClassProduction, r.Class)
	must.Eq(t, "ResNet-50 (batch size 32)", r.Profile.Name)

	r = placement.Request{ID: "j", Count: 1}
	must.NoError(t, ApplyMeta(&r, map[string]string{MetaSMUtil: "0.7", MetaMemBW: "0.2"}, m))
	must.Eq(t, interference.Profile{SM: 0.7, MemBW: 0.2}, r.Profile)

	// replicas spread unless the job asks to pack them
	r = placement.Request{ID: "j", Count: 3}
	must.NoError(t, ApplyMeta(&r, map[string]string{MetaReplicas: "spread"}, m))
	must.False(t, r.Pack)
	must.NoError(t, ApplyMeta(&r, map[string]string{MetaReplicas: "pack"}, m))
	must.True(t, r.Pack)

	// A profile learned from the stats of the job running alone.
	learned, ok := interference.Learn([]interference.Observation{{SMUtilPct: 90, MemUtilPct: 40}})
	must.True(t, ok)
	r.Profile = learned
	must.NoError(t, r.Validate())

	for _, meta := range []map[string]string{
		{MetaProfile: "no-such-model"},
		{MetaSMUtil: "1.5"},
		{MetaMemBW: "lots"},
		{MetaClass: "vip"},
		{MetaClass: "vip", MetaProfile: "A3C"},
		{MetaReplicas: "together"},
	} {
		r := placement.Request{ID: "j", Count: 1}
		must.ErrorIs(t, ApplyMeta(&r, meta, m), placement.ErrBadRequest, must.Sprint(meta))
	}
}
