// Package config is the scheduling service's configuration: an HCL file
// (hcl/v2) with the Nomad connection, the policy, the production slowdown
// bound, virtual clusters, named interference profiles and the run-time
// priority of opportunistic jobs. Default gives every default, Merge
// layers a file over it, and Validate reports every problem at once.
package config
