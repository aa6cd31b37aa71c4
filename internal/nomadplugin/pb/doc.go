// Package pb is the Go code protoc generates from the .proto files beside
// it: Nomad's plugin protocol (the base and device plugin services, the
// hclspec config schema, device attributes and statistics), written from
// Nomad's published protocol with Nomad's package names, message names and
// field numbers, so the bytes on the wire are the ones Nomad sends and
// expects. Do not edit the .pb.go files; change a .proto and run
// `make proto`.
package pb
