package service

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/hashicorp/nomad/api"
)

// ErrConflict is returned by Register when the job changed since it was
// read (EnforceIndex failed): someone else registered a new version.
var ErrConflict = errors.New("job changed since it was read")

// errJobGone is a pin's read of its job answered 404: the job was purged
// after it was decided, and there is nothing to pin.
var errJobGone = errors.New("the job is gone")

// nomadAPI is the part of Nomad the service uses.
type nomadAPI interface {
	// NodeList lists the nodes' stubs; Node reads one in full.
	NodeList(ctx context.Context) ([]*api.NodeListStub, uint64, error)
	Node(ctx context.Context, id string) (*api.Node, error)
	// JobList lists the stubs of the jobs of a namespace ("*" for all);
	// Job reads one in full.
	JobList(ctx context.Context, namespace string) ([]*api.JobListStub, uint64, error)
	Job(ctx context.Context, namespace, id string) (*api.Job, error)
	// Allocs lists the allocations of a namespace ("*" for all) with
	// their allocated resources.
	Allocs(ctx context.Context, namespace string) ([]*api.Allocation, uint64, error)
	Alloc(ctx context.Context, id string) (*api.Allocation, error)
	// FailedEvals lists the evaluations of a namespace ("*" for all) in
	// which Nomad could not place some group.
	FailedEvals(ctx context.Context, namespace string) ([]*api.Evaluation, error)
	// Namespaces lists the names of the namespaces, waiting with index > 0
	// until they change past it (watch_namespaces.go).
	Namespaces(ctx context.Context, index uint64) ([]string, uint64, error)
	// Register re-registers job if its modify index is still index, and
	// returns the new version's modify index (0 when Nomad did not say).
	Register(ctx context.Context, job *api.Job, index uint64) (uint64, error)
	// DeviceStats reads the latest device stats of a node's client: the
	// stats the gpushare plugin reports for every share.
	DeviceStats(ctx context.Context, nodeID string) ([]*api.DeviceGroupStats, error)
	// LatestDeployment is a job's latest deployment (nil: none);
	// PromoteAll promotes every canary group of a deployment.
	LatestDeployment(ctx context.Context, namespace, jobID string) (*api.Deployment, error)
	PromoteAll(ctx context.Context, namespace, deploymentID string) error
	// StopAlloc stops an allocation; Nomad places a replacement, which a
	// gated group keeps waiting.
	StopAlloc(ctx context.Context, id string) error
	// Stream subscribes to the job, allocation, node and deployment events
	// from index on, of one namespace or "*" (node events have none).
	Stream(ctx context.Context, index uint64, namespace string) (<-chan *api.Events, error)
	Client() *api.Client
	// ReadVar reads the items of a Nomad Variable (nil when there is none);
	// WriteVar writes them (no items: deletes the variable).
	ReadVar(ctx context.Context, path string) (map[string]string, error)
	WriteVar(ctx context.Context, path string, items map[string]string) error
	// Authorize asks Nomad whether an ACL token may read scope (auth.go).
	Authorize(ctx context.Context, token string, scope authScope) error
}

type nomadClient struct {
	c *api.Client
	// timeout bounds each request but the event stream (request_timeout).
	timeout time.Duration
}

// bound gives one request its deadline.
func (n nomadClient) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if n.timeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, n.timeout)
}

var _ nomadAPI = nomadClient{}

func (n nomadClient) Client() *api.Client { return n.c }

func q(ctx context.Context, namespace string) *api.QueryOptions {
	return (&api.QueryOptions{Namespace: namespace}).WithContext(ctx)
}

func (n nomadClient) NodeList(ctx context.Context) ([]*api.NodeListStub, uint64, error) {
	var stubs []*api.NodeListStub
	var meta *api.QueryMeta
	ctx, cancel := n.bound(ctx)
	defer cancel()
	err := retried(ctx, func() (err error) {
		stubs, meta, err = n.c.Nodes().List(q(ctx, ""))
		return err
	})
	if err != nil {
		return nil, 0, err
	}
	return stubs, meta.LastIndex, nil
}

