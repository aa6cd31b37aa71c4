// Command gpushare is the gpushare CLI: the GPU map of a cluster, fixture
// tools and, as they land, the scheduler service, the simulator and job
// tools. Run it without arguments for the list of commands.
package main

import (
	"os"

	"github.com/gpushare/gpushare/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], cli.IO{Out: os.Stdout, Err: os.Stderr}))
}
