package cli

import (
	"flag"
	"fmt"
	"io"
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

// Main runs the gpushare command line and returns the exit code.
func Main(args []string, io IO) int {
	cmds := Commands()
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(io.Err, cmds)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	c, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(io.Err, "gpushare: unknown command %q\n\n", args[0])
		usage(io.Err, cmds)
		return 2
	}
	return c.Run(args[1:], io)
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
	b.WriteString("\nRun 'gpushare <command> -h' for a command's flags.\n")
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

func runVersion(args []string, io IO) int {
	fmt.Fprintf(io.Out, "gpushare %s\n", version.Version)
	return 0
}
