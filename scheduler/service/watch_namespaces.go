package service

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/hashicorp/nomad/api"
)

// Namespaces created after the event stream opened. Nomad's event stream
// with namespace=* covers the namespaces that exist when it is opened
// (nomad/event_endpoint.go, validateACL: "*" is replaced by the names in
// the state store then; stream.SubscribeRequest.Namespaces is fixed for
// the subscription), and no topic announces a new namespace. Without
// more, every job and allocation of a new namespace would be unseen until
// the next full listing (resync_interval), a gated job there waiting with
// no reason anywhere. So while the stream is open the watcher watches
// Nomad's namespaces (a blocking query from the index they were listed at
// before the stream opened), and a namespace that was not there ends the
// stream: the cluster is listed again and the stream, opened again from
// the last index, covers it (its events since are replayed from Nomad's
// buffer, and the listing shows them anyway).

// nsWait is how long one blocking query on the namespaces waits at most
// (Nomad answers sooner when they change).
const nsWait = 5 * time.Minute

// streamNamespaces lists the namespaces before the stream opens. On an
// error it says so and returns ok false: the stream is opened without
// the watch, and new namespaces are seen at the next full listing.
func (w *watcher) streamNamespaces(ctx context.Context) (names []string, index uint64, ok bool) {
	names, index, err := w.nomad.Namespaces(ctx, 0)
	if err != nil {
		if ctx.Err() == nil {
			w.log.Warn("cannot list Nomad's namespaces: jobs in a namespace created from now on are seen at the next full listing (resync_interval)", "error", err)
		}
		return nil, 0, false
	}
	return names, index, true
}

// newNamespace reports on the channel it returns the first namespace
// that is not among known (listed at index), then ends; it ends with ctx.
func (w *watcher) newNamespace(ctx context.Context, known []string, index uint64) <-chan string {
	out := make(chan string, 1)
	go func() {
		var backoff time.Duration
		for ctx.Err() == nil {
			names, next, err := w.nomad.Namespaces(ctx, index)
			if err == nil && next == 0 {
				err = errNoIndex
			}
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				backoff = nextBackoff(backoff)
				w.log.Debug("cannot watch Nomad's namespaces; trying again", "error", err, "retry_in", backoff)
				sleep(ctx, backoff)
				continue
			}
			backoff = 0
			for _, n := range names {
				if !slices.Contains(known, n) {
					out <- n
					return
				}
			}
			index = next // lower after a snapshot restore: Nomad answers at once, and the next query waits from there
		}
	}()
	return out
}

// errNoIndex: Nomad answered a blocking query without an index.
var errNoIndex = errors.New("Nomad answered the namespaces' listing without an index")

// Namespaces lists the names of Nomad's namespaces; with index > 0 it
// waits (a blocking query, up to nsWait) until they change past it.
func (n nomadClient) Namespaces(ctx context.Context, index uint64) ([]string, uint64, error) {
	wait := time.Duration(0)
	if index > 0 {
		wait = nsWait
	}
	ctx, cancel := context.WithTimeout(ctx, wait+max(n.timeout, 30*time.Second))
	defer cancel()
	list, meta, err := n.c.Namespaces().List((&api.QueryOptions{WaitIndex: index, WaitTime: wait}).WithContext(ctx))
	if err != nil {
		return nil, 0, err
	}
	names := make([]string, 0, len(list))
	for _, ns := range list {
		names = append(names, ns.Name)
	}
	return names, meta.LastIndex, nil
}
