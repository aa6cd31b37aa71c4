package nomadpack

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gpushare/gpushare/jobspecs"
	"github.com/gpushare/gpushare/scheduler/config"
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// packDir is the pack the repository ships.
var packDir = filepath.Join("..", "..", "deploy", "pack", "gpushare_scheduler")

const jobTpl = "templates/gpushare_scheduler.nomad.tpl"

// CustomVars is a customised variables file: every variable the job
// template branches on set away from its default.
const customVars = `
job_name       = "gs"
region         = "global"
namespace      = "gpu-sched"
datacenters    = ["dc1", "dc2"]
node_pool      = "gpu"
count          = 3
distinct_hosts = false
driver         = "exec"
gpushare_bin   = "/opt/gpushare/gpushare"
nomad_addr     = "http://10.0.0.1:4646"
http_port      = 8088
policy         = "best-fit"
log_level      = "debug"
token_variable = "gpushare/token"
nomad_config   = "ca_cert = \"/etc/nomad.d/ca.pem\""
extra_config   = <<EOT
# not a Nomad variable: $${HOME}
resync_interval = "5m"
EOT
resources = { cpu = 250, memory = 128 }
`

// The pack has the registry's layout, and its README documents every
// variable, each of which has a type and a description.
func TestPackLayout(t *testing.T) {
	p, err := Load(packDir)
	must.NoError(t, err)
	must.EqOp(t, filepath.Base(packDir), p.Name)
	must.NotEq(t, "", p.Version)
	must.NotEq(t, "", p.Description)
	readme, err := os.ReadFile(filepath.Join(packDir, "README.md"))
	must.NoError(t, err)
	must.Greater(t, 10, len(p.Variables))
	for _, v := range p.Variables {
		must.NotEq(t, "", v.Description, must.Sprintf("variable %s has no description", v.Name))
		must.False(t, v.Default.IsNull(), must.Sprintf("variable %s has no default", v.Name))
		must.StrContains(t, string(readme), "`"+v.Name+"`", must.Sprintf("README.md does not document %s", v.Name))
	}
	for _, f := range []string{"metadata.hcl", "variables.hcl", "outputs.tpl", "README.md", jobTpl, "templates/_helpers.tpl"} {
		_, err := os.Stat(filepath.Join(packDir, f))
		must.NoError(t, err)
	}
}

// With its defaults the pack renders the shipped job
// (deploy/nomad/gpushare-scheduler.nomad.hcl with its defaults) and the
// shipped ACL policy, and a namespace specification for "gpushare".
func TestRenderDefaults(t *testing.T) {
	p, err := Load(packDir)
	must.NoError(t, err)
	r, err := p.Render("")
	must.NoError(t, err)
	must.MapLen(t, 1, r.Jobs)
	job := r.Jobs[jobTpl]
	t.Logf("rendered job:\n%s", job)
	checkRendered(t, job)
	body := parseHCL(t, job)
	jb := oneBlock(t, body, "job")
	must.Eq(t, []string{"gpushare-scheduler"}, jb.Labels)
	must.EqOp(t, "gpushare", stringAttr(t, jb.Body, "namespace"))
	_, hasPool := jb.Body.Attributes["node_pool"]
	must.False(t, hasPool, must.Sprint("node_pool set by default"))
	must.StrContains(t, job, `nomadVar "nomad/jobs/gpushare-scheduler"`)
	must.StrContains(t, r.Output, "gpushare-scheduler")

	// the policy: the shipped one's rules
	pol := r.Aux["templates/gpushare_scheduler.policy.hcl.tpl"]
	checkRendered(t, pol)
	shipped, err := os.ReadFile(filepath.Join("..", "..", "deploy", "nomad", "gpushare-scheduler.policy.hcl"))
	must.NoError(t, err)
	must.Eq(t, hclTokens(t, string(shipped)), hclTokens(t, pol), must.Sprint("the pack's policy differs from deploy/nomad/gpushare-scheduler.policy.hcl"))
	ns := parseHCL(t, r.Aux["templates/gpushare_scheduler.namespace.hcl.tpl"])
	must.EqOp(t, "gpushare", stringAttr(t, ns, "name"))

	// and Nomad reads the same job from both
	bin := nomadBinary(t)
	parser := jobspecs.Parser{Binary: bin}
	fromPack, err := parser.Parse("gpushare_scheduler.nomad", []byte(job), nil)
	must.NoError(t, err)
	src, err := os.ReadFile(filepath.Join("..", "..", "deploy", "nomad", "gpushare-scheduler.nomad.hcl"))
	must.NoError(t, err)
	fromFile, err := parser.Parse("gpushare-scheduler.nomad.hcl", src, nil)
	must.NoError(t, err)
	must.EqOp(t, jobJSON(t, fromFile), jobJSON(t, fromPack))
}

