package nomadplugin

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/shoenig/test/must"
)

// No package of this module that goes into a binary imports Nomad's own
// code (under the Business Source License since 1.7): only its API client,
// github.com/hashicorp/nomad/api (MPL-2.0). And go.mod does not require
// github.com/hashicorp/nomad at all. Tests use Nomad as a binary, or in the
// e2e/nomad module.
func TestNoNomadCodeInTheBinaries(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	must.NoError(t, err)
	cmd := exec.Command(gobin, "list", "-deps", "-test=false", "-f", "{{.ImportPath}}", "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	must.NoError(t, err)
	var bad []string
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "github.com/hashicorp/nomad/") &&
			pkg != "github.com/hashicorp/nomad/api" && !strings.HasPrefix(pkg, "github.com/hashicorp/nomad/api/") {
			bad = append(bad, pkg)
		}
	}
	must.SliceEmpty(t, bad, must.Sprint("non-test packages import Nomad's BSL code; use internal/nomadplugin or the nomad binary"))

	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	must.NoError(t, err)
	must.False(t, regexp.MustCompile(`(?m)^\s*(require\s+)?github\.com/hashicorp/nomad v`).Match(mod),
		must.Sprint("go.mod requires github.com/hashicorp/nomad: run go mod tidy after removing its imports"))
}