func (n nomadClient) Node(ctx context.Context, id string) (*api.Node, error) {
	ctx, cancel := n.bound(ctx)
	defer cancel()
	var node *api.Node
	err := retried(ctx, func() (err error) {
		node, _, err = n.c.Nodes().Info(id, (&api.QueryOptions{}).WithContext(ctx))
		return err
	})
	return node, err
}

func (n nomadClient) JobList(ctx context.Context, namespace string) ([]*api.JobListStub, uint64, error) {
	var stubs []*api.JobListStub
	var meta *api.QueryMeta
	ctx, cancel := n.bound(ctx)
	defer cancel()
	err := retried(ctx, func() (err error) {
		stubs, meta, err = n.c.Jobs().List(q(ctx, namespace))
		return err
	})
	if err != nil {
		return nil, 0, err
	}
	return stubs, meta.LastIndex, nil
}

func (n nomadClient) Job(ctx context.Context, namespace, id string) (*api.Job, error) {
	ctx, cancel := n.bound(ctx)
	defer cancel()
	var job *api.Job
	err := retried(ctx, func() (err error) {
		job, _, err = n.c.Jobs().Info(id, (&api.QueryOptions{Namespace: namespace}).WithContext(ctx))
		return err
	})
	return job, err
}

func (n nomadClient) Allocs(ctx context.Context, namespace string) ([]*api.Allocation, uint64, error) {
	ctx, cancel := n.bound(ctx)
	defer cancel()
	qo := q(ctx, namespace)
	qo.Params = map[string]string{"resources": "true"}
	var stubs []*api.AllocationListStub
	var meta *api.QueryMeta
	err := retried(ctx, func() (err error) {
		stubs, meta, err = n.c.Allocations().List(qo)
		return err
	})
	if err != nil {
		return nil, 0, err
	}
	out := make([]*api.Allocation, 0, len(stubs))
	for _, s := range stubs {
		out = append(out, model.FromStub(s))
	}
	return out, meta.LastIndex, nil
}

func (n nomadClient) Alloc(ctx context.Context, id string) (*api.Allocation, error) {
	ctx, cancel := n.bound(ctx)
	defer cancel()
	var a *api.Allocation
	err := retried(ctx, func() (err error) {
		a, _, err = n.c.Allocations().Info(id, (&api.QueryOptions{}).WithContext(ctx))
		return err
	})
	return a, err
}

func (n nomadClient) FailedEvals(ctx context.Context, namespace string) ([]*api.Evaluation, error) {
	ctx, cancel := n.bound(ctx)
	defer cancel()
	var evals []*api.Evaluation
	err := retried(ctx, func() (err error) {
		qo := q(ctx, namespace)
		qo.Filter = "FailedTGAllocs is not empty"
		evals, _, err = n.c.Evaluations().List(qo)
		return err
	})
	return evals, err
}

func (n nomadClient) DeviceStats(ctx context.Context, nodeID string) ([]*api.DeviceGroupStats, error) {
	ctx, cancel := n.bound(ctx)
	defer cancel()
	hs, err := n.c.Nodes().Stats(nodeID, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return nil, err
	}
	return hs.DeviceStats, nil
}

func (n nomadClient) LatestDeployment(ctx context.Context, namespace, jobID string) (*api.Deployment, error) {
	ctx, cancel := n.bound(ctx)
	defer cancel()
	var d *api.Deployment
	err := retried(ctx, func() (err error) {
		d, _, err = n.c.Jobs().LatestDeployment(jobID, q(ctx, namespace))
		return err
	})
	return d, err
}

func (n nomadClient) PromoteAll(ctx context.Context, namespace, deploymentID string) error {
	ctx, cancel := n.bound(ctx)
	defer cancel()
	_, _, err := n.c.Deployments().PromoteAll(deploymentID, (&api.WriteOptions{Namespace: namespace}).WithContext(ctx))
	return err
}

