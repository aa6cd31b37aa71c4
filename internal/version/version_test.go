package version_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpushare/gpushare/internal/nomadplugin/base"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"github.com/shoenig/test/must"
)

// One stamp, one version: the GNUmakefile stamps internal/version.Version
// once and both binaries must report it — `gpushare version` and the device
// plugin's PluginInfo as Nomad's plugin loader asks for it.
func TestBinariesReportTheStampedVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and links both binaries")
	}
	const stamp = "v9.8.7-test+abc1234"
	dir := t.TempDir()
	build := exec.Command("go", "build",
		"-ldflags", "-X github.com/gpushare/gpushare/internal/version.Version="+stamp,
		"-o", dir+string(filepath.Separator),
		"github.com/gpushare/gpushare/cmd/gpushare",
		"github.com/gpushare/gpushare/cmd/nomad-device-gpushare")
	out, err := build.CombinedOutput()
	must.NoError(t, err, must.Sprintf("go build: %s", out))

	out, err = exec.Command(filepath.Join(dir, "gpushare"), "version").CombinedOutput()
	must.NoError(t, err, must.Sprintf("gpushare version: %s", out))
	must.EqOp(t, "gpushare "+stamp, strings.TrimSpace(string(out)))

	// Launch the plugin as a Nomad client does (go-plugin, Nomad's
	// handshake, gRPC) and ask for its info.
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  base.Handshake,
		Plugins:          map[string]plugin.Plugin{base.PluginTypeBase: &base.PluginBase{}},
		Cmd:              exec.Command(filepath.Join(dir, "nomad-device-gpushare")),
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		Logger:           hclog.NewNullLogger(),
	})
	defer client.Kill()
	rpc, err := client.Client()
	must.NoError(t, err)
	raw, err := rpc.Dispense(base.PluginTypeBase)
	must.NoError(t, err)
	info, err := raw.(base.BasePlugin).PluginInfo()
	must.NoError(t, err)
	must.EqOp(t, base.PluginTypeDevice, info.Type)
	must.EqOp(t, stamp, info.PluginVersion)
}
