package docs

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/gpushare/gpushare/cli"
	"github.com/gpushare/gpushare/jobspecs"
	"github.com/gpushare/gpushare/scheduler/lifecycle"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/shoenig/test/must"
)

// root is the repository's root, from this package's directory.
const root = "../.."

// documents are the files whose shell blocks are checked.
func documents(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	must.NoError(t, err)
	must.SliceNotEmpty(t, docs)
	return append([]string{filepath.Join(root, "README.md")}, docs...)
}

// command is one simple command of a shell block: its words, where it is.
type command struct {
	where string
	words []string
}

func (c command) String() string { return c.where + ": " + strings.Join(c.words, " ") }

// TestShellBlocksMatchTheCLI extracts the ```sh, ```shell and ```bash
// blocks of README.md and docs/*.md and checks each command that runs
// gpushare, nomad or make: the gpushare subcommand (and its own
// subcommand: job run, fixture check, sim gavel) exists and accepts every
// flag given, by the CLI's own help (cli.Main with -h, as `gpushare <cmd>
// -h`); the nomad command exists and takes every flag given, by the
// Nomad binary's help ($GPUSHARE_NOMAD, else bin/nomad, else nomad on
// PATH; those checks are skipped without one); the make targets are
// GNUmakefile's.
func TestShellBlocksMatchTheCLI(t *testing.T) {
	var cmds []command
	for _, doc := range documents(t) {
		src, err := os.ReadFile(doc)
		must.NoError(t, err)
		rel, _ := filepath.Rel(root, doc)
		cmds = append(cmds, shellCommands(rel, string(src))...)
	}
	must.SliceNotEmpty(t, cmds)
	// and the gpushare commands the prose names in code spans
	for _, doc := range documents(t) {
		src, err := os.ReadFile(doc)
		must.NoError(t, err)
		rel, _ := filepath.Rel(root, doc)
		for _, c := range inlineCommands(rel, string(src)) {
			if err := checkGpushare(c.words[1:]); err != nil && !strings.Contains(err.Error(), "needs a") {
				t.Errorf("%s (in a code span): %v", c, err)
			}
		}
	}
	nomad := nomadBinary()
	targets := makeTargets(t)
	counts := map[string]int{}
	for _, c := range cmds {
		switch name := filepath.Base(c.words[0]); {
		case name == "gpushare":
			counts[name]++
			if err := checkGpushare(c.words[1:]); err != nil {
				t.Errorf("%s: %v", c, err)
			}
		case name == "nomad" && c.words[0] == "nomad":
			counts[name]++
			if nomad == "" {
				continue
			}
			if err := checkNomad(nomad, c.words[1:]); err != nil {
				t.Errorf("%s: %v", c, err)
			}
			// `nomad namespace apply NAME` parses a file named NAME when the
			// directory has one (the archive's has the gpushare binary):
			// the documents apply a specification file
			if len(c.words) > 3 && c.words[1] == "namespace" && c.words[2] == "apply" {
				if arg := c.words[len(c.words)-1]; !strings.HasSuffix(arg, ".hcl") && !strings.HasSuffix(arg, ".json") {
					t.Errorf("%s: apply a namespace specification file (.hcl or .json), not a name that a file of the directory may shadow", c)
				}
			}
		case name == "make":
			counts[name]++
			for _, w := range c.words[1:] {
				if strings.HasPrefix(w, "-") || strings.Contains(w, "=") {
					continue
				}
				if !targets[w] {
					t.Errorf("%s: GNUmakefile has no target %q", c, w)
				}
			}
		}
	}
	if nomad != "" {
		// and the checks do refuse what Nomad lacks
		must.NoError(t, checkNomad(nomad, []string{"job", "scale", "inference", "api", "3"}))
		must.Error(t, checkNomad(nomad, []string{"job", "frob"}))
		must.Error(t, checkNomad(nomad, []string{"job", "run", "-no-such-flag", "f.hcl"}))
	}
	if nomad == "" {
		t.Logf("no Nomad binary ($GPUSHARE_NOMAD, bin/nomad or nomad on PATH): the %d nomad commands were not checked", counts["nomad"])
	}
	t.Logf("checked %d gpushare, %d nomad and %d make commands", counts["gpushare"], counts["nomad"], counts["make"])
	// the documents do show each kind
	must.Positive(t, counts["gpushare"])
	must.Positive(t, counts["nomad"])
	must.Positive(t, counts["make"])
}

