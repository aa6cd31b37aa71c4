// Package cli implements the subcommands of the gpushare command. Each
// subcommand is a function from arguments and output streams to an exit
// code, so cmd/gpushare stays a thin dispatcher and tests run the commands
// in-process.
package cli
