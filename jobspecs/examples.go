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