func (n nomadClient) StopAlloc(ctx context.Context, id string) error {
	ctx, cancel := n.bound(ctx)
	defer cancel()
	a, _, err := n.c.Allocations().Info(id, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return err
	}
	_, err = n.c.Allocations().Stop(a, (&api.QueryOptions{Namespace: a.Namespace}).WithContext(ctx))
	return err
}

func (n nomadClient) Register(ctx context.Context, job *api.Job, index uint64) (uint64, error) {
	ctx, cancel := n.bound(ctx)
	defer cancel()
	wo := (&api.WriteOptions{}).WithContext(ctx)
	if job.Namespace != nil {
		wo.Namespace = *job.Namespace
	}
	resp, _, err := n.c.Jobs().RegisterOpts(job, &api.RegisterOptions{EnforceIndex: true, ModifyIndex: index}, wo)
	if err != nil {
		if isConflict(err) {
			return 0, errors.Join(ErrConflict, err)
		}
		return 0, err
	}
	return resp.JobModifyIndex, nil
}

func (n nomadClient) Stream(ctx context.Context, index uint64, namespace string) (<-chan *api.Events, error) {
	topics := map[api.Topic][]string{
		api.TopicJob: {"*"}, api.TopicAllocation: {"*"}, api.TopicNode: {"*"}, api.TopicDeployment: {"*"},
		api.TopicEvaluation: {"*"}, // failed placements: a pin Nomad cannot place is decided again
	}
	return n.c.EventStream().Stream(ctx, topics, index, &api.QueryOptions{Namespace: namespace})
}

// isConflict recognises Nomad's EnforceIndex refusal, which the HTTP API
// reports only as text ("job exists with conflicting job modify index").
func isConflict(err error) bool {
	var ue api.UnexpectedResponseError
	if errors.As(err, &ue) && ue.StatusCode() != http.StatusBadRequest && ue.StatusCode() != http.StatusInternalServerError {
		return false
	}
	return strings.Contains(err.Error(), "conflicting job modify index") || strings.Contains(err.Error(), "job not found for index")
}

func isNotFound(err error) bool { return isStatus(err, http.StatusNotFound) }

// isStatus reports whether Nomad answered with this HTTP status.
func isStatus(err error, code int) bool {
	var ue api.UnexpectedResponseError
	return errors.As(err, &ue) && ue.StatusCode() == code
}

func (n nomadClient) ReadVar(ctx context.Context, path string) (map[string]string, error) {
	ctx, cancel := n.bound(ctx)
	defer cancel()
	v, _, err := n.c.Variables().Read(path, (&api.QueryOptions{}).WithContext(ctx))
	if errors.Is(err, api.ErrVariablePathNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return v.Items, nil
}

func (n nomadClient) WriteVar(ctx context.Context, path string, items map[string]string) error {
	ctx, cancel := n.bound(ctx)
	defer cancel()
	wo := (&api.WriteOptions{}).WithContext(ctx)
	if len(items) == 0 {
		_, err := n.c.Variables().Delete(path, wo)
		return err
	}
	_, _, err := n.c.Variables().Create(&api.Variable{Path: path, Items: items}, wo)
	return err
}

// retried runs an idempotent read again when Nomad failed to answer it (a
// 5xx, a dropped connection), up to 5 times with backoff from 100ms: a full
// listing makes hundreds of reads, and one failure among them would
// otherwise throw the whole listing away. Answers that say no (404, 403)
// are final.
func retried(ctx context.Context, read func() error) error {
	wait := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := read()
		if err == nil || attempt == 5 || ctx.Err() != nil || !transient(err) {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		wait *= 2
	}
}

// transient reports whether a failed read is worth trying again.
func transient(err error) bool {
	var ue api.UnexpectedResponseError
	if errors.As(err, &ue) {
		return ue.StatusCode() >= 500 || ue.StatusCode() == http.StatusTooManyRequests
	}
	return !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}
