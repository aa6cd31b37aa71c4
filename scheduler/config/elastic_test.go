package config

import (
	"testing"
	"time"

	"github.com/shoenig/test/must"
)

// elastic_interval bounds how often an elastic group is resized: a minute
// by default, set in the file, and a duration that is not positive is
// refused with the option's name.
func TestElasticInterval(t *testing.T) {
	must.Eq(t, time.Minute, Duration(Default().ElasticInterval))
	c, err := Parse("s.hcl", []byte("elastic_interval = \"5m\"\n"))
	must.NoError(t, err)
	must.Eq(t, 5*time.Minute, Duration(c.ElasticInterval))
	c, err = Parse("s.hcl", []byte("elastic_interval = \"0s\"\n"))
	must.NoError(t, err)
	must.ErrorContains(t, c.Validate(), "elastic_interval")
}
