package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/gpushare/scheduler/service"
	"github.com/shoenig/test/must"
)

// chromium finds a headless browser: skipped without one, but never in CI
// (.ci/run installs Debian's chromium).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("no chromium in CI: .ci/run installs it (apt-get install chromium)")
	}
	t.Skip("no chromium on PATH (apt-get install chromium)")
	return ""
}

// browse runs headless Chromium on url with args (--dump-dom,
// --screenshot=...) and returns what it printed.
func browse(t *testing.T, bin, url string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	all := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--user-data-dir=" + t.TempDir(),
		"--window-size=1400,1000", "--hide-scrollbars"}, args...)
	cmd := exec.CommandContext(ctx, bin, append(all, url)...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.Dir = t.TempDir()
	must.NoError(t, cmd.Run(), must.Sprintf("chromium %s:\n%s", url, errb.String()))
	return out.String()
}

// The scheduler's page, opened in a browser, shows a running fractional
// job on its GPU and a waiting group with its reason and place in the
// queue. GPUSHARE_UI_SCREENSHOT=<file> keeps its screenshot (docs/ui.png
// is made so).
func TestWebUIInABrowser(t *testing.T) {
	bin := chromium(t)
	e := newEnv(t)
	sched := e.startScheduler("s1", "")
	for _, j := range []struct {
		id     string
		shares int
		model  string
	}{
		{"train-bert", 25, modelH100}, {"inference", 50, modelH100}, {"notebook", 30, modelV100}, {"eval", 40, modelV100},
		{"resnet-pair", 200, modelV100}, {"sweep", 100, modelP100},
	} {
		e.register(j.id, map[string]any{"shares": j.shares, "model": j.model})
		e.running(j.id, 1, 90*time.Second)
	}
	// eight whole H100s wait while fractions run on the H100 node
	e.register("llm-finetune", map[string]any{"shares": 800, "model": modelH100})
	var waiting service.Waiting
	e.eventually(60*time.Second, "llm-finetune to wait with its place in the queue", func() bool {
		var groups []service.Waiting
		if getJSON(sched.http+"/v1/groups", &groups) != nil {
			return false
		}
		for _, g := range groups {
			if g.Job == "llm-finetune" && g.Position > 0 {
				waiting = g
				return true
			}
		}
		return false
	})

	dom := browse(t, bin, sched.http+"/", "--dump-dom") // / redirects to /ui
	for _, want := range []string{
		"GPUs and queue", "h100", "dgx1", "pcie",
		// the fractional job on its GPU's bar, with a link to its page
		`title="default/train-bert/g: 25 shares`, `href="/ui/jobs/train-bert?namespace=default"`,
		// the waiting group with its reason and place
		`<a href="/ui/jobs/llm-finetune?namespace=default">llm-finetune</a>/g`,
		fmt.Sprintf(`<td class="pos">%d of %d</td>`, waiting.Position, waiting.Of),
	} {
		must.StrContains(t, dom, want, must.Sprintf("page:\n%s", dom))
	}
	reason := strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(waiting.Reason)
	must.StrContains(t, dom, reason)

	job := browse(t, bin, sched.http+"/ui/jobs/train-bert?namespace=default", "--dump-dom")
	must.StrContains(t, job, `<span class="badge pinned">pinned</span>`)
	must.StrContains(t, job, "25 shares")

	shot := filepath.Join(t.TempDir(), "ui.png")
	if keep := os.Getenv("GPUSHARE_UI_SCREENSHOT"); keep != "" {
		abs, err := filepath.Abs(keep)
		must.NoError(t, err)
		shot = abs
		t.Logf("screenshot in %s", shot)
	}
	browse(t, bin, sched.http+"/ui", "--screenshot="+shot)
	st, err := os.Stat(shot)
	must.NoError(t, err)
	must.Greater(t, 10000, st.Size())
}