// The extraction finds the commands a reader would type, and only those.
func TestShellCommands(t *testing.T) {
	src := "text `gpushare nope`\n\n```sh\n" +
		"sha256sum -c x   # gpushare nope\n" +
		"./gpushare demo -nomad /path/to/nomad   # comment\n" +
		"install -m 0755 gpushare /usr/local/bin/ && gpushare version\n" +
		"(umask 077; echo \"A=b # c\" > f)\n" +
		"nomad var put x \\\n  token=\"$(nomad acl token create -name g -json | jq -r .SecretID)\"\n" +
		"cat > ns.hcl <<'EOF'\nname = \"gpushare\"\nEOF\n" +
		"gpushare limit -memory 4GiB -- python train.py --epochs 1\n" +
		"```\n\n```hcl\nnomad { address = \"x\" }\n```\n"
	var got []string
	for _, c := range shellCommands("f.md", src) {
		got = append(got, strings.Join(c.words, " "))
	}
	must.Eq(t, []string{
		"sha256sum -c x",
		"./gpushare demo -nomad /path/to/nomad",
		"install -m 0755 gpushare /usr/local/bin/",
		"gpushare version",
		"umask 077",
		"echo A=b # c > f",
		"nomad acl token create -name g -json",
		"jq -r .SecretID",
		"nomad var put x token=X",
		"cat > ns.hcl <<EOF",
		"gpushare limit -memory 4GiB -- python train.py --epochs 1",
	}, got)
	must.NoError(t, checkGpushare([]string{"job", "run", "-detach", "f.hcl"}))
	must.Error(t, checkGpushare([]string{"job", "frob"}))
	must.Error(t, checkGpushare([]string{"job", "run", "-no-such-flag"}))
	must.Error(t, checkGpushare([]string{"frob"}))
	must.NoError(t, checkGpushare([]string{"limit", "-memory", "1GiB", "--", "prog", "--x"}))
	spans := inlineCommands("f.md", "run `gpushare job run -detach F`, `gpushare job lint / run`,\n`gpushare places it`\n```sh\n`gpushare x`\n```\n")
	must.SliceLen(t, 1, spans)
	must.Eq(t, []string{"gpushare", "job", "run", "-detach", "F"}, spans[0].words)
}

var fence = regexp.MustCompile("^```(sh|shell|bash)\\s*$")

