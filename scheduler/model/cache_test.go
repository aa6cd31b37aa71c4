package model

import (
	"testing"

	"github.com/shoenig/test/must"
)

// A job read again and again (a new object of the same version each time,
// as a pass reads back the jobs it pinned) is found by its object without
// leaving an entry for every object it was: the state forgets the object
// it replaces, and the one of a job purged.
func TestParsedObjectsDoNotPileUp(t *testing.T) {
	s := New()
	for i := range 1000 {
		for _, id := range []string{"a", "b"} {
			job := gatedJob(id, 25)
			job.ModifyIndex, job.JobModifyIndex = ptr(uint64(7)), ptr(uint64(7))
			s.PutJob(job)
			_, _ = s.Record(job, "g")
			must.Eq(t, []string{"g"}, s.Gated(job))
		}
		must.MapLen(t, 2, s.cache.byJob, must.Sprintf("after %d reads", i+1))
		must.MapLen(t, 2, s.cache.byKey)
	}
	s.DeleteJob("default", "a")
	must.MapLen(t, 1, s.cache.byJob)
}
