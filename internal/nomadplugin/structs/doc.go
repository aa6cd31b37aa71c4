// Package structs holds the values a device plugin reports to Nomad, a
// device attribute and a statistic, with their conversion to the
// protocol's messages (package pb). The names mirror Nomad's
// plugins/shared/structs, so plugin code reads as it does against Nomad's
// SDK.
package structs
