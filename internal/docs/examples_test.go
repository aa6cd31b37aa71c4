package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/shoenig/test/must"
)

// runLine is a command of a workflow example's header comment that runs
// a jobspec: "#   gpushare job run ..." or "#   nomad job run ...".
var runLine = regexp.MustCompile(`(?m)^#\s+((?:gpushare|nomad) job run\b.*)$`)

// The commands a workflow example's comment gives to run it are the
// users' guide's, word for word: an example never says `nomad job run`
// where the guide says `gpushare job run`, or the other way round.
func TestWorkflowExampleCommentsMatchTheUsersGuide(t *testing.T) {
	guide, err := os.ReadFile(filepath.Join(root, "docs", "users.md"))
	must.NoError(t, err)
	files, err := filepath.Glob(filepath.Join(root, "jobspecs", "examples", "workflows", "*.nomad.hcl"))
	must.NoError(t, err)
	must.SliceNotEmpty(t, files)
	found := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		must.NoError(t, err)
		for _, m := range runLine.FindAllStringSubmatch(string(b), -1) {
			found++
			cmd := strings.Join(strings.Fields(m[1]), " ")
			must.StrContains(t, string(guide), cmd, must.Sprintf("%s says %q, which docs/users.md does not", filepath.Base(f), cmd))
		}
	}
	must.Positive(t, found)
}
