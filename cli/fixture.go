package cli

import (
	"fmt"
	"os"
	"strings"

	"github.com/gpushare/gpushare/devicefn/fixture"
)

func runFixture(args []string, io IO) int {
	if len(args) == 0 || (args[0] != "from-topo" && args[0] != "check") {
		fmt.Fprint(io.Err, `Usage: gpushare fixture <subcommand>

  from-topo [flags] FILE   write a fixture from the output of 'nvidia-smi topo -m'
  check FILE...            check fixture files; errors give file, line and column
`)
		if len(args) > 0 && isHelp(args[0]) {
			return 0
		}
		return exitUsage
	}
	if args[0] == "check" {
		return fixtureCheck(args[1:], io)
	}
	fs := newFlags("fixture from-topo", "fixture from-topo [flags] TOPO_M_FILE > gpus.hcl", io)
	var spec fixture.Spec
	fs.StringVar(&spec.Model, "model", "NVIDIA H100 80GB HBM3", "GPU model name, as NVML reports it")
	memory := fs.Int64("memory-mib", 81559, "memory of each GPU in MiB")
	fs.StringVar(&spec.ComputeCapability, "compute-capability", "9.0", "compute capability major.minor")
	fs.StringVar(&spec.DriverVersion, "driver-version", "550.54.15", "driver version to report")
	fs.StringVar(&spec.CUDAVersion, "cuda-version", "12.4", "CUDA version to report")
	fs.StringVar(&spec.UUIDPrefix, "uuid-prefix", "f1000000", "8 hex digits that make this fixture's GPU UUIDs unique in a cluster")
	if code, ok := parse(fs, args[1:]); !ok {
		return code
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return exitUsage
	}
	spec.MemoryMiB = *memory
	spec.Source = fs.Arg(0)
	f, err := os.Open(fs.Arg(0))
	if err != nil {
		fmt.Fprintf(io.Err, "gpushare fixture: %v\n", err)
		return 1
	}
	defer f.Close()
	topo, err := fixture.ParseTopoM(f)
	if err != nil {
		fmt.Fprintf(io.Err, "gpushare fixture: %s: %v\n", fs.Arg(0), err)
		return 1
	}
	_, _ = io.Out.Write(fixture.Generate(topo, spec))
	return 0
}

func fixtureCheck(files []string, io IO) int {
	if len(files) == 0 || isHelp(files[0]) {
		fmt.Fprintln(io.Err, "Usage: gpushare fixture check FILE...")
		if len(files) > 0 {
			return 0
		}
		return exitUsage
	}
	code := 0
	for _, name := range files {
		src, err := os.ReadFile(name)
		if err == nil {
			var st *fixture.State
			st, err = fixture.Parse(name, src)
			if err == nil {
				models := map[string]int{}
				for _, g := range st.Inventory.GPUs {
					models[g.Model]++
				}
				var parts []string
				for m, n := range models {
					parts = append(parts, fmt.Sprintf("%d x %s", n, m))
				}
				fmt.Fprintf(io.Out, "%s: ok (%s)\n", name, strings.Join(parts, ", "))
				continue
			}
		}
		fmt.Fprintf(io.Err, "%v\n", err)
		code = 1
	}
	return code
}
