package service

import (
	"encoding/json"
	"fmt"

	"github.com/hashicorp/nomad/api"
)

// eventJob decodes the job of a Job event, and whether it was purged, with
// encoding/json. The api package's Event.Job decodes with mapstructure,
// which matches the payload's Go field names against the api structs'
// HCL-style mapstructure tags, and so drops every field whose tag differs
// from its name other than by case: update's health_check,
// min_healthy_time and healthy_deadline, a group's restart, reschedule and
// ephemeral_disk, a task's logs and kill_timeout, and more. A job pinned
// from such a copy was registered again without them (with Nomad's
// defaults instead), and a batch job's half-decoded update block
// (stagger 0, the rest defaulted) made Nomad refuse the pin: "Job type
// "batch" does not allow update block".
func eventJob(e api.Event) (*api.Job, bool, error) {
	b, err := json.Marshal(e.Payload)
	if err != nil {
		return nil, false, err
	}
	var out struct {
		Job     *api.Job
		Deleted bool
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, false, fmt.Errorf("decode the job payload: %w", err)
	}
	return out.Job, out.Deleted, nil
}
