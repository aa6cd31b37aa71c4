package interposer

import "path/filepath"

// Sources lists the library's C sources under dir (this package's
// directory), every file `make build` compiles into libgpushare-cuda.so.
// Tests build the library from the same list.
func Sources(dir string) []string {
	srcs, _ := filepath.Glob(filepath.Join(dir, "src", "*.c")) // the pattern is well formed
	return srcs
}
