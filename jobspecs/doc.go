// Package jobspecs holds the example jobspecs (examples/*.nomad.hcl, each
// run by the e2e tests and the demo) and the checks behind `gpushare job
// lint` and `gpushare job run`: that a job asks for gpushare devices in a
// way gpushare can place, with the gate, before it reaches Nomad.
package jobspecs
