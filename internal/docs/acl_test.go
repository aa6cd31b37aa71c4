package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/shoenig/test/must"
)

// section is the text of a Markdown document under heading, up to the
// next heading of its level.
func section(t *testing.T, doc, heading string) string {
	t.Helper()
	b, err := os.ReadFile(doc)
	must.NoError(t, err)
	_, after, ok := strings.Cut(string(b), "\n"+heading+"\n")
	must.True(t, ok, must.Sprintf("%s has no heading %q", doc, heading))
	level := heading[:strings.IndexByte(heading, ' ')+1]
	if i := strings.Index(after, "\n"+level); i >= 0 {
		after = after[:i]
	}
	return after
}

var tokenCreate = regexp.MustCompile(`nomad acl token create\s+(?:\S+\s+)*?-name[= ]"?([^"\s]+)"?`)

// The operators' guide says how to turn Nomad's ACLs on (the agents'
// `acl { enabled = true }`) and bootstrap them (`nomad acl bootstrap`)
// before it makes the scheduler's token, and every token it and the
// shipped deploy/ files create has a name of its own: the scheduler run
// by systemd and the scheduler's Nomad job each their own.
func TestOperatorsGuideSaysHowToTurnACLsOn(t *testing.T) {
	acl := section(t, filepath.Join(root, "docs", "operators.md"), "## ACLs and TLS")
	enable := regexp.MustCompile(`acl \{\s*enabled\s*=\s*true\s*\}`)
	must.True(t, enable.MatchString(acl), must.Sprint(`"ACLs and TLS" does not show the agents' acl { enabled = true }`))
	must.StrContains(t, acl, "nomad acl bootstrap")
	must.True(t, strings.Index(acl, "nomad acl bootstrap") < strings.Index(acl, "nomad acl token create"),
		must.Sprint("bootstrap comes before the scheduler's token"))

	names := map[string]string{} // token name -> where
	files := []string{filepath.Join(root, "docs", "operators.md")}
	for _, dir := range []string{"deploy"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				files = append(files, p)
			}
			return err
		})
		must.NoError(t, err)
	}
	found := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		must.NoError(t, err)
		for _, m := range tokenCreate.FindAllStringSubmatch(string(b), -1) {
			found++
			rel, _ := filepath.Rel(root, f)
			// the same token may be named in a guide and in the file it
			// describes, but never by two steps of one file
			if where, ok := names[m[1]]; ok && where == rel {
				t.Errorf("%s creates two tokens named %q", rel, m[1])
			}
			names[m[1]] = rel
		}
	}
	must.Positive(t, found)
	must.MapContainsKeys(t, names, []string{"gpushare-scheduler-host", "gpushare-scheduler-job"})
}
