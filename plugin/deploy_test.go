package plugin

import (
	"os"
	"slices"
	"testing"

	"github.com/gpushare/gpushare/internal/nomadplugin/base"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/hcl"
	"github.com/hashicorp/hcl/hcl/ast"
	"github.com/shoenig/test/must"
)

// pluginConfigBody returns the text inside plugin "<name>" { config { ... } }
// of an agent configuration file.
func pluginConfigBody(t *testing.T, path, name string) string {
	t.Helper()
	src, err := os.ReadFile(path)
	must.NoError(t, err)
	file, err := hcl.ParseBytes(src)
	must.NoError(t, err, must.Sprintf("%s", path))
	plugins := file.Node.(*ast.ObjectList).Filter("plugin", name)
	must.SliceLen(t, 1, plugins.Items, must.Sprintf("plugin %q blocks in %s", name, path))
	configs := plugins.Items[0].Val.(*ast.ObjectType).List.Filter("config")
	must.SliceLen(t, 1, configs.Items, must.Sprintf("config blocks of plugin %q in %s", name, path))
	obj := configs.Items[0].Val.(*ast.ObjectType)
	return string(src[obj.Lbrace.Offset+1 : obj.Rbrace.Offset])
}

// The example agent configuration of a GPU client configures the plugin
// with every option the plugin has, and the plugin accepts it as written.
func TestDeployClientConfig(t *testing.T) {
	body := pluginConfigBody(t, "../deploy/nomad/client.hcl", "nomad-device-gpushare")
	p := New(hclog.NewNullLogger(), nil)
	must.NoError(t, p.SetConfig(&base.Config{PluginConfig: encodeConfig(t, body)}))
	defaults := New(hclog.NewNullLogger(), nil)
	must.NoError(t, defaults.SetConfig(&base.Config{PluginConfig: encodeConfig(t, "")}))
	must.Eq(t, defaults.cfg, p.cfg, must.Sprint("the example shows each option with its default"))

	list, err := hcl.ParseString(body)
	must.NoError(t, err)
	var written []string
	for _, item := range list.Node.(*ast.ObjectList).Items {
		written = append(written, item.Keys[0].Token.Value().(string))
	}
	for key := range configSpec.GetObject().GetAttributes() {
		must.True(t, slices.Contains(written, key), must.Sprintf("deploy/nomad/client.hcl does not show option %q", key))
	}
}
