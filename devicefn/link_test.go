package devicefn

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/shoenig/test/must"
)

func TestParseLink(t *testing.T) {
	cases := []struct {
		in   string
		want Link
	}{
		{"X", Link{Kind: LinkSelf}},
		{" NV18 ", Link{Kind: LinkNVLink, NVLinks: 18}},
		{"NV1", Link{Kind: LinkNVLink, NVLinks: 1}},
		{"PIX", Link{Kind: LinkPIX}},
		{"PXB", Link{Kind: LinkPXB}},
		{"PHB", Link{Kind: LinkPHB}},
		{"NODE", Link{Kind: LinkNODE}},
		{"SYS", Link{Kind: LinkSYS}},
		{"SOC", Link{Kind: LinkSYS}},
	}
	for _, c := range cases {
		t.Run(c.in, func(t *testing.T) {
			got, err := ParseLink(c.in)
			must.NoError(t, err)
			must.Eq(t, c.want, got)
		})
	}
	for _, bad := range []string{"", "NV", "NV0", "NV-1", "nv2", "QPI", "NV65"} {
		t.Run("bad "+bad, func(t *testing.T) {
			_, err := ParseLink(bad)
			must.True(t, errors.Is(err, ErrBadLink))
		})
	}
}

func TestLinkOrder(t *testing.T) {
	nv2 := Link{Kind: LinkNVLink, NVLinks: 2}
	nv1 := Link{Kind: LinkNVLink, NVLinks: 1}
	must.True(t, nv2.Better(nv1))
	must.False(t, nv1.Better(nv2))
	must.True(t, nv1.Better(Link{Kind: LinkPIX}))
	must.True(t, Link{Kind: LinkNODE}.Better(Link{Kind: LinkSYS}))
	must.False(t, nv2.Better(nv2))
}

func TestMatrixValidate(t *testing.T) {
	x := Link{Kind: LinkSelf}
	nv := Link{Kind: LinkNVLink, NVLinks: 2}
	sys := Link{Kind: LinkSYS}
	must.NoError(t, Matrix{{x, nv}, {nv, x}}.Validate())
	must.ErrorContains(t, Matrix{{x, nv}, {sys, x}}.Validate(), "not symmetric")
	must.ErrorContains(t, Matrix{{x, nv}, {nv}}.Validate(), "row 1 has 1 entries")
	must.ErrorContains(t, Matrix{{nv, nv}, {nv, x}}.Validate(), "want X on the diagonal")
	must.ErrorContains(t, Matrix{{x, x}, {x, x}}.Validate(), "only for a GPU to itself")
}

func TestShareID(t *testing.T) {
	id, err := ParseShareID("GPU-6b5fa173-5fa6-2d38-54fe-d64c1fe4fe10:37")
	must.NoError(t, err)
	must.Eq(t, ShareID{UUID: "GPU-6b5fa173-5fa6-2d38-54fe-d64c1fe4fe10", Index: 37}, id)
	must.Eq(t, "GPU-6b5fa173-5fa6-2d38-54fe-d64c1fe4fe10:37", id.String())
	for _, bad := range []string{"", "GPU-1", ":3", "GPU-1:", "GPU-1:-1", "GPU-1:+1", "GPU-1:01", "GPU-1:x"} {
		_, err := ParseShareID(bad)
		must.True(t, errors.Is(err, ErrBadShareID), must.Sprintf("input %q", bad))
	}
	must.Eq(t, []string{"G:0", "G:1", "G:2"}, ShareIDs("G", 3))
}

func FuzzParseShareID(f *testing.F) {
	for _, s := range []string{"GPU-1:0", "GPU-1:99", "a:b:3", ":", "GPU-1:007"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseShareID(s)
		if err != nil {
			return
		}
		if id.String() != s {
			t.Fatalf("ParseShareID(%q) = %+v, which prints as %q", s, id, id.String())
		}
	})
}

func FuzzDecodeRow(f *testing.F) {
	for _, s := range []string{"X,NV18,SYS", "PIX,PXB,PHB,NODE", "", ",", "NV0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		row, err := DecodeRow(s)
		if err != nil {
			return
		}
		again, err := DecodeRow(EncodeRow(row))
		if err != nil {
			t.Fatalf("re-decoding %q: %v", EncodeRow(row), err)
		}
		if EncodeRow(again) != EncodeRow(row) {
			t.Fatalf("round trip changed %q to %q", EncodeRow(row), EncodeRow(again))
		}
	})
}

func TestMatrixJSON(t *testing.T) {
	m := Matrix{{{Kind: LinkSelf}, {Kind: LinkNVLink, NVLinks: 2}}, {{Kind: LinkNVLink, NVLinks: 2}, {Kind: LinkSelf}}}
	b, err := json.Marshal(m)
	must.NoError(t, err)
	must.Eq(t, `[["X","NV2"],["NV2","X"]]`, string(b))
	var got Matrix
	must.NoError(t, json.Unmarshal(b, &got))
	must.Eq(t, m, got)
	must.Error(t, json.Unmarshal([]byte(`[["X","QPI"]]`), &got))
	_, err = json.Marshal(Link{Kind: LinkSYS, NVLinks: 3})
	must.Error(t, err)
}
