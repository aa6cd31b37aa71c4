package queue

import (
	"testing"
	"time"

	"github.com/shoenig/test/must"
)

func TestRoomIn(t *testing.T) {
	in, ok := RoomIn([]time.Duration{3 * time.Hour, 0, time.Hour, 2 * time.Hour}, 2)
	must.True(t, ok)
	must.EqOp(t, time.Hour, in) // one GPU free now, the next in an hour
	in, ok = RoomIn([]time.Duration{0, 0}, 2)
	must.True(t, ok)
	must.EqOp(t, 0, in)
	_, ok = RoomIn([]time.Duration{0}, 2)
	must.False(t, ok)
}

func TestHold(t *testing.T) {
	rooms := []Room{{"a", 2 * time.Hour}, {"b", time.Hour}, {"c", time.Hour}, {"d", 0}}
	must.Eq(t, []Room{{"d", 0}, {"b", time.Hour}}, Hold(rooms, 2, 3*time.Hour)) // ties keep order
	must.Nil(t, Hold(rooms, 2, 30*time.Minute))                                 // would idle longer than the job runs
	must.Nil(t, Hold(rooms, 5, 10*time.Hour))                                   // too few nodes
	must.Eq(t, []Room{{"a", 2 * time.Hour}, {"b", time.Hour}, {"c", time.Hour}, {"d", 0}}, rooms)
}
