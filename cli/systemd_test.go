package cli

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpushare/gpushare/scheduler/config"
	"github.com/shoenig/test/must"
)

const schedulerUnit = "../deploy/systemd/gpushare-scheduler.service"

// parseUnit reads a systemd unit file minimally: sections of key=value
// lines, comments and blank lines; anything else is an error. Keys that
// repeat keep every value.
func parseUnit(t *testing.T, path string) map[string]map[string][]string {
	t.Helper()
	f, err := os.Open(path)
	must.NoError(t, err)
	defer f.Close()
	unit := map[string]map[string][]string{}
	section := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = line[1 : len(line)-1]
			must.MapNotContainsKey(t, unit, section, must.Sprintf("line %d: section [%s] twice", n, section))
			unit[section] = map[string][]string{}
		default:
			key, value, ok := strings.Cut(line, "=")
			must.True(t, ok, must.Sprintf("line %d: not key=value: %q", n, line))
			must.NotEq(t, "", section, must.Sprintf("line %d: %q outside a section", n, line))
			key = strings.TrimSpace(key)
			unit[section][key] = append(unit[section][key], strings.TrimSpace(value))
		}
	}
	must.NoError(t, sc.Err())
	return unit
}

// The systemd unit in deploy/ runs `gpushare scheduler -config FILE`:
// a broken edit (a renamed flag, a lost Restart or hardening line) fails
// here rather than on an operator's host.
func TestSystemdUnit(t *testing.T) {
	unit := parseUnit(t, schedulerUnit)
	for _, s := range []string{"Unit", "Service", "Install"} {
		must.MapContainsKey(t, unit, s, must.Sprintf("no [%s]", s))
	}
	svc := unit["Service"]
	one := func(key string) string {
		t.Helper()
		must.SliceLen(t, 1, svc[key], must.Sprintf("[Service] %s", key))
		return svc[key][0]
	}

	exec := strings.Fields(one("ExecStart"))
	must.SliceLen(t, 4, exec, must.Sprintf("ExecStart = %q", exec))
	must.EqOp(t, "/usr/local/bin/gpushare", exec[0])
	must.Eq(t, []string{"scheduler", "-config", "/etc/gpushare/scheduler.hcl"}, exec[1:])
	must.EqOp(t, "on-failure", one("Restart"))
	must.EqOp(t, "-/etc/gpushare/env", one("EnvironmentFile"))
	for key, want := range map[string]string{
		"NoNewPrivileges": "true",
		"ProtectSystem":   "strict",
		"ProtectHome":     "true",
		"PrivateTmp":      "true",
	} {
		must.EqOp(t, want, one(key), must.Sprintf("[Service] %s", key))
	}
	must.True(t, len(svc["User"]) == 1 || len(svc["DynamicUser"]) == 1, must.Sprint("the scheduler must not run as root"))
	must.SliceNotEmpty(t, unit["Install"]["WantedBy"])

	// The arguments are ones the CLI accepts: run them with the config
	// path swapped for a valid file, plus -check.
	cfg := filepath.Join(t.TempDir(), "scheduler.hcl")
	must.NoError(t, os.WriteFile(cfg, []byte(`policy = "fgd"`+"\n"), 0o600))
	args := append(append([]string{}, exec[1:]...), "-check")
	args[2] = cfg
	code, out, errOut := run(args...)
	must.EqOp(t, 0, code, must.Sprintf("gpushare %s: %s", strings.Join(args, " "), errOut))
	must.StrContains(t, out, "configuration is valid")
}

// The configuration the unit runs with ships beside it: the operators'
// guide installs deploy/systemd/scheduler.hcl as /etc/gpushare/scheduler.hcl.
// It parses with the scheduler's loader, is valid, and `gpushare scheduler
// -check` with the unit's own arguments accepts it.
func TestSystemdSchedulerConfig(t *testing.T) {
	const shipped = "../deploy/systemd/scheduler.hcl"
	c, err := config.Load(shipped)
	must.NoError(t, err)
	must.NoError(t, c.Validate())
	must.EqOp(t, "gpushare", c.Policy)
	must.Eq(t, []string{"*"}, c.Nomad.Namespaces)
	must.EqOp(t, "", c.Nomad.Namespace, must.Sprint("the unit's NOMAD_NAMESPACE names the scheduler's namespace"))

	exec := strings.Fields(parseUnit(t, schedulerUnit)["Service"]["ExecStart"][0])
	args := append(append([]string{}, exec[1:]...), "-check")
	must.EqOp(t, "/etc/gpushare/scheduler.hcl", args[2])
	args[2] = shipped
	code, out, errOut := run(args...)
	must.EqOp(t, 0, code, must.Sprintf("gpushare %s: %s", strings.Join(args, " "), errOut))
	must.StrContains(t, out, "configuration is valid")

	// the guide's install step takes this file, not one the reader must write
	guide, err := os.ReadFile("../docs/operators.md")
	must.NoError(t, err)
	must.StrContains(t, string(guide), "install -m 0644 deploy/systemd/scheduler.hcl /etc/gpushare/")
}
