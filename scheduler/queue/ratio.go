package queue

import "time"

// ResponseRatio is (waited + expected) / expected: highest first is
// highest-response-ratio-next (HRRN). Among jobs that have waited as long
// the shortest goes first, as in shortest-job-first, but every waiting
// job's ratio grows with its wait, and the longer a job is, the less it
// takes to overtake a shorter one, so a stream of short jobs cannot starve
// a long one. A negative wait counts as none; an expected run time below a
// second counts as a second.
func ResponseRatio(waited, expected time.Duration) float64 {
	expected = max(expected, time.Second)
	waited = max(waited, 0)
	return float64(waited+expected) / float64(expected)
}

// Seconds converts seconds (as the simulator counts time) to a Duration.
func Seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
