package service

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gpushare/gpushare/scheduler/config"
	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// Namespaces lists "default" and the namespaces created; with index > 0
// it waits until one is created past it, as Nomad's blocking query does.
func (f *fakeNomad) Namespaces(ctx context.Context, index uint64) ([]string, uint64, error) {
	for {
		f.mu.Lock()
		names, at, err := append([]string{"default"}, f.namespaces...), f.nsIndex+1, f.nsErr
		f.mu.Unlock()
		if err != nil {
			return nil, 0, err
		}
		if index == 0 || at > index {
			return names, at, nil
		}
		select {
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// createNamespace creates a namespace.
func (f *fakeNomad) createNamespace(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.index++
	f.namespaces = append(f.namespaces, name)
	f.nsIndex = f.index
}

// A namespace created after the event stream opened is not covered by it
// (Nomad fixes a namespace=* subscription's namespaces when it opens), so
// a gated job registered there sends no event the stream delivers. The
// watcher sees the namespace, lists the cluster again and opens the
// stream again: the job is in the model and the next pass places it, long
// before the full listing of resync_interval (an hour here). Without the
// watch it waited unseen, with no reason anywhere.
func TestAJobInANewNamespaceIsPlacedWithinAPass(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	cfg := config.Default()
	cfg.ResyncInterval = "1h"
	w := startWatch(t, f, cfg)
	first := w.next()
	must.NoError(t, w.s.records.loadSecret(t.Context(), true))
	must.NoError(t, w.s.records.loadState(t.Context(), true))

	f.createNamespace("team-new")
	j := gated("fresh", 100)
	j.Namespace = ptr("team-new")
	f.put(j) // its event is not on the stream: the stream does not cover team-new
	again := w.next()
	must.Eq(t, "*", again.ns)
	must.GreaterEq(t, first.from, again.from, must.Sprint("opened again from the index listed since"))
	must.NotNil(t, w.job("team-new/fresh"), must.Sprint("the job of the new namespace is not in the model"))

	w.s.loop.reconcile(t.Context())
	f.mu.Lock()
	_, pinned := pin.ParseRecord(f.jobs["fresh"], "g")
	f.mu.Unlock()
	must.True(t, pinned, must.Sprint(w.s.loop.answers.pending[decide.Key{Namespace: "team-new", Job: "fresh", Group: "g"}]))
}

// A token that may not list namespaces (or a Nomad that fails to) costs
// only the watch: the stream still opens, on every namespace of when it
// opened, and a gated job there is placed; jobs of a namespace created
// later wait for the full listing, which the log says.
func TestNamespacesNomadWillNotListCostOnlyTheWatch(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}, nsErr: errors.New("Permission denied")}
	cfg := config.Default()
	cfg.ResyncInterval = "1h"
	w := startWatch(t, f, cfg)
	first := w.next()
	must.Eq(t, "*", first.ns)
	must.NoError(t, w.s.records.loadSecret(t.Context(), true))
	must.NoError(t, w.s.records.loadState(t.Context(), true))

	j := gated("here", 100)
	f.put(j)
	w.send(first, jobEvent(t, j))
	must.NotNil(t, w.job("default/here"), must.Sprint("the stream delivers the default namespace's job"))
	w.quiet() // the failing watch neither ends the stream nor lists again
	w.s.loop.reconcile(t.Context())
	f.mu.Lock()
	_, pinned := pin.ParseRecord(f.jobs["here"], "g")
	f.mu.Unlock()
	must.True(t, pinned, must.Sprint(w.s.loop.answers.pending[decide.Key{Namespace: "default", Job: "here", Group: "g"}]))
}
