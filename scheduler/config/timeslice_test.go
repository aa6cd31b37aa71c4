package config

import (
	"testing"
	"time"

	"github.com/shoenig/test/must"
)

func TestTimesliceDefaultsAndOverrides(t *testing.T) {
	c := Default()
	must.Eq(t, 2*time.Second, c.TimesliceQuantum())
	must.Eq(t, 4, c.TimesliceMaxPerGPU())

	c, err := Parse("t.hcl", []byte(`timeslice {
  quantum     = "500ms"
  max_per_gpu = 3
}
`))
	must.NoError(t, err)
	must.Eq(t, 500*time.Millisecond, c.TimesliceQuantum())
	must.Eq(t, 3, c.TimesliceMaxPerGPU())
}

func TestTimesliceBadValuesAreNamed(t *testing.T) {
	for src, want := range map[string]string{
		`timeslice { quantum = "1ns" }`: "timeslice.quantum",
		`timeslice { max_per_gpu = 1 }`: "timeslice.max_per_gpu",
	} {
		c, err := Parse("t.hcl", []byte(src))
		must.NoError(t, err)
		must.ErrorContains(t, c.Validate(), want)
	}
}
