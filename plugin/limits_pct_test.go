package plugin

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gpushare/gpushare/fixtures"
	"github.com/shoenig/test/must"
)

// The library refuses a limits file whose compute_pct is not 1-100 (0
// would pace every launch for ever, issue 29 defect 9b): the plugin never
// writes one.
func TestLimitsFileComputePctInRange(t *testing.T) {
	for _, c := range []struct{ pct, want int }{{0, 1}, {-5, 1}, {1, 1}, {25, 25}, {100, 100}, {250, 100}} {
		f := string(interposerLimits{memoryBytes: 1 << 30, computePct: c.pct}.file())
		must.StrContains(t, f, "\ncompute_pct="+strconv.Itoa(c.want)+"\n")
	}
}

// interposer.context_mib is written as context_bytes, charged by the
// library to each process for its CUDA context (issue 29, defect 2d);
// absent by default.
func TestReserveInterposerContextMiB(t *testing.T) {
	for _, c := range []struct{ extra, want string }{
		{"", ""},
		{"context_mib = 512\n", "context_bytes=536870912\n"},
	} {
		p := interposerPluginWith(t, "mps", c.extra)
		res, err := p.Reserve(shares(3, 10, 35))
		must.NoError(t, err)
		limits, err := os.ReadFile(filepath.Join(res.Envs[EnvLimits], "limits"))
		must.NoError(t, err)
		if c.want == "" {
			must.False(t, strings.Contains(string(limits), "context_bytes"))
		} else {
			must.StrContains(t, string(limits), "\n"+c.want)
		}
	}
}

// interposer.turn_ms reaches a capped reservation's limits as turn_ms: the
// round in which the library's capped tasks of one GPU take turns
// (src/slice.c, "Side by side"), 100 ms by default, 0 when turned off. A
// reservation the library does not pace (under MPS, whose thread
// percentage holds it; a whole GPU) gets none.
func TestReserveInterposerTurnMs(t *testing.T) {
	for _, c := range []struct {
		sharing, extra string
		ids            []string
		want           string
	}{
		{"timeslice", "", shares(3, 10, 35), "turn_ms=100\n"},
		{"timeslice", "turn_ms = 250\n", shares(3, 10, 35), "turn_ms=250\n"},
		{"timeslice", "turn_ms = 0\n", shares(3, 10, 35), "turn_ms=0\n"},
		{"mps", "", shares(3, 10, 35), ""},
		{"timeslice", "", shares(3, 0, 100), ""},
	} {
		p := interposerPluginWith(t, c.sharing, c.extra)
		res, err := p.Reserve(c.ids)
		must.NoError(t, err)
		limits, err := os.ReadFile(filepath.Join(res.Envs[EnvLimits], "limits"))
		must.NoError(t, err)
		if c.want == "" {
			must.StrNotContains(t, string(limits), "turn_ms", must.Sprint(c))
		} else {
			must.StrContains(t, string(limits), "\n"+c.want, must.Sprint(c))
		}
	}
}

// interposerPluginWith is a plugin on the DGX-1 fixture sharing as sharing
// says, with the interposer on (its library a placeholder file, its
// state_dir a temporary directory) and more of its block in extra.
func interposerPluginWith(t *testing.T, sharing, extra string) *Plugin {
	t.Helper()
	dir := t.TempDir()
	lib := filepath.Join(dir, "libgpushare-cuda.so")
	must.NoError(t, os.WriteFile(lib, []byte("not really"), 0o644))
	p, _, _ := newPlugin(t, fixtures.DGX1V100, `sharing = "`+sharing+`"
interposer {
  enabled = true
  library = "`+lib+`"
  state_dir = "`+filepath.Join(dir, "reservations")+`"
  `+extra+`}`)
	return p
}
