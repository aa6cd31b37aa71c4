package interposer

import (
	"bufio"
	"fmt"
	"strings"
	"testing"
)

// BenchmarkMemInfoWithSiblings: cuMemGetInfo_v2 in a process whose
// reservation has 8 other live processes, each holding memory. Memory info
// looks for dead processes' slots (issue 29, defect 9a): before, it read
// /proc/<pid>/stat of each sibling under the reservation's lock (90-120 us
// a call); now it asks each sibling's slot lock (one F_GETLK), outside the
// lock. ns/op is the program's ns per call; reported, never asserted.
func BenchmarkMemInfoWithSiblings(b *testing.B) {
	bin := build(b)
	dir := reservation(b, capOf(100*mib))
	r := run{limits: dir, mode: "direct"}
	for i := 0; i < 8; i++ {
		c := r.cmd(bin, "alloc:1048576", "wait")
		in, err := c.StdinPipe()
		if err != nil {
			b.Fatal(err)
		}
		out, err := c.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		if err := c.Start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { in.Close(); c.Process.Kill(); c.Wait() })
		if l, _ := bufio.NewReader(out).ReadString('\n'); strings.TrimSpace(l) != "alloc 0" {
			b.Fatalf("sibling %d: %q", i, l)
		}
	}
	for _, c := range []struct {
		name string
		r    run
	}{
		{"alone", run{limits: reservation(b, capOf(100*mib)), mode: "direct"}},
		{"8-siblings", r},
	} {
		b.Run(c.name, func(b *testing.B) {
			line := c.r.output(b, bin, fmt.Sprintf("infobench:%d", max(b.N, 10000)))[0]
			b.ReportMetric(nsFigure(b, line, "infobench"), "ns/op")
		})
	}
}
