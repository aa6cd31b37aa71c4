package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpushare/gpushare/internal/devcluster"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// shellBlock returns the first ```sh block after the heading of a
// Markdown document, up to (not including) the first line that starts
// with stop ("" for the whole block).
func shellBlock(t *testing.T, doc, heading, stop string) string {
	t.Helper()
	b, err := os.ReadFile(doc)
	must.NoError(t, err)
	_, after, ok := strings.Cut(string(b), "\n"+heading+"\n")
	must.True(t, ok, must.Sprintf("%s has no heading %q", doc, heading))
	_, after, ok = strings.Cut(after, "\n```sh\n")
	must.True(t, ok, must.Sprintf("%s: no sh block under %q", doc, heading))
	block, _, _ := strings.Cut(after, "\n```\n")
	if stop != "" {
		if i := strings.Index(block, "\n"+stop); i >= 0 {
			block = block[:i]
		}
	}
	return block + "\n"
}

// TestOperatorsGuideACLSetup runs the ACL setup of docs/operators.md as
// written ("ACLs and TLS": the namespace, the policy, the token; then
// "Running the scheduler on Nomad": the token stored in the job's
// variable) with bash on a cluster with ACLs, from a directory that
// holds, as the release archive's does, the gpushare binary and deploy/:
// `nomad namespace apply gpushare` there would parse the binary as a
// namespace specification.
func TestOperatorsGuideACLSetup(t *testing.T) {
	root, err := devcluster.RepoRoot()
	must.NoError(t, err)
	doc := filepath.Join(root, "docs", "operators.md")
	script := "set -euo pipefail\n" +
		shellBlock(t, doc, "## ACLs and TLS", "") +
		shellBlock(t, doc, "## Running the scheduler on Nomad", "nomad job run")
	t.Logf("the guide's commands:\n%s", script)

	e := newEnvWith(t, devcluster.Options{ACL: true})
	dir := t.TempDir()
	b, err := os.ReadFile(cliBin)
	must.NoError(t, err)
	must.NoError(t, os.WriteFile(filepath.Join(dir, "gpushare"), b, 0o755))
	must.NoError(t, os.Symlink(filepath.Join(root, "deploy"), filepath.Join(dir, "deploy")))
	cmd := exec.Command("bash", "-c", script)
	cmd.Dir = dir
	cmd.Env = []string{
		"PATH=" + nomadDir(t) + ":/usr/bin:/bin",
		"HOME=" + t.TempDir(),
		"NOMAD_ADDR=" + e.c.Address(),
		"NOMAD_TOKEN=" + e.c.ManagementToken(),
	}
	out, err := cmd.CombinedOutput()
	must.NoError(t, err, must.Sprintf("the guide's commands:\n%s", out))
	t.Logf("their output:\n%s", out)

	ns, _, err := e.nomad.Namespaces().Info("gpushare", nil)
	must.NoError(t, err)
	must.EqOp(t, "gpushare scheduler", ns.Description)
	pol, _, err := e.nomad.ACLPolicies().Info("gpushare-scheduler", nil)
	must.NoError(t, err)
	must.StrContains(t, pol.Rules, `namespace "gpushare"`)
	v, _, err := e.nomad.Variables().Read("nomad/jobs/gpushare-scheduler", &api.QueryOptions{Namespace: "gpushare"})
	must.NoError(t, err)
	secret := v.Items["token"]
	must.NotEq(t, "", secret)
	tok, _, err := e.nomad.ACLTokens().Self(&api.QueryOptions{AuthToken: secret})
	must.NoError(t, err, must.Sprint("the stored token is not a token of the cluster"))
	must.Eq(t, []string{"gpushare-scheduler"}, tok.Policies)
}
