package jobspecs

import (
	"fmt"
	"strings"

	"github.com/hashicorp/nomad/api"
	"github.com/hashicorp/nomad/jobspec2"
)

// Parse reads an HCL jobspec the way `nomad job run` does (HCL2, with
// variables given as "name=value" strings), without a Nomad server.
func Parse(filename string, src []byte, vars []string) (*api.Job, error) {
	job, err := jobspec2.ParseWithConfig(&jobspec2.ParseConfig{
		Path: filename, Body: src, ArgVars: vars, AllowFS: true, Strict: true,
	})
	if err != nil {
		if strings.Contains(err.Error(), filename+":") {
			return nil, err // HCL errors name the file and line already
		}
		return nil, fmt.Errorf("%s: %w", filename, err)
	}
	return job, nil
}
