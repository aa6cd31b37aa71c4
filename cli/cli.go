package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime/debug"
	"sort"
	"strings"

	"github.com/gpushare/gpushare/internal/version"
)

// IO carries a command's output streams.
type IO struct {
	Out, Err io.Writer
}

// Command is one subcommand.
type Command struct {
	Name     string
	Synopsis string
	Run      func(args []string, io IO) int
}

// Commands lists the subcommands by name.
func Commands() map[string]Command {
	cmds := []Command{
		{"version", "print the version", runVersion},
		{"status", "print the GPU map of a Nomad cluster: per node and GPU, the shares in use and by whom", runStatus},
		{"demo", "start a local Nomad cluster with fixture GPUs, the plugin, the scheduler and example jobs, then show the GPU map", runDemo},
		{"fixture", "make or check GPU fixture files (for machines without GPUs)", runFixture},
		{"job", "lint a jobspec's GPU request, or run it through gpushare (adds the gate, checks the fit)", runJob},
		{"scheduler", "run the scheduling service: watch Nomad, place gated GPU jobs, pin them", runScheduler},
		{"limit", "run a program under the CUDA interposer with a share's limits (GPU memory cap), to try it by hand", runLimit},
		{"sim", "replay real cluster traces through the placement core and compare policies", runSim},
	}
	m := map[string]Command{}
	for _, c := range cmds {
		m[c.Name] = c
	}
	return m
}

// Exit codes, as Nomad's CLI gives them: 0 for success (and for -h),
// 1 for any error, bad usage included (a flag that does not parse, a
// missing argument: the error and the usage are printed), 127 for a
// command that does not exist.
const (
	exitUsage          = 1
	exitUnknownCommand = 127
)

// Main runs the gpushare command line and returns the exit code.
func Main(args []string, io IO) int {
	cmds := Commands()
	if len(args) > 0 {
		switch args[0] {
		case "-h", "-help", "--help", "help":
			usage(io.Err, cmds)
			return 0
		case "-v", "-version", "--version":
			return runVersion(args[1:], io)
		}
	}
	if len(args) == 0 {
		usage(io.Err, cmds)
		return exitUnknownCommand
	}
	c, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(io.Err, "gpushare: unknown command %q\n\n", args[0])
		usage(io.Err, cmds)
		return exitUnknownCommand
	}
	return c.Run(args[1:], io)
}

// isHelp reports whether arg asks for a command's usage.
func isHelp(arg string) bool {
	return arg == "-h" || arg == "-help" || arg == "--help"
}

func usage(w io.Writer, cmds map[string]Command) {
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("gpushare: fractional, topology-aware GPU scheduling for Nomad\n\nUsage: gpushare <command> [flags]\n\nCommands:\n")
	for _, n := range names {
		fmt.Fprintf(&b, "  %-10s %s\n", n, cmds[n].Synopsis)
	}
	b.WriteString("\nRun 'gpushare <command> -h' for a command's flags; 'gpushare -version' for the version.\n")
	io.WriteString(w, b.String())
}

// newFlags returns a flag set that prints its usage to io.Err.
func newFlags(name, synopsis string, io IO) *flag.FlagSet {
	fs := flag.NewFlagSet("gpushare "+name, flag.ContinueOnError)
	fs.SetOutput(io.Err)
	fs.Usage = func() {
		fmt.Fprintf(io.Err, "Usage: gpushare %s\n\n", synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses a command's flags as Nomad's commands do: -h or -help
// prints the usage and exits 0; a flag that does not parse prints the
// error and the usage (the flag package does both) and exits 1. ok is
// false when the command must return code now.
func parse(fs *flag.FlagSet, args []string) (code int, ok bool) {
	err := fs.Parse(args)
	switch {
	case err == nil:
		return 0, true
	case errors.Is(err, flag.ErrHelp):
		return 0, false
	}
	return exitUsage, false
}

func runVersion(args []string, io IO) int {
	fs := newFlags("version", "version", io)
	if code, ok := parse(fs, args); !ok {
		return code
	}
	fmt.Fprintf(io.Out, "gpushare %s\n", versionString(version.Version, readBuildInfo()))
	return 0
}

func readBuildInfo() *debug.BuildInfo {
	bi, _ := debug.ReadBuildInfo()
	return bi
}

// versionString is the version a build reports: the one the GNUmakefile
// stamps (-ldflags -X internal/version.Version), exactly. An unstamped
// build (go build, go install) reports the module's version when Go
// recorded one (go install github.com/gpushare/gpushare/cmd/gpushare@v1.2.3),
// and the commit it was built from when Go recorded that.
func versionString(stamped string, bi *debug.BuildInfo) string {
	if stamped != version.Unstamped || bi == nil {
		return stamped
	}
	v := stamped
	if m := bi.Main.Version; m != "" && m != "(devel)" {
		v = m
	}
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev == "" {
		return v
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if modified == "true" {
		rev += ", modified"
	}
	return fmt.Sprintf("%s (revision %s)", v, rev)
}
