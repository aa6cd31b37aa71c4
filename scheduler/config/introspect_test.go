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

	c, err := Parse("s.hcl", []byte("introspection {\n  window = \"6s\"\n  samples = 4\n}\n"))
	must.NoError(t, err)
	must.NoError(t, c.Validate())
	must.True(t, c.IntrospectionOn())
	must.Eq(t, 1500*time.Millisecond, c.IntrospectionEvery())

	c, err = Parse("s.hcl", []byte("introspection {\n  enabled = false\n}\n"))
	must.NoError(t, err)
	must.False(t, c.IntrospectionOn())
	must.Eq(t, 30*time.Second, c.IntrospectionWindow())

	c, err = Parse("s.hcl", []byte("introspection {\n  window = \"10ms\"\n  samples = 1\n}\n"))
	must.NoError(t, err)
	err = c.Validate()
	must.ErrorContains(t, err, `s.hcl:2: introspection.window = "10ms"`)
	must.ErrorContains(t, err, "s.hcl:3: introspection.samples = 1: want 2..100")
}
