package config

import (
	"time"
)

// Timeslice configures time-slicing (Gandiva's suspend/resume; issue 46
// part 2): groups with the meta gpushare.timeslice = "true" ask shares for
// their GPU memory, and their compute is the whole GPU in turns with the
// other time-sliced tasks of that GPU, one quantum each, rather than a cap
// of their shares.
type Timeslice struct {
	// Quantum is how long a time-sliced task runs before the next one of
	// its GPU takes its turn (a Go duration).
	Quantum string `hcl:"quantum,optional"`
	// MaxPerGPU is the most time-sliced allocations one GPU takes: each
	// runs about 1/MaxPerGPU of the time when all are busy.
	MaxPerGPU int `hcl:"max_per_gpu,optional"`
}

// Timeslice defaults.
const (
	DefaultTimesliceQuantum   = "2s"
	DefaultTimesliceMaxPerGPU = 4
)

// TimesliceQuantum is how long a time-sliced task runs per turn.
func (c *Config) TimesliceQuantum() time.Duration { return Duration(c.timeslice().Quantum) }

// TimesliceMaxPerGPU is the most time-sliced allocations on one GPU.
func (c *Config) TimesliceMaxPerGPU() int { return c.timeslice().MaxPerGPU }

func (c *Config) timeslice() *Timeslice {
	if c.Timeslice == nil {
		return Default().Timeslice
	}
	return c.Timeslice
}

func (t *Timeslice) merge(o *Timeslice) {
	if o == nil {
		return
	}
	if o.Quantum != "" {
		t.Quantum = o.Quantum
	}
	if o.MaxPerGPU != 0 {
		t.MaxPerGPU = o.MaxPerGPU
	}
}

func (t *Timeslice) validate(bad func(format string, a ...any)) {
	if d, err := time.ParseDuration(t.Quantum); err != nil || d < 10*time.Millisecond || d > time.Hour {
		bad("timeslice.quantum = %q: want a duration within 10ms..1h (for example \"2s\")", t.Quantum)
	}
	if t.MaxPerGPU < 2 || t.MaxPerGPU > 16 {
		bad("timeslice.max_per_gpu = %d: want 2..16 time-sliced allocations per GPU", t.MaxPerGPU)
	}
}
