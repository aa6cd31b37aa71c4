package pin

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"maps"
	"slices"

	"github.com/hashicorp/nomad/api"
)

// Spec digests what of a group Nomad replaces its allocations for when it
// changes (a destructive update: the tasks, their drivers, config, env,
// templates, artifacts and resources, the group's networks, volumes,
// services and meta, the job's meta), leaving out what it updates in
// place (count, update, restart, reschedule and migrate policies, group
// constraints, affinities, spreads, scaling) and what a pin writes (the
// gate, the pin's constraints, a node pin's index affinities, meta and
// environment). Two versions with
// the same Spec and the same pin are updated in place; a different Spec
// makes Nomad replace the allocations — beside them, when the group
// deploys with canaries. "" when the group is missing or does not encode.
func Spec(job *api.Job, group string) string {
	tg := Group(job, group)
	if tg == nil {
		return ""
	}
	b, err := json.Marshal(tg)
	if err != nil {
		return ""
	}
	var c api.TaskGroup
	if err := json.Unmarshal(b, &c); err != nil {
		return ""
	}
	rec, _ := ParseRecord(job, group)
	c.Count, c.Update, c.Constraints, c.Affinities, c.Spreads = nil, nil, nil, nil, nil
	c.RestartPolicy, c.ReschedulePolicy, c.Migrate, c.Scaling = nil, nil, nil, nil
	c.Meta = maps.Clone(c.Meta)
	delete(c.Meta, MetaPlacement)
	delete(c.Meta, MetaSignature)
	if len(c.Meta) == 0 {
		c.Meta = nil
	}
	stripEnv(&c, rec)
	for i, t := range c.Tasks {
		if len(t.Templates) == 0 {
			t.Templates = nil
		}
		if t.Resources == nil {
			continue
		}
		t = userTask(t, rec) // a pin's split and model are the user's block
		c.Tasks[i] = t
		for _, d := range t.Resources.Devices {
			d.Constraints = slices.DeleteFunc(d.Constraints, func(k *api.Constraint) bool {
				return k.LTarget == DeviceAttribute && k.Operand == OpSetContains // a pin's share list
			})
			if len(d.Constraints) == 0 {
				d.Constraints = nil // a version written without any is the same
			}
			d.Affinities = slices.DeleteFunc(d.Affinities, isNodePinAffinity) // a node pin's, written once
			if len(d.Affinities) == 0 {
				d.Affinities = nil
			}
		}
	}
	h := sha256.New()
	_ = json.NewEncoder(h).Encode(job.Meta)
	_ = json.NewEncoder(h).Encode(&c)
	return hex.EncodeToString(h.Sum(nil)[:12])
}
