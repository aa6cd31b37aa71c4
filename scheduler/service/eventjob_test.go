package service

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// A job from an event keeps every field Nomad sent, so that a pin
// registers the job the user wrote: a batch job's empty update block stays
// empty (Nomad refuses one it would canonicalize into a group's update),
// and the group's restart policy and ephemeral disk survive.
func TestEventJobKeepsFields(t *testing.T) {
	job := api.NewBatchJob("b", "b", "global", 50)
	zero := time.Duration(0)
	job.Update = &api.UpdateStrategy{Stagger: &zero, MaxParallel: new(0), HealthCheck: new(""), MinHealthyTime: &zero,
		HealthyDeadline: &zero, ProgressDeadline: &zero, AutoRevert: new(false), AutoPromote: new(false), Canary: new(0)}
	tg := api.NewTaskGroup("g", 1)
	tg.RestartPolicy = &api.RestartPolicy{Attempts: new(0), Mode: new("fail"), Interval: new(time.Minute), Delay: new(time.Second)}
	tg.EphemeralDisk = &api.EphemeralDisk{SizeMB: new(10)}
	job.AddTaskGroup(tg)
	// the payload as the event stream hands it over: JSON decoded into maps
	b, err := json.Marshal(map[string]any{"Job": job, "Deleted": true})
	must.NoError(t, err)
	var payload map[string]any
	must.NoError(t, json.Unmarshal(b, &payload))

	got, deleted, err := eventJob(api.Event{Topic: api.TopicJob, Payload: payload})
	must.NoError(t, err)
	must.True(t, deleted)
	must.Eq(t, 10, *got.TaskGroups[0].EphemeralDisk.SizeMB)
	must.Eq(t, time.Minute, *got.TaskGroups[0].RestartPolicy.Interval)
	got.Canonicalize()
	must.Nil(t, got.TaskGroups[0].Update, must.Sprint("a batch group gets no update block"))
}
