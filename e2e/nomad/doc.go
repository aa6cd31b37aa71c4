// Package nomad is the tools module that builds the Nomad binary the e2e
// tests and the demo run (make nomad). It is a module of its own so that
// gpushare's module, whose binaries ship, does not require Nomad (under the
// Business Source License since 1.7); tests that need Nomad's Go packages
// rather than its binary live here (make test runs them).
package nomad
