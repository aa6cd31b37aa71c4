package jobspecs

import (
	"embed"
	"io/fs"
	"sort"
)

// Examples holds the example jobspecs.
//
//go:embed examples/*.nomad.hcl
var Examples embed.FS

// ExampleNames lists the example files, sorted.
func ExampleNames() []string {
	entries, _ := fs.ReadDir(Examples, "examples")
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, "examples/"+e.Name())
	}
	sort.Strings(names)
	return names
}

// DemoDriver is the task driver of the examples a local dev cluster runs
// on any machine (gpushare demo, the e2e tests): raw_exec needs neither
// root nor Docker.
const DemoDriver = "raw_exec"

// DemoExampleNames lists, sorted, the examples whose every task uses
// DemoDriver. The others show other drivers (docker with the NVIDIA
// container runtime, exec) and need what those drivers need.
func DemoExampleNames() []string {
	var names []string
	for _, name := range ExampleNames() {
		if drivers, err := ExampleDrivers(name); err == nil && len(drivers) == 1 && drivers[0] == DemoDriver {
			names = append(names, name)
		}
	}
	return names
}

// ExampleDrivers returns the task drivers an example uses, sorted, each
// once.
func ExampleDrivers(name string) ([]string, error) {
	src, err := fs.ReadFile(Examples, name)
	if err != nil {
		return nil, err
	}
	job, err := Parse(name, src, nil)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var drivers []string
	for _, tg := range job.TaskGroups {
		for _, t := range tg.Tasks {
			if !seen[t.Driver] {
				seen[t.Driver] = true
				drivers = append(drivers, t.Driver)
			}
		}
	}
	sort.Strings(drivers)
	return drivers, nil
}
