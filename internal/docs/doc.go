// Package docs holds no code: its test checks the commands of the
// repository's documents (README.md and docs/*.md) against the programs
// they run. Every `gpushare` command in a shell block must name a
// subcommand of the CLI and only flags its help lists; every `nomad`
// command a command of the Nomad binary and flags its help lists; every
// `make` target one of GNUmakefile's; a namespace is applied from a
// specification file. The gpushare commands of code spans in the prose are
// checked too. The workflow examples of the users'
// guide (jobspecs/examples/workflows/) parse and lint clean.
package docs
