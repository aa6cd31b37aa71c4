// Package e2e holds the end-to-end tests: a real Nomad v1.11.3 cluster on
// loopback (package internal/devcluster), the real gpushare plugin binary
// on fixture topologies, real jobspecs from testdata/. They run in `make
// test`; `go test -short` skips them.
package e2e
