package cli

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/gpushare/gpushare/scheduler/sim/gavel"
)

// simGavelThroughputs converts throughputs measured in Gavel's form into
// the simulator's files (gavel.ConvertThroughputs), for -data.
func simGavelThroughputs(args []string, io IO) int {
	fs := newFlags("sim gavel-throughputs", "sim gavel-throughputs -gpu TYPE -out DIR [-traces=false] FILE.json", io)
	gpu := fs.String("gpu", "", "the GPU type to convert: the file's entries \"TYPE\" (jobs on one server) and \"TYPE_unconsolidated\" (jobs spread across servers)")
	out := fs.String("out", "", "write isolated_throughputs_TYPE.csv and colocation_pairs_TYPE.csv into this directory (made if absent)")
	traces := fs.Bool("traces", true, "also write the built-in MSR traces into DIR/msr_seed0 (those not there already), so that 'gpushare sim gavel -data DIR -gpu TYPE' runs them")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if fs.NArg() != 1 || *gpu == "" || *out == "" {
		fmt.Fprintln(io.Err, "gpushare sim gavel-throughputs: want -gpu, -out and one file: Gavel's scheduler/simulation_throughputs.json, or a file its profiler wrote in that form")
		fs.Usage()
		return exitUsage
	}
	f, err := os.Open(fs.Arg(0))
	if err != nil {
		return simFail(io, err)
	}
	defer f.Close()
	iso, pairs, err := gavel.ConvertThroughputs(f, *gpu)
	if err != nil {
		return simFail(io, fmt.Errorf("%s: %w", fs.Arg(0), err))
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return simFail(io, err)
	}
	for name, b := range map[string][]byte{"isolated_throughputs_" + *gpu + ".csv": iso, "colocation_pairs_" + *gpu + ".csv": pairs} {
		if err := os.WriteFile(filepath.Join(*out, name), b, 0o644); err != nil {
			return simFail(io, err)
		}
		fmt.Fprintf(io.Out, "wrote %s\n", filepath.Join(*out, name))
	}
	if *traces {
		n, err := gavel.Embedded().CopyTraces(*out)
		if err != nil {
			return simFail(io, err)
		}
		fmt.Fprintf(io.Out, "wrote %d trace(s) into %s\n", n, filepath.Join(*out, "msr_seed0"))
	}
	fmt.Fprintf(io.Out, "run: gpushare sim gavel -data %s -gpu %s\n", *out, *gpu)
	return 0
}
