package cli

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/shoenig/test/must"
)

// writeExe writes an executable file (a shell script) at dir/name.
func writeExe(t *testing.T, dir, name string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	must.NoError(t, os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755))
	return p
}

// noPath is a PATH without the command.
func noPath(string) (string, error) { return "", exec.ErrNotFound }

// The demo runs from an unpacked release archive: the plugin beside
// gpushare, Nomad from -nomad, $GPUSHARE_NOMAD or PATH; what is missing is
// named with how to get it. In a checkout it builds what it lacks, as
// before ("" asks the caller to build).
func TestDemoFindsItsBinaries(t *testing.T) {
	archive := t.TempDir() // gpushare and the plugin, as unpacked
	exe := writeExe(t, archive, "gpushare")
	plugin := writeExe(t, archive, PluginName)
	elsewhere := t.TempDir()
	nomadOnPath := writeExe(t, elsewhere, "nomad")
	flagNomad := writeExe(t, elsewhere, "my-nomad")
	notExec := filepath.Join(elsewhere, "plain")
	must.NoError(t, os.WriteFile(notExec, nil, 0o644))
	onPath := func(name string) (string, error) {
		if name == "nomad" {
			return nomadOnPath, nil
		}
		return "", exec.ErrNotFound
	}
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == "GPUSHARE_NOMAD" {
				return v
			}
			return ""
		}
	}

	t.Run("nomad", func(t *testing.T) {
		for _, tc := range []struct {
			name    string
			host    demoHost
			flag    string
			want    string
			wantErr string
		}{
			{"the flag first", demoHost{lookPath: onPath, getenv: env(nomadOnPath), root: "/repo"}, flagNomad, flagNomad, ""},
			{"a flag naming nothing", demoHost{lookPath: onPath, getenv: env("")}, filepath.Join(elsewhere, "none"), "", "-nomad " + filepath.Join(elsewhere, "none")},
			{"a flag naming no executable", demoHost{lookPath: onPath, getenv: env("")}, notExec, "", "not an executable file"},
			{"then GPUSHARE_NOMAD", demoHost{lookPath: onPath, getenv: env(flagNomad), root: "/repo"}, "", flagNomad, ""},
			{"a checkout builds bin/nomad", demoHost{lookPath: onPath, getenv: env(""), root: "/repo"}, "", "", ""},
			{"the archive takes PATH", demoHost{lookPath: onPath, getenv: env("")}, "", nomadOnPath, ""},
			{"none: how to get it", demoHost{lookPath: noPath, getenv: env("")}, "", "", "releases.hashicorp.com/nomad/1.11.3/"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				got, err := tc.host.nomad(tc.flag)
				if tc.wantErr != "" {
					must.ErrorContains(t, err, tc.wantErr)
					return
				}
				must.NoError(t, err)
				must.EqOp(t, tc.want, got)
			})
		}
		_, err := demoHost{lookPath: noPath, getenv: env("")}.nomad("")
		must.True(t, errors.Is(err, ErrNoNomad))
		must.ErrorContains(t, err, "pass -nomad PATH")
		must.ErrorContains(t, err, "make nomad")
	})

	t.Run("plugin", func(t *testing.T) {
		got, err := demoHost{exe: exe}.plugin("")
		must.NoError(t, err)
		must.EqOp(t, plugin, got)
		got, err = demoHost{exe: exe, root: "/repo"}.plugin(flagNomad)
		must.NoError(t, err)
		must.EqOp(t, flagNomad, got)
		lone := writeExe(t, t.TempDir(), "gpushare") // no plugin beside it
		got, err = demoHost{exe: lone, root: "/repo"}.plugin("")
		must.NoError(t, err)
		must.EqOp(t, "", got) // built in the checkout
		_, err = demoHost{exe: lone}.plugin("")
		must.True(t, errors.Is(err, ErrNoPlugin))
		must.ErrorContains(t, err, filepath.Dir(lone))
		must.ErrorContains(t, err, "-plugin PATH")
		must.ErrorContains(t, err, "make build")
	})

	t.Run("command name", func(t *testing.T) {
		h := demoHost{exe: exe, lookPath: noPath}
		must.EqOp(t, "./gpushare", h.commandName(archive))
		must.EqOp(t, exe, h.commandName(elsewhere))
		h.lookPath = func(string) (string, error) { return exe, nil }
		must.EqOp(t, "gpushare", h.commandName(elsewhere))
		h = demoHost{exe: exe, lookPath: noPath, root: elsewhere} // go run in a checkout
		must.EqOp(t, "./bin/gpushare", h.commandName(elsewhere))
	})
}
