package devcluster

import (
	"fmt"
	"testing"

	"github.com/hashicorp/hcl"
	"github.com/hashicorp/hcl/hcl/ast"
	"github.com/shoenig/test/must"
)

// agentHCL is the part of a Nomad agent configuration the tests check,
// read with the HCL 1 parser Nomad's agent uses.
type agentHCL struct {
	Name, Datacenter string
	Client           clientHCL
	// Plugins are the labels of the plugin blocks.
	Plugins []string
}

type clientHCL struct {
	Enabled       bool
	NodePool      string
	NodeClass     string
	Options, Meta map[string]string
}

func parseAgent(t *testing.T, src string) agentHCL {
	t.Helper()
	f, err := hcl.Parse(src)
	must.NoError(t, err, must.Sprintf("agent config:\n%s", src))
	root := f.Node.(*ast.ObjectList)
	out := agentHCL{Name: literal(t, root, "name"), Datacenter: literal(t, root, "datacenter")}
	clients := root.Filter("client").Items
	must.SliceLen(t, 1, clients, must.Sprintf("client blocks in:\n%s", src))
	body := clients[0].Val.(*ast.ObjectType).List
	out.Client = clientHCL{
		Enabled:   literal(t, body, "enabled") == "true",
		NodePool:  literal(t, body, "node_pool"),
		NodeClass: literal(t, body, "node_class"),
		Options:   object(t, body, "options"),
		Meta:      object(t, body, "meta"),
	}
	for _, p := range root.Filter("plugin").Items {
		out.Plugins = append(out.Plugins, p.Keys[0].Token.Value().(string))
	}
	return out
}

// literal is the value of the attribute key in list, as a string ("" when
// missing).
func literal(t *testing.T, list *ast.ObjectList, key string) string {
	t.Helper()
	items := list.Filter(key).Items
	if len(items) == 0 {
		return ""
	}
	must.SliceLen(t, 1, items, must.Sprintf("attribute %s set more than once", key))
	lit, ok := items[0].Val.(*ast.LiteralType)
	must.True(t, ok, must.Sprintf("attribute %s is not a literal", key))
	return fmt.Sprint(lit.Token.Value())
}

// object is the string map of the attribute or block key in list (nil
// when missing).
func object(t *testing.T, list *ast.ObjectList, key string) map[string]string {
	t.Helper()
	items := list.Filter(key).Items
	if len(items) == 0 {
		return nil
	}
	must.SliceLen(t, 1, items, must.Sprintf("%s set more than once", key))
	obj, ok := items[0].Val.(*ast.ObjectType)
	must.True(t, ok, must.Sprintf("%s is not an object", key))
	out := map[string]string{}
	for _, it := range obj.List.Items {
		out[fmt.Sprint(it.Keys[0].Token.Value())] = fmt.Sprint(it.Val.(*ast.LiteralType).Token.Value())
	}
	return out
}

// A client without datacenter, pool or denied drivers gets Nomad's
// defaults spelled out, raw_exec enabled and the cloud fingerprinters off.
func TestAgentConfigDefaults(t *testing.T) {
	src := agentConfig("c0", "/d/c0", "/d/plugins", 4646, 4647, 4648, "", Client{Fixture: "/f.hcl"})
	cfg := parseAgent(t, src)
	must.Eq(t, "c0", cfg.Name)
	must.Eq(t, "dc1", cfg.Datacenter)
	must.Eq(t, "default", cfg.Client.NodePool)
	must.Eq(t, "", cfg.Client.NodeClass)
	must.True(t, cfg.Client.Enabled)
	must.Eq(t, "env_aws,env_gce,env_azure,env_digitalocean", cfg.Client.Options["fingerprint.denylist"])
	_, denied := cfg.Client.Options["driver.denylist"]
	must.False(t, denied)
	must.Eq(t, []string{"raw_exec", "nomad-device-gpushare"}, cfg.Plugins)
}

// Datacenter, node pool, node class, meta and denied drivers reach the agent's
// configuration; a client that denies raw_exec does not configure it.
func TestAgentConfigPlacementAttributes(t *testing.T) {
	cl := Client{
		Fixture:     "/f.hcl",
		Datacenter:  "dc2",
		NodePool:    "gpu-special",
		NodeClass:   "edge",
		Meta:        map[string]string{"tier": "gold", "rack": "r9"},
		DenyDrivers: []string{"raw_exec", "java"},
	}
	src := agentConfig("c1", "/d/c1", "/d/plugins", 5646, 0, 0, "127.0.0.1:4647", cl)
	cfg := parseAgent(t, src)
	must.Eq(t, "dc2", cfg.Datacenter)
	must.Eq(t, "gpu-special", cfg.Client.NodePool)
	must.Eq(t, "edge", cfg.Client.NodeClass)
	must.Eq(t, map[string]string{"tier": "gold", "rack": "r9"}, cfg.Client.Meta)
	must.Eq(t, "raw_exec,java", cfg.Client.Options["driver.denylist"])
	must.Eq(t, []string{"nomad-device-gpushare"}, cfg.Plugins)
	// the same client gives the same configuration (meta in key order)
	must.Eq(t, src, agentConfig("c1", "/d/c1", "/d/plugins", 5646, 0, 0, "127.0.0.1:4647", cl))

	// denying another driver keeps raw_exec
	other := parseAgent(t, agentConfig("c2", "/d/c2", "/d/plugins", 6646, 0, 0, "127.0.0.1:4647", Client{DenyDrivers: []string{"java"}}))
	must.SliceContains(t, other.Plugins, "raw_exec")
	must.Eq(t, "java", other.Client.Options["driver.denylist"])
}
