// Package devcluster runs a local Nomad cluster of real processes for the e2e
// tests and the demo: the Nomad v1.11.3 binary built from the Go module
// proxy (e2e/nomad), a dev agent (server and client) plus optional extra
// clients, each with the real gpushare device plugin on its own fixture, all
// on loopback, optionally with ACLs (bootstrapped; policies and tokens made
// on request) and TLS on HTTP and RPC (certificates from GenerateTLS). Stop
// kills every process the cluster started, including the tasks of its
// allocations.
package devcluster
