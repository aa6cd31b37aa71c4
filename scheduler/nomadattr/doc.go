// Package nomadattr is the one place where the scheduler side meets the
// device attributes in Nomad's API type: FromAPI turns the attributes of a
// node's device group (api.NodeDeviceResource.Attributes) into devicefn's
// neutral form, which devicefn.DecodeGroup reads; ToAPI does the reverse,
// for tests and tools that make up the nodes Nomad would return.
// DecodeGroups reads all of a node's gpushare groups at once, merging the
// per-GPU groups of a plugin with device_groups = "gpu" back by model.
//
// The service's model, the GPU map and the e2e tests use it, so that the
// placement core (and devicefn) link neither Nomad's API nor its plugin
// SDK. The plugin side has its own conversion to the SDK's type (package
// plugin).
package nomadattr
