package webui

// stateWords says where a group stands in plain words: its lifecycle
// state when the scheduler's last pass found one, else its gpushare
// state.
func stateWords(state, lifecycle string) string {
	switch lifecycle {
	case "template":
		return "A template: Nomad never places it; the jobs it launches or dispatches are placed as they come."
	case "stopped":
		return "Stopped: the job is stopped or the group scaled to zero."
	case "waiting":
		return "Waiting for gpushare to place it."
	case "pinned-unplaced":
		return "Placed by gpushare; Nomad has yet to start some of its allocations there."
	case "running":
		return "Running where gpushare placed it."
	case "scaling":
		return "Scaling up: gpushare places the allocations its new count adds."
	case "canarying":
		return "Deploying a new version: its canaries run beside the allocations they replace."
	case "migrating":
		return "Moving: the GPUs or the node it was placed on went away, so gpushare places it again."
	case "done":
		return "Done: its batch run completed."
	case "not-gpushare":
		return "Not followed by gpushare: Nomad alone places it."
	}
	switch state {
	case "pinned":
		return "Placed by gpushare."
	case "pending":
		return "Waiting for gpushare to place it."
	case "refused":
		return "Refused: no state of this cluster could hold it."
	case "template":
		return "A template: Nomad never places it; the jobs it launches or dispatches are placed as they come."
	case "not-gpushare":
		return "Not followed by gpushare: Nomad alone places it."
	}
	return state
}
