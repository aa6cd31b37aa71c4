package devicefn

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shoenig/test/must"
)

func TestShareIDsEnv(t *testing.T) {
	byGPU := map[string][]int{"GPU-b": {50, 0, 1, 2, 3, 7}, "GPU-a": {99}}
	s := FormatShareIDs([]string{"GPU-a", "GPU-b"}, byGPU)
	must.Eq(t, "GPU-a:99 GPU-b:0-3,7,50", s)
	got, err := ParseShareIDs(s)
	must.NoError(t, err)
	must.Eq(t, map[string][]string{
		"GPU-a": {"GPU-a:99"},
		"GPU-b": {"GPU-b:0", "GPU-b:1", "GPU-b:2", "GPU-b:3", "GPU-b:7", "GPU-b:50"},
	}, got)

	// MIG: a shared instance's shares, a whole instance by its UUID
	got, err = ParseShareIDs("MIG-3g:0-1 MIG-7g")
	must.NoError(t, err)
	must.Eq(t, map[string][]string{"MIG-3g": {"MIG-3g:0", "MIG-3g:1"}, "MIG-7g": {"MIG-7g"}}, got)

	for _, bad := range []string{"MIG-7g MIG-7g", "GPU-a", "GPU-a:", ":1", "GPU-a:3-1", "GPU-a:x", "GPU-a:-1", "GPU-a:1 GPU-a:2", "GPU-a:0-99999999"} {
		_, err := ParseShareIDs(bad)
		must.ErrorIs(t, err, ErrBadShareID, must.Sprint(bad))
	}
}

func FuzzParseShareIDs(f *testing.F) {
	f.Add("GPU-a:0-24,50 GPU-b:1")
	f.Add("MIG-a:0-13 MIG-b")
	f.Fuzz(func(t *testing.T, s string) {
		byGPU, err := ParseShareIDs(s)
		if err != nil {
			return
		}
		for u, ids := range byGPU {
			for _, id := range ids {
				if id == u && strings.HasPrefix(u, "MIG-") {
					continue // a whole MIG instance
				}
				sid, err := ParseShareID(id)
				if err != nil || sid.UUID != u {
					t.Fatalf("%q gave share %q of GPU %q", s, id, u)
				}
			}
		}
	})
}

func TestProcFS(t *testing.T) {
	root := t.TempDir()
	write := func(pid, name, content string) {
		must.NoError(t, os.MkdirAll(filepath.Join(root, pid), 0o755))
		must.NoError(t, os.WriteFile(filepath.Join(root, pid, name), []byte(content), 0o644))
	}
	write("7", "environ", "A=1\x00GPUSHARE_SHARE_IDS=GPU-a:0-1\x00B=x=y\x00")
	write("7", "stat", "7 (my (odd) task) S 3 7 7 0 -1")
	write("3", "stat", "3 (nomad) S 1 3 3 0 -1")
	must.NoError(t, os.MkdirAll(filepath.Join(root, "self"), 0o755))

	p := ProcFS{Root: root}
	pids, err := p.PIDs()
	must.NoError(t, err)
	must.Eq(t, []int{3, 7}, pids)
	env, err := p.Environ(7)
	must.NoError(t, err)
	must.Eq(t, map[string]string{"A": "1", EnvShareIDs: "GPU-a:0-1", "B": "x=y"}, env)
	shares, ok := Holder(env, "GPU-a")
	must.True(t, ok)
	must.Eq(t, []string{"GPU-a:0", "GPU-a:1"}, shares)
	_, ok = Holder(env, "GPU-b")
	must.False(t, ok)
	parent, err := p.Parent(7)
	must.NoError(t, err)
	must.Eq(t, 3, parent)

	_, err = p.Environ(8)
	must.True(t, errors.Is(err, ErrNoProcess))
	_, err = p.Parent(8)
	must.True(t, errors.Is(err, ErrNoProcess))
	_, err = p.Incarnation(8)
	must.True(t, errors.Is(err, ErrNoProcess))
	_, err = p.Incarnation(7) // too short to hold a start time
	must.Error(t, err)
	write("9", "stat", "9 (sleep (1)) S 3 9 9 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 123456 1000 10")
	inc, err := p.Incarnation(9)
	must.NoError(t, err)
	must.Eq(t, "123456 sleep (1)", inc)

	holders, unreadable := p.Holders("GPU-a", map[int]uint32{7: 60, 8: 10, 3: 5})
	must.MapEmpty(t, unreadable)
	must.Eq(t, []ProcessUtil{{PIDs: []int{7}, Shares: []string{"GPU-a:0", "GPU-a:1"}, SMUtilPct: 60}}, holders)
}