// A customised variables file reaches every place of the job, the policy
// and the namespace, and Nomad reads the job.
func TestRenderCustom(t *testing.T) {
	p, err := Load(packDir)
	must.NoError(t, err)
	r, err := p.Render(customVars)
	must.NoError(t, err)
	job := r.Jobs[jobTpl]
	t.Logf("rendered job:\n%s", job)
	checkRendered(t, job)
	jb := oneBlock(t, parseHCL(t, job), "job")
	must.Eq(t, []string{"gs"}, jb.Labels)
	must.EqOp(t, "gpu-sched", stringAttr(t, jb.Body, "namespace"))
	must.EqOp(t, "gpu", stringAttr(t, jb.Body, "node_pool"))
	must.EqOp(t, "global", stringAttr(t, jb.Body, "region"))
	pol := parseHCL(t, r.Aux["templates/gpushare_scheduler.policy.hcl.tpl"])
	var named []string
	for _, b := range pol.Blocks {
		if b.Type == "namespace" {
			named = append(named, b.Labels[0])
		}
	}
	must.Eq(t, []string{"*", "gpu-sched"}, named)
	must.EqOp(t, "gpu-sched", stringAttr(t, parseHCL(t, r.Aux["templates/gpushare_scheduler.namespace.hcl.tpl"]), "name"))

	parsed, err := jobspecs.Parser{Binary: nomadBinary(t)}.Parse("gpushare_scheduler.nomad", []byte(job), nil)
	must.NoError(t, err)
	must.EqOp(t, "gs", *parsed.ID)
	must.EqOp(t, "gpu-sched", *parsed.Namespace)
	must.EqOp(t, "global", *parsed.Region)
	must.EqOp(t, "gpu", *parsed.NodePool)
	must.Eq(t, []string{"dc1", "dc2"}, parsed.Datacenters)
	g := parsed.TaskGroups[0]
	must.EqOp(t, 3, *g.Count)
	must.EqOp(t, "false", g.Constraints[0].RTarget)
	must.EqOp(t, 8088, g.Networks[0].ReservedPorts[0].Value)
	must.EqOp(t, "http", g.Networks[0].ReservedPorts[0].Label)
	task := g.Tasks[0]
	must.EqOp(t, "exec", task.Driver)
	must.Eq(t, "/opt/gpushare/gpushare", task.Config["command"])
	must.EqOp(t, 250, *task.Resources.CPU)
	must.EqOp(t, 128, *task.Resources.MemoryMB)
	must.StrContains(t, *task.Templates[0].EmbeddedTmpl, `nomadVar "gpushare/token"`)
	cfg := *task.Templates[1].EmbeddedTmpl
	t.Logf("scheduler.hcl template:\n%s", cfg)
	for _, want := range []string{`address    = "http://10.0.0.1:4646"`, `policy       = "best-fit"`, `log_level    = "debug"`, "# not a Nomad variable: ${HOME}\nresync_interval = \"5m\"", "  ca_cert = \"/etc/nomad.d/ca.pem\"\n}"} {
		must.StrContains(t, cfg, want)
	}
	// the scheduler reads the configuration once Nomad's template has
	// filled in its {{ env }}
	filled := regexp.MustCompile(`\{\{ env "([A-Za-z_]+)" \}\}`).ReplaceAllString(cfg, "/$1")
	c, err := config.Parse("scheduler.hcl", []byte(filled))
	must.NoError(t, err, must.Sprint(filled))
	must.NoError(t, c.Validate())
	must.EqOp(t, "http://10.0.0.1:4646", c.Nomad.Address)
	must.EqOp(t, "/NOMAD_SECRETS_DIR/nomad-token", c.Nomad.TokenFile)
	must.EqOp(t, "/etc/nomad.d/ca.pem", c.Nomad.CACert)
	must.EqOp(t, "best-fit", c.Policy)
	must.EqOp(t, "5m", c.ResyncInterval)
	must.EqOp(t, "/NOMAD_ADDR_http", c.HTTPAddress)
}

