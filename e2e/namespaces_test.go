package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// A namespace created after the scheduler started: Nomad's event stream
// with namespace=* covers only the namespaces of when it opened, so the
// scheduler sees nothing of a job registered there until it opens the
// stream again. It watches Nomad's namespaces: a gated job in the new
// namespace is placed within a pass, as in any other, while the full
// listing (resync_interval) would have come an hour later. Without the
// watch this test times out (liveness) with the job unseen.
func TestAJobInANamespaceCreatedLaterIsPlaced(t *testing.T) {
	e := newPCIeEnv(t, "gpushare-latens-", 70, "dc1")
	s := e.startScheduler("s1", `resync_interval = "1h"`)
	e.eventually(30*time.Second, "scheduler s1 leads", s.leader)
	logPath := filepath.Join(e.dir, "s1.log")
	e.eventually(30*time.Second, "the scheduler's event stream open", func() bool {
		b, _ := os.ReadFile(logPath)
		return strings.Contains(string(b), "event stream open")
	})

	const ns = "late"
	_, err := e.nomad.Namespaces().Register(&api.Namespace{Name: ns}, nil)
	must.NoError(t, err)
	job := e.parse("late-job", map[string]any{"shares": 25})
	job.Namespace = &[]string{ns}[0]
	start := time.Now()
	_, _, err = e.nomad.Jobs().Register(job, &api.WriteOptions{Namespace: ns})
	must.NoError(t, err)

	var pinned time.Duration
	e.eventually(time.Minute, "the job of the new namespace pinned", func() bool {
		j, _, err := e.nomad.Jobs().Info("late-job", &api.QueryOptions{Namespace: ns})
		if err != nil || len(j.TaskGroups) == 0 || j.TaskGroups[0].Meta["gpushare.placement"] == "" {
			return false
		}
		pinned = time.Since(start)
		return true
	})
	allocs := e.runningIn(ns, "late-job", 1, time.Minute)
	t.Logf("namespace created after the stream opened: job pinned %s after its registration, running after %s (resync_interval 1h)",
		pinned.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	must.SliceLen(t, 1, gpus(allocs[0]))
	must.StrContains(t, string(readFile(t, logPath)), "a namespace was created after the event stream opened")
}
