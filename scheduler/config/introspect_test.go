package config

import (
	"testing"
	"time"

	"github.com/shoenig/test/must"
)

func TestIntrospection(t *testing.T) {
	c := Default()
	must.NoError(t, c.Validate())
	must.True(t, c.IntrospectionOn())
	must.Eq(t, 30*time.Second, c.IntrospectionWindow())
	must.Eq(t, 10*time.Second, c.IntrospectionEvery())
	must.Eq(t, DefaultMaxStretch, c.MaxStretch())

	c, err := Parse("s.hcl", []byte("introspection {\n  window = \"6s\"\n  samples = 4\n}\n"))
	must.NoError(t, err)
	must.NoError(t, c.Validate())
	must.True(t, c.IntrospectionOn())
	must.Eq(t, 1500*time.Millisecond, c.IntrospectionEvery())

	c, err = Parse("s.hcl", []byte("introspection {\n  enabled = false\n}\n"))
	must.NoError(t, err)
	must.False(t, c.IntrospectionOn())
	must.Eq(t, 30*time.Second, c.IntrospectionWindow())
	must.Eq(t, 0.0, c.MaxStretch(), must.Sprint("nothing observes what sharing costs"))

	c, err = Parse("s.hcl", []byte("introspection {\n  max_stretch = 0\n}\n"))
	must.NoError(t, err)
	must.NoError(t, c.Validate())
	must.Eq(t, 0.0, c.MaxStretch())
	c, err = Parse("s.hcl", []byte("introspection {\n  max_stretch = 0.25\n}\n"))
	must.NoError(t, err)
	must.Eq(t, 0.25, c.MaxStretch())
	c, err = Parse("s.hcl", []byte("introspection {\n  max_stretch = -1\n}\n"))
	must.NoError(t, err)
	must.ErrorContains(t, c.Validate(), "s.hcl:2: introspection.max_stretch = -1: want a share")

	// bounded cost: off by default, on when asked, never without introspection
	must.False(t, Default().BoundedCost())
	c, err = Parse("s.hcl", []byte("introspection {\n  bounded_cost = true\n}\n"))
	must.NoError(t, err)
	must.NoError(t, c.Validate())
	must.True(t, c.BoundedCost())
	c, err = Parse("s.hcl", []byte("introspection {\n  bounded_cost = true\n  enabled = false\n}\n"))
	must.NoError(t, err)
	must.False(t, c.BoundedCost(), must.Sprint("nothing would undo a wrong pairing"))

	c, err = Parse("s.hcl", []byte("introspection {\n  window = \"10ms\"\n  samples = 1\n}\n"))
	must.NoError(t, err)
	err = c.Validate()
	must.ErrorContains(t, err, `s.hcl:2: introspection.window = "10ms"`)
	must.ErrorContains(t, err, "s.hcl:3: introspection.samples = 1: want 2..100")
}
