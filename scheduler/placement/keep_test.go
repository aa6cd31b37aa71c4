package placement

import (
	"testing"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/shoenig/test/must"
)

func TestKeepAndPrefer(t *testing.T) {
	s := cluster(t, NodeSpec{ID: "a", GPUs: 4})
	n, _ := s.Node("a")
	sh := func(g, from, to int) []string {
		var out []string
		for k := from; k < to; k++ {
			out = append(out, devicefn.ShareID{UUID: n.GPUs[g].UUID, Index: k}.String())
		}
		return out
	}
	quarter := Request{ID: "q", Count: 1, Shares: 25}
	held := []Held{{Node: "a", Shares: sh(1, 10, 35)}}

	d, err := s.Keep(&quarter, "gpushare", held)
	must.NoError(t, err)
	must.Eq(t, sh(1, 10, 35), d.Placements[0].Shares)
	must.True(t, s.Empty()) // Keep changes nothing

	cases := map[string]func() (Request, []Held){
		"count differs": func() (Request, []Held) { r := quarter; r.Count = 2; return r, held },
		"shares differ": func() (Request, []Held) { r := quarter; r.Shares = 30; return r, held },
		"node avoided":  func() (Request, []Held) { r := quarter; r.Avoid = []string{"a"}; return r, held },
		"model differs": func() (Request, []Held) { r := quarter; r.Models = []string{"H100"}; return r, held },
		"node gone":     func() (Request, []Held) { return quarter, []Held{{Node: "b", Shares: held[0].Shares}} },
		"spans two GPUs": func() (Request, []Held) {
			return quarter, []Held{{Node: "a", Shares: append(sh(0, 0, 12), sh(1, 0, 13)...)}}
		},
		"share not known": func() (Request, []Held) { return quarter, []Held{{Node: "a", Shares: sh(1, 90, 115)}} },
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			r, h := c()
			_, err := s.Keep(&r, "gpushare", h)
			must.Error(t, err)
		})
	}
	must.NoError(t, s.AddAlloc(Alloc{ID: "other", Node: "a", Shares: sh(1, 30, 31)}))
	_, err = s.Keep(&quarter, "gpushare", held)
	must.ErrorContains(t, err, "in use")
	must.NoError(t, s.SetHealth(n.GPUs[2].UUID, false))
	_, err = s.Keep(&quarter, "gpushare", []Held{{Node: "a", Shares: sh(2, 0, 25)}})
	must.ErrorContains(t, err, "unhealthy")

	// a grown fraction stays on its GPU, its held shares first
	half := Request{ID: "h", Count: 1, Shares: 50}
	d, err = s.Prefer(&half, "gpushare", []Held{{Node: "a", Shares: sh(3, 40, 65)}})
	must.NoError(t, err)
	must.Eq(t, []string{n.GPUs[3].UUID}, d.Placements[0].GPUs)
	must.Eq(t, sh(3, 40, 65), d.Placements[0].Shares[:25])
	must.SliceLen(t, 50, d.Placements[0].Shares)
	// ... unless the GPU has no room for it
	must.NoError(t, s.AddAlloc(Alloc{ID: "more", Node: "a", Shares: sh(1, 40, 60)}))
	_, err = s.Prefer(&Request{ID: "h", Count: 1, Shares: 90}, "gpushare", []Held{{Node: "a", Shares: sh(1, 10, 35)}})
	must.ErrorContains(t, err, "free")
	// whole GPUs: the held ones
	one := Request{ID: "w", Count: 1, Shares: 100}
	d, err = s.Prefer(&one, "gpushare", []Held{{Node: "a", Shares: sh(0, 0, 100)}})
	must.NoError(t, err)
	must.Eq(t, []string{n.GPUs[0].UUID}, d.Placements[0].GPUs)
	_, err = s.Prefer(&Request{ID: "w", Count: 2, Shares: 25}, "gpushare", held)
	must.Error(t, err)
}
