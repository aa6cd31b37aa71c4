// Package pin is the jobspec side of the gate-and-pin protocol
// (docs/gate-and-pin.md): it finds the task groups a user handed to gpushare with the
// gate constraint, turns a group into a placement request, and rewrites a
// job so that Nomad places a group exactly where the placement core
// decided: the gate replaced by a node constraint, a ${device.ids}
// constraint in the device block and the gpushare.placement meta. With
// the pin it writes an opportunistic group's run-time priority on MPS
// GPUs into its GPU task (Runtime). It works on *api.Job values and does
// no I/O.
package pin
