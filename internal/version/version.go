// Package version holds the one gpushare version that both binaries report:
// `gpushare version` prints it and the device plugin hands it to Nomad. The
// GNUmakefile stamps it at build time:
//
//	go build -ldflags "-X github.com/gpushare/gpushare/internal/version.Version=v1.2.3" ./cmd/...
package version

// Unstamped is Version in a build the GNUmakefile did not stamp.
const Unstamped = "v0.1.0-dev"

// Version is the gpushare version, set at build time.
var Version = Unstamped
