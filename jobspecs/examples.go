package jobspecs

import (
	"embed"
	"fmt"
	"io/fs"
	"sort"

	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
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
// once. It reads the HCL's task blocks directly (driver is a literal in
// every example), so it needs no Nomad to parse the jobspec with: the demo
// chooses its examples with it before a cluster runs.
func ExampleDrivers(name string) ([]string, error) {
	src, err := fs.ReadFile(Examples, name)
	if err != nil {
		return nil, err
	}
	f, diags := hclparse.NewParser().ParseHCL(src, name)
	if diags.HasErrors() {
		return nil, diags
	}
	seen := map[string]bool{}
	var drivers []string
	var walk func(b *hclsyntax.Body) error
	walk = func(b *hclsyntax.Body) error {
		for _, blk := range b.Blocks {
			if blk.Type == "task" {
				a, ok := blk.Body.Attributes["driver"]
				if !ok {
					return fmt.Errorf("%s: task %v has no driver", blk.DefRange(), blk.Labels)
				}
				v, d := a.Expr.Value(nil)
				if d.HasErrors() || v.Type() != cty.String {
					return fmt.Errorf("%s: the driver is not a literal string", a.SrcRange)
				}
				if drv := v.AsString(); !seen[drv] {
					seen[drv] = true
					drivers = append(drivers, drv)
				}
				continue
			}
			if err := walk(blk.Body); err != nil {
				return err
			}
		}
		return nil
	}
	body, ok := f.Body.(*hclsyntax.Body)
	if !ok {
		return nil, fmt.Errorf("%s: not native HCL syntax", name)
	}
	if err := walk(body); err != nil {
		return nil, err
	}
	sort.Strings(drivers)
	return drivers, nil
}
