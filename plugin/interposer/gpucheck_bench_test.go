package interposer

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// BenchmarkGPUCheckFakeDriver: the table of `make gpu-check` over the fake
// driver, printed whole (make bench publishes it), its figures reported as
// metrics. The compute rows are on the simulated clock (the same on every
// run); the overhead rows are the host's time with the fake driver.
var gpuCheckPrinted sync.Once

func BenchmarkGPUCheckFakeDriver(b *testing.B) {
	g := newGPUChecker(b, false)
	b.ResetTimer() // the build is not the table's time
	var table strings.Builder
	var rows []checkRow
	start := time.Now()
	for range b.N {
		gpu, r, err := g.run()
		if err != nil {
			b.Fatal(err)
		}
		table.Reset()
		report(&table, gpu, r)
		rows = r
	}
	// once (the benchmark is called again with a larger b.N when a run
	// takes under -benchtime), to stdout: b.Log would be cut to 10 lines
	gpuCheckPrinted.Do(func() {
		fmt.Fprintf(os.Stdout, "\n%s(the fake driver; %d run(s) in %s)\n", table.String(), b.N, time.Since(start).Round(time.Millisecond))
	})
	for _, r := range rows {
		if r.metric != "" {
			b.ReportMetric(r.value, r.metric)
		}
	}
}
