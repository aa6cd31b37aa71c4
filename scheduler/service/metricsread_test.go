package service

import (
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/shoenig/test/must"
)

// counterValue reads one series of the service's /metrics.
func counterValue(t *testing.T, s *Service, series string) float64 {
	t.Helper()
	rr := httptest.NewRecorder()
	s.Handler().ServeHTTP(rr, apiRequest("GET", "/metrics", nil))
	for _, line := range strings.Split(rr.Body.String(), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			must.NoError(t, err)
			return f
		}
	}
	t.Fatalf("no series %s in /metrics", series)
	return 0
}
