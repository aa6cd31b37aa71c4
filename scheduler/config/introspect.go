package config

import (
	"time"
)

// Introspection configures how the service watches jobs that share a GPU
// (Gandiva's introspection): it samples the SM utilisation of each one's
// processes (the plugin's "Process SM utilization"), compares it with the
// job's utilisation alone, and unpairs a production job observed slower
// than its bound.
type Introspection struct {
	// Enabled turns introspection on; nil means true. Off, pairings are
	// predicted by the interference model alone, without uncertainty.
	Enabled *bool `hcl:"enabled,optional"`
	// Window is the least time a pairing is observed before it is judged.
	Window string `hcl:"window,optional"`
	// Samples is the least number of samples a judgement needs; they are
	// taken every window / samples.
	Samples int `hcl:"samples,optional"`
	// MaxStretch bounds what sharing may cost a job over its life, as a
	// share of its declared run time: a GPU is not shared with an
	// allocation that has already lost more than that to sharing (its
	// time shared, weighted by one less its observed throughput there).
	// nil means DefaultMaxStretch; 0 turns the bound off.
	MaxStretch *float64 `hcl:"max_stretch,optional"`
	// BoundedCost pairs on the prediction and leaves its uncertainty to
	// introspection: a pairing is tried when its expected gain exceeds
	// what it costs if it is one uncertainty worse, bounded by one window
	// (after which a losing pair is unpaired), and a production job's
	// bound is checked at its predicted slowdown (a pair seen breaking it
	// is unpaired). Off (nil), a pairing whose pessimistic outcome loses or
	// breaks a bound is not tried. Needs introspection.
	BoundedCost *bool `hcl:"bounded_cost,optional"`
}

// Introspection defaults.
const (
	DefaultIntrospectionWindow  = "30s"
	DefaultIntrospectionSamples = 3
	// DefaultMaxStretch: sharing may cost a job at most two fifths of its
	// run time alone, over its life.
	DefaultMaxStretch = 0.4
)

// IntrospectionOn reports whether paired jobs are watched.
func (c *Config) IntrospectionOn() bool {
	i := c.introspection()
	return i.Enabled == nil || *i.Enabled
}

// IntrospectionWindow is the least time a pairing is observed.
func (c *Config) IntrospectionWindow() time.Duration { return Duration(c.introspection().Window) }

// IntrospectionSamples is the least number of samples of a pairing.
func (c *Config) IntrospectionSamples() int { return c.introspection().Samples }

func (c *Config) introspection() *Introspection {
	if c.Introspection == nil {
		return Default().Introspection
	}
	return c.Introspection
}

// MaxStretch is the bound on what sharing may cost a job over its life
// (0: none; none either without introspection, which observes it).
func (c *Config) MaxStretch() float64 {
	if !c.IntrospectionOn() {
		return 0
	}
	if m := c.introspection().MaxStretch; m != nil {
		return *m
	}
	return DefaultMaxStretch
}

// BoundedCost reports whether pairings are tried on their predictions,
// with introspection bounding what a wrong one costs (Introspection.
// BoundedCost; never without introspection).
func (c *Config) BoundedCost() bool {
	b := c.introspection().BoundedCost
	return c.IntrospectionOn() && b != nil && *b
}

// IntrospectionEvery is how often the service samples paired jobs.
func (c *Config) IntrospectionEvery() time.Duration {
	return c.IntrospectionWindow() / time.Duration(max(c.IntrospectionSamples(), 1))
}

func (i *Introspection) merge(o *Introspection) {
	if o == nil {
		return
	}
	if o.Enabled != nil {
		i.Enabled = o.Enabled
	}
	if o.Window != "" {
		i.Window = o.Window
	}
	if o.Samples != 0 {
		i.Samples = o.Samples
	}
	if o.MaxStretch != nil {
		i.MaxStretch = o.MaxStretch
	}
	if o.BoundedCost != nil {
		i.BoundedCost = o.BoundedCost
	}
}

func (i *Introspection) validate(bad func(format string, a ...any)) {
	if d, err := time.ParseDuration(i.Window); err != nil || d < time.Second {
		bad("introspection.window = %q: want a duration of at least 1s (for example \"30s\")", i.Window)
	}
	if i.Samples < 2 || i.Samples > 100 {
		bad("introspection.samples = %d: want 2..100 samples per window", i.Samples)
	}
	if m := i.MaxStretch; m != nil && !(*m >= 0 && *m <= 10) {
		bad("introspection.max_stretch = %v: want a share of a job's run time within 0..10 (0: no bound; for example 0.4)", *m)
	}
}