// shellCommands returns the simple commands of the shell blocks of a
// Markdown document: continuation lines joined, comments and here-document
// bodies dropped, $(...) taken out as commands of their own (and replaced
// by X), lines split at |, ||, &&, ;, & and parentheses; a command's
// leading variable assignments are dropped.
func shellCommands(name, src string) []command {
	var out []command
	lines := strings.Split(src, "\n")
	in, heredoc := false, ""
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		switch {
		case !in:
			in = fence.MatchString(line)
			continue
		case strings.HasPrefix(line, "```"):
			in = false
			continue
		case heredoc != "":
			if strings.TrimSpace(line) == heredoc {
				heredoc = ""
			}
			continue
		}
		where := fmt.Sprintf("%s:%d", name, i+1)
		for strings.HasSuffix(line, "\\") && i+1 < len(lines) {
			i++
			line = strings.TrimSuffix(line, "\\") + " " + strings.TrimSpace(lines[i])
		}
		line = stripComment(line)
		if m := regexp.MustCompile(`<<-?\s*'?"?(\w+)`).FindStringSubmatch(line); m != nil {
			heredoc = m[1]
		}
		var subs []string
		sub := regexp.MustCompile(`\$\(([^()]*)\)`)
		for sub.MatchString(line) {
			for _, m := range sub.FindAllStringSubmatch(line, -1) {
				subs = append(subs, m[1])
			}
			line = sub.ReplaceAllString(line, "X")
		}
		for _, l := range append(subs, line) {
			for _, words := range splitCommands(l) {
				for len(words) > 0 && regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`).MatchString(words[0]) {
					words = words[1:]
				}
				if len(words) > 0 {
					out = append(out, command{where, words})
				}
			}
		}
	}
	return out
}

// stripComment drops a # comment (one at the start of a word, outside
// quotes).
func stripComment(line string) string {
	var q byte
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case q != 0:
			if c == q {
				q = 0
			}
		case c == '\'' || c == '"':
			q = c
		case c == '#' && (i == 0 || line[i-1] == ' ' || line[i-1] == '\t'):
			return line[:i]
		}
	}
	return line
}

// splitCommands splits a line into simple commands, each a list of words
// with their quotes removed.
func splitCommands(line string) [][]string {
	var cmds [][]string
	var words []string
	var w strings.Builder
	inWord := false
	var q byte
	endWord := func() {
		if inWord {
			words = append(words, w.String())
			w.Reset()
			inWord = false
		}
	}
	endCmd := func() {
		endWord()
		if len(words) > 0 {
			cmds = append(cmds, words)
		}
		words = nil
	}
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case q != 0:
			if c == q {
				q = 0
			} else {
				w.WriteByte(c)
			}
		case c == '\'' || c == '"':
			q, inWord = c, true
		case c == ' ' || c == '\t':
			endWord()
		case c == '|' || c == '&' || c == ';' || c == '(' || c == ')':
			endCmd()
		default:
			w.WriteByte(c)
			inWord = true
		}
	}
	endCmd()
	return cmds
}

// flagNames are the names of the flags among a command's arguments, up to
// "--".
func flagNames(args []string) []string {
	var names []string
	for _, a := range args {
		if a == "--" {
			break
		}
		if len(a) > 1 && a[0] == '-' {
			name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
			names = append(names, name)
		}
	}
	return names
}

// lists reports whether a help text lists the flag, as the flag package
// and Nomad print them: "  -name" at the start of a line.
func lists(help, name string) bool {
	return regexp.MustCompile(`(?m)^\s+--?` + regexp.QuoteMeta(name) + `(\s|=|$)`).MatchString(help)
}

// gpushareHelp runs the CLI with args, as `gpushare args...`.
func gpushareHelp(args ...string) string {
	var out bytes.Buffer
	cli.Main(args, cli.IO{Out: &out, Err: &out})
	return out.String()
}

// checkGpushare checks `gpushare args...` against the CLI's commands and
// their help.
func checkGpushare(args []string) error {
	if len(args) == 0 {
		return nil // gpushare alone prints its usage
	}
	cmds := cli.Commands()
	if _, ok := cmds[args[0]]; !ok {
		return fmt.Errorf("gpushare has no command %q", args[0])
	}
	path := args[:1]
	help := gpushareHelp(args[0], "-h")
	// a command with subcommands lists them in its usage: job, fixture, sim
	if m := regexp.MustCompile(`Usage: gpushare \S+ <([a-z ]+)>`).FindStringSubmatch(help); m != nil {
		if len(args) < 2 {
			return fmt.Errorf("gpushare %s needs a %s", args[0], m[1])
		}
		if !regexp.MustCompile(`(?m)^  ` + regexp.QuoteMeta(args[1]) + `\s`).MatchString(help) {
			return fmt.Errorf("gpushare %s has no %s %q:\n%s", args[0], m[1], args[1], help)
		}
		path = args[:2]
		help = gpushareHelp(args[0], args[1], "-h")
	}
	for _, f := range flagNames(args[len(path):]) {
		if f == "h" || f == "help" {
			continue
		}
		if !lists(help, f) {
			return fmt.Errorf("gpushare %s has no flag -%s:\n%s", strings.Join(path, " "), f, help)
		}
	}
	return nil
}

// nomadBinary is the Nomad binary to check nomad commands against: the
// e2e tests' ($GPUSHARE_NOMAD), the checkout's bin/nomad, or the one on
// PATH; "" if none.
func nomadBinary() string {
	if b := os.Getenv("GPUSHARE_NOMAD"); b != "" {
		return b
	}
	if b, err := filepath.Abs(filepath.Join(root, "bin", "nomad")); err == nil {
		if fi, err := os.Stat(b); err == nil && !fi.IsDir() {
			return b
		}
	}
	b, _ := exec.LookPath("nomad")
	return b
}

var nomadHelps = map[string]string{}

// checkNomad checks `nomad args...` against the binary's help: the words
// before the first flag name a command (not a command group, whose usage
// says <subcommand>), and each flag is one the command's help lists.
func checkNomad(bin string, args []string) error {
	var words []string
	for _, a := range args {
		if strings.HasPrefix(a, "-") {
			break
		}
		words = append(words, a)
	}
	if len(words) == 0 {
		return fmt.Errorf("no nomad command")
	}
	key := strings.Join(words, " ")
	help, ok := nomadHelps[key]
	if !ok {
		out, _ := exec.Command(bin, append(slices.Clone(words), "-h")...).CombinedOutput() // help exits 0 or 1
		help = string(out)
		nomadHelps[key] = help
	}
	m := regexp.MustCompile(`Usage:\s+nomad ([a-z -]+?)(?: \[| <|\n|$)`).FindStringSubmatch(help)
	if m == nil {
		return fmt.Errorf("nomad %s -h prints no usage:\n%s", key, help)
	}
	path := strings.Fields(m[1])
	if len(path) > len(words) || !slices.Equal(path, words[:len(path)]) || strings.Contains(help, "Usage: nomad "+m[1]+" <subcommand>") {
		return fmt.Errorf("nomad has no command %q (its help is that of %q)", key, m[1])
	}
	for _, f := range flagNames(args[len(path):]) {
		if !lists(help, f) {
			return fmt.Errorf("nomad %s has no flag -%s", m[1], f)
		}
	}
	return nil
}

// makeTargets are the targets GNUmakefile defines.
func makeTargets(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "GNUmakefile"))
	must.NoError(t, err)
	targets := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^([A-Za-z0-9_./-]+)\s*:([^=]|$)`).FindAllStringSubmatch(string(b), -1) {
		targets[m[1]] = true
	}
	return targets
}

// The workflow examples of the users' guide (jobspecs/examples/workflows/,
// which the embedded examples do not include) parse with Nomad, with the
// variables the guide gives them, and lint without errors; each is named
// by the guide. e2e/TestWorkflowExamples runs them.
func TestWorkflowExamplesLint(t *testing.T) {
	guide, err := os.ReadFile(filepath.Join(root, "docs", "users.md"))
	must.NoError(t, err)
	files, err := filepath.Glob(filepath.Join(root, "jobspecs", "examples", "workflows", "*.nomad.hcl"))
	must.NoError(t, err)
	must.SliceNotEmpty(t, files)
	nomad := nomadBinary()
	for _, f := range files {
		rel, _ := filepath.Rel(root, f)
		must.StrContains(t, string(guide), rel, must.Sprintf("docs/users.md does not name %s", rel))
		if nomad == "" {
			continue
		}
		src, err := os.ReadFile(f)
		must.NoError(t, err)
		for _, vars := range [][]string{nil, {"release=2"}} {
			if vars != nil && !strings.Contains(string(src), `variable "release"`) {
				continue
			}
			job, err := jobspecs.Parser{Binary: nomad}.Parse(rel, src, vars)
			must.NoError(t, err)
			fs := jobspecs.Lint(job, 100)
			must.False(t, jobspecs.HasErrors(fs), must.Sprintf("%s: %v", rel, fs))
		}
	}
	if nomad == "" {
		t.Log("no Nomad binary: the workflow examples were not parsed")
	}
}

// inlineCommands returns the gpushare commands of a document's code spans
// (`gpushare job run FILE`) outside its fenced blocks: those whose words
// name a command and no alternatives (`gpushare job lint / run`,
// `gpushare <command> -h`).
func inlineCommands(name, src string) []command {
	var out []command
	in := false
	span := regexp.MustCompile("`((?:\\./|bin/|\\./bin/)?gpushare [^`]*)`")
	for i, line := range strings.Split(src, "\n") {
		if strings.HasPrefix(line, "```") {
			in = !in
			continue
		}
		if in {
			continue
		}
		for _, m := range span.FindAllStringSubmatch(line, -1) {
			words := strings.Fields(m[1])
			if _, ok := cli.Commands()[words[1]]; !ok || strings.Contains(m[1], " / ") || strings.Contains(m[1], "<command>") || strings.Contains(m[1], "/run") {
				continue
			}
			out = append(out, command{fmt.Sprintf("%s:%d", name, i+1), words})
		}
	}
	return out
}

// The troubleshooting guide names every refusal code of the placement core
// and every lifecycle state a group can be in (RefusedReserve is declared
// but no decision gives it).
func TestTroubleshootingNamesEveryReason(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "docs", "troubleshooting.md"))
	must.NoError(t, err)
	guide := string(b)
	for _, code := range []string{
		placement.RefusedInvalid, placement.RefusedNoModel, placement.RefusedTooLarge, placement.RefusedNoCapacity,
		placement.RefusedTopology, placement.RefusedInterference, placement.RefusedQuota, placement.RefusedOverQuota,
		placement.RefusedRules,
	} {
		must.StrContains(t, guide, "`"+code+"`", must.Sprintf("docs/troubleshooting.md does not explain the refusal %q", code))
	}
	for _, st := range []lifecycle.State{
		lifecycle.Template, lifecycle.Stopped, lifecycle.Waiting, lifecycle.PinnedUnplaced, lifecycle.Running,
		lifecycle.Scaling, lifecycle.Canarying, lifecycle.Migrating, lifecycle.Done, lifecycle.Unmanaged,
	} {
		must.StrContains(t, guide, "`"+string(st)+"`", must.Sprintf("docs/troubleshooting.md does not explain the state %q", st))
	}
}