// A variables file may set only the pack's variables, with values of
// their types; the template set calls only functions this renderer has.
func TestVarFileErrors(t *testing.T) {
	p, err := Load(packDir)
	must.NoError(t, err)
	_, err = p.Render(`replicas = 2`)
	must.ErrorContains(t, err, `"replicas" is not a variable of the pack gpushare_scheduler`)
	_, err = p.Render(`count = "two"`)
	must.ErrorContains(t, err, `variable "count"`)
	_, err = p.Render(`datacenters = "dc1"`)
	must.ErrorContains(t, err, `variable "datacenters"`)
	// numbers given as strings convert, as in nomad-pack
	vals, err := p.Values(`count = "4"`)
	must.NoError(t, err)
	must.Eq(t, any(4), vals["count"])
	must.Eq(t, any(map[string]any{"cpu": 500, "memory": 256}), vals["resources"])
	must.Eq(t, any([]any{"*"}), vals["datacenters"])
}

// checkRendered fails on template text left in a rendered file.
func checkRendered(t *testing.T, s string) {
	t.Helper()
	must.NotEq(t, "", strings.TrimSpace(s))
	for _, bad := range []string{"[[", "]]", "<no value>", "%!"} {
		must.StrNotContains(t, s, bad)
	}
}

func parseHCL(t *testing.T, src string) *hclsyntax.Body {
	t.Helper()
	f, diags := hclsyntax.ParseConfig([]byte(src), "rendered.hcl", hcl.InitialPos)
	must.False(t, diags.HasErrors(), must.Sprintf("%v\n%s", diags, src))
	return f.Body.(*hclsyntax.Body)
}

func oneBlock(t *testing.T, body *hclsyntax.Body, typ string) *hclsyntax.Block {
	t.Helper()
	var found []*hclsyntax.Block
	for _, b := range body.Blocks {
		if b.Type == typ {
			found = append(found, b)
		}
	}
	must.SliceLen(t, 1, found, must.Sprintf("%s blocks", typ))
	return found[0]
}

func stringAttr(t *testing.T, body *hclsyntax.Body, name string) string {
	t.Helper()
	a, ok := body.Attributes[name]
	must.True(t, ok, must.Sprintf("no %s", name))
	v, diags := a.Expr.Value(nil)
	must.False(t, diags.HasErrors(), must.Sprint(diags))
	return v.AsString()
}

// hclTokens is an HCL file's tokens without comments, newlines and a
// list's trailing comma.
func hclTokens(t *testing.T, src string) []string {
	t.Helper()
	toks, diags := hclsyntax.LexConfig([]byte(src), "policy.hcl", hcl.InitialPos)
	must.False(t, diags.HasErrors(), must.Sprint(diags))
	var out []string
	for _, tok := range toks {
		if tok.Type == hclsyntax.TokenComment || tok.Type == hclsyntax.TokenNewline {
			continue
		}
		if tok.Type == hclsyntax.TokenCBrack && len(out) > 0 && out[len(out)-1] == "," {
			out = out[:len(out)-1]
		}
		out = append(out, string(tok.Bytes))
	}
	return out
}

// jobJSON is a parsed job as JSON, its templates without blank lines.
func jobJSON(t *testing.T, j *api.Job) string {
	t.Helper()
	for _, g := range j.TaskGroups {
		for _, task := range g.Tasks {
			for _, tmpl := range task.Templates {
				if tmpl.EmbeddedTmpl != nil {
					var lines []string
					for _, l := range strings.Split(*tmpl.EmbeddedTmpl, "\n") {
						if strings.TrimSpace(l) != "" {
							lines = append(lines, l)
						}
					}
					s := strings.Join(lines, "\n")
					tmpl.EmbeddedTmpl = &s
				}
			}
		}
	}
	b, err := json.MarshalIndent(j, "", "  ")
	must.NoError(t, err)
	return string(b)
}

// nomadBinary is the nomad binary to parse jobs with: $GPUSHARE_NOMAD,
// the repository's bin/nomad (make nomad), or nomad on PATH; without one
// the test skips the rest (gpushare links no jobspec parser).
func nomadBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("GPUSHARE_NOMAD"); p != "" {
		return p
	}
	if p := filepath.Join("..", "..", "bin", "nomad"); exec.Command(p, "version").Run() == nil {
		abs, err := filepath.Abs(p)
		must.NoError(t, err)
		return abs
	}
	if p, err := exec.LookPath("nomad"); err == nil {
		return p
	}
	t.Skip("no nomad binary to parse the rendered job with: set GPUSHARE_NOMAD, run make nomad, or put nomad on PATH")
	return ""
}
