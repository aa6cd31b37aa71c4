package pin

import (
	"slices"
	"strings"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/hashicorp/nomad/api"
)

// A request by GPU model on nodes whose plugin offers each GPU as a device
// group of its own: there the groups are named "<model> GPU <index>"
// (devicefn.GPUGroupName), so neither the device name
// `nvidia/gpushare/<model>` nor a constraint `${device.model} = <model>`
// matches one. A pin of such a request writes the model as what matches
// the GPUs of that model under both contracts, a device constraint
// `${device.model} regexp ^<model>( GPU [0-9]+)?$` (ModelConstraint):
// the device name loses its model, or the user's equality constraint
// becomes the regexp, in its place. Record.Model says which, so that
// everything that reads the group's request (Request, Digest, Spec) reads
// the block the user wrote (userTask), and the file registered again is
// pinned byte for byte. Shared MIG instances' groups ("<model> MIG
// <profile>") match neither, as `nvidia/gpushare/<model>` never did.

// ModelTarget is the device attribute a request by model names.
const ModelTarget = "${device.model}"

// OpRegexp is Nomad's regexp operator.
const OpRegexp = "regexp"

// ModelPattern is the regexp of ModelConstraint (devicefn.ModelPattern).
func ModelPattern(model string) string { return devicefn.ModelPattern(model) }

// ModelConstraint is the device constraint a pin writes for a request by
// model.
func ModelConstraint(model string) *api.Constraint {
	return &api.Constraint{LTarget: ModelTarget, Operand: OpRegexp, RTarget: ModelPattern(model)}
}

// Ways a pin moved a request's model into ModelConstraint (Record.ModelAs).
const (
	// ModelFromName: the device name `nvidia/gpushare/<model>` became
	// `nvidia/gpushare`, ModelConstraint appended to the block's.
	ModelFromName = "name"
	// ModelFromConstraint: the block's first `${device.model} = <model>`
	// became ModelConstraint, in its place.
	ModelFromConstraint = "constraint"
)

// modelNamed reports how the block d (as the user wrote it) names a model
// the pin must rewrite: by its device name, else by an equality constraint
// on ${device.model}. "" when it names none.
func modelNamed(d *api.RequestedDevice) (model, as, op string) {
	if d == nil {
		return "", "", ""
	}
	if m, ok := strings.CutPrefix(d.Name, DeviceName+"/"); ok && m != "" {
		return m, ModelFromName, ""
	}
	for _, c := range d.Constraints {
		if c.LTarget == ModelTarget && isEquality(c.Operand) {
			return c.RTarget, ModelFromConstraint, c.Operand
		}
	}
	return "", "", ""
}

// nameModel rewrites the user's block d as rec says (Record.Model).
func nameModel(d *api.RequestedDevice, rec *Record) {
	switch rec.ModelAs {
	case ModelFromName:
		if d.Name == DeviceName+"/"+rec.Model {
			d.Name = DeviceName
			d.Constraints = append(d.Constraints, ModelConstraint(rec.Model))
		}
	case ModelFromConstraint:
		for i, c := range d.Constraints {
			if c.LTarget == ModelTarget && isEquality(c.Operand) && c.RTarget == rec.Model {
				d.Constraints[i] = ModelConstraint(rec.Model)
				return
			}
		}
	}
}

// unnameModel is nameModel undone: the block as the user wrote it.
func unnameModel(d *api.RequestedDevice, rec *Record) {
	mine := ModelConstraint(rec.Model)
	switch rec.ModelAs {
	case ModelFromName:
		if d.Name == DeviceName && slices.ContainsFunc(d.Constraints, func(c *api.Constraint) bool { return sameConstraint(c, mine) }) {
			d.Name = DeviceName + "/" + rec.Model
			d.Constraints = dropLast(d.Constraints, mine)
			if len(d.Constraints) == 0 {
				d.Constraints = nil
			}
		}
	case ModelFromConstraint:
		for i, c := range d.Constraints {
			if sameConstraint(c, mine) {
				d.Constraints[i] = &api.Constraint{LTarget: ModelTarget, Operand: rec.ModelOp, RTarget: rec.Model}
				return
			}
		}
	}
}

// userTask returns t as the user wrote it, for what reads the group's
// request: a pin's split joined (blocks.go) and its model moved back. t
// itself when the pin changed neither.
func userTask(t *api.Task, rec *Record) *api.Task {
	if t == nil || t.Resources == nil {
		return t
	}
	_, _, copies, ok := requestBlocks(t)
	renamed := rec != nil && rec.ModelAs != ""
	if !(ok && copies > 1) && !renamed {
		return t
	}
	c := cloneTask(t)
	if renamed {
		for _, d := range c.Resources.Devices {
			if isOurs(d.Name) {
				unnameModel(d, rec)
			}
		}
	}
	joinBlocks(c)
	return c
}
