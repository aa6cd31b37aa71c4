package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/gpushare/internal/devcluster"
	"github.com/gpushare/gpushare/scheduler/service"
	"github.com/hashicorp/nomad/api"
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
	ctx, cancel := context.WithTimeout(t.Context(), liveness)
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
// queue, each GPU's stats (utilisation, memory, power: the fixture load
// of the tasks on it) and sparklines of the GPUs' and the jobs' use.
// GPUSHARE_UI_SCREENSHOT=<file> keeps its screenshot (docs/ui-gpus.png is
// made so).
func TestWebUIInABrowser(t *testing.T) {
	bin := chromium(t)
	e := newEnv(t)
	sched := e.startScheduler("s1", `observe_interval = "1s"`)
	for _, j := range []struct {
		id     string
		shares int
		model  string
		load   string // the fixture load its task declares
	}{
		{"train-bert", 25, modelH100, "sm=60,mem_util=30,mem_mib=20000,power_w=300"}, {"inference", 50, modelH100, "sm=25,mem_util=15,mem_mib=8000,power_w=90"},
		{"notebook", 30, modelV100, "sm=15,mem_mib=3000,power_w=40"}, {"eval", 40, modelV100, ""},
		{"resnet-pair", 200, modelV100, "sm=85,mem_util=40,mem_mib=12000,power_w=220"}, {"sweep", 100, modelP100, "sm=70,mem_mib=9000,power_w=180"},
	} {
		job := e.parse(j.id, map[string]any{"shares": j.shares, "model": j.model})
		if j.load != "" {
			task := job.TaskGroups[0].Tasks[0]
			if task.Env == nil {
				task.Env = map[string]string{}
			}
			task.Env["GPUSHARE_FIXTURE_LOAD"] = j.load
		}
		_, _, err := e.nomad.Jobs().Register(job, nil)
		must.NoError(t, err)
		e.running(j.id, 1, 90*time.Second)
	}
	// the scheduler reads the loaded GPU's stats, and keeps their history
	var loaded service.GPUHistory
	e.eventually(60*time.Second, "train-bert's GPU to report its load, with a history", func() bool {
		var h service.History
		var gpus service.GPUs
		if getJSON(sched.http+"/v1/history", &h) != nil || getJSON(sched.http+"/v1/gpus", &gpus) != nil {
			return false
		}
		job := false
		for _, j := range h.Jobs {
			job = job || j.Job == "train-bert" && len(j.Utilization) >= 3 && j.Utilization[len(j.Utilization)-1].Value >= 60
		}
		for _, n := range gpus.Nodes {
			for _, g := range n.GPUs {
				for _, u := range g.Users {
					if u.Job != "train-bert" || g.Stats == nil {
						continue
					}
					if g.Stats.UtilizationPct < 60 || g.Stats.MemoryUsedMiB < 20000 || g.Stats.PowerW < 300 {
						return false
					}
					for _, gh := range h.GPUs {
						if gh.UUID == g.UUID && len(gh.Utilization) >= 3 {
							loaded = gh
						}
					}
				}
			}
		}
		return job && loaded.UUID != ""
	})
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
	// the loaded GPU's stats in words and its sparkline, the job's too
	must.StrContains(t, dom, "busy · ")
	must.StrContains(t, dom, " memory used · ")
	must.StrContains(t, dom, `aria-label="GPU utilisation over the last `)
	must.Greater(t, 2, strings.Count(dom, `<svg class="spark"`))
	must.StrContains(t, dom, "<polyline points=")
	gpuRow := dom[strings.Index(dom, `title="default/train-bert/g: 25 shares`):]
	gpuRow = gpuRow[:strings.Index(gpuRow, "</li>")]
	must.StrContains(t, gpuRow, `<span class="stats">`, must.Sprintf("train-bert's GPU:\n%s", gpuRow))
	must.StrContains(t, gpuRow, " W")
	must.StrContains(t, gpuRow, "job's GPU utilisation over the last ")

	job := browse(t, bin, sched.http+"/ui/jobs/train-bert?namespace=default", "--dump-dom")
	must.StrContains(t, job, `<span class="badge pinned">pinned</span>`)
	must.StrContains(t, job, "25 shares")
	must.StrContains(t, job, "Running where gpushare placed it.")
	must.StrContains(t, job, `<p class="live"><span class="sparkline"><svg class="spark"`)
	must.StrContains(t, job, `<span class="spark-label">job's GPU utilisation %, last `)

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

// On a cluster with ACLs and http_require_token, the page asks for a
// token, checks it with Nomad, and shows a token of another namespace
// none of this namespace's jobs, on the page nor in /v1/gpus: their
// shares are used by another namespace.
func TestWebUIShowsATokenWhatItMayRead(t *testing.T) {
	e := newEnvWith(t, devcluster.Options{ACL: true})
	e.nomadHCL = fmt.Sprintf("  token = %q\n", e.c.ManagementToken())
	_, err := e.nomad.Namespaces().Register(&api.Namespace{Name: "team-b"}, nil)
	must.NoError(t, err)
	readers := map[string]string{}
	for _, ns := range []string{"default", "team-b"} {
		must.NoError(t, e.c.ApplyPolicy("read-"+ns, "reads "+ns, fmt.Sprintf("namespace %q {\n  policy = \"read\"\n}\nnode {\n  policy = \"read\"\n}\n", ns)))
		readers[ns], err = e.c.CreateToken("reader-"+ns, "read-"+ns)
		must.NoError(t, err)
	}
	sched := e.startScheduler("s1", "http_require_token = true")
	e.register("ui-secret", map[string]any{"shares": 25})
	e.running("ui-secret", 1, 90*time.Second)

	gpus := func(token string) string {
		req, err := http.NewRequest("GET", sched.http+"/v1/gpus", nil)
		must.NoError(t, err)
		req.Header.Set("X-Nomad-Token", token)
		resp, err := http.DefaultClient.Do(req)
		must.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		must.NoError(t, err)
		must.EqOp(t, http.StatusOK, resp.StatusCode, must.Sprint(string(b)))
		return string(b)
	}
	e.eventually(30*time.Second, "the scheduler's map to show ui-secret", func() bool {
		return strings.Contains(gpus(readers["default"]), "ui-secret")
	})
	// page signs in with the form, as a browser does, and returns /ui
	page := func(token string) (int, string) {
		jar, err := cookiejar.New(nil)
		must.NoError(t, err)
		c := &http.Client{Jar: jar, Timeout: 30 * time.Second}
		resp, err := c.PostForm(sched.http+"/ui/login", url.Values{"token": {token}})
		must.NoError(t, err)
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		must.NoError(t, err)
		return resp.StatusCode, string(b)
	}

	code, body := page(readers["default"])
	must.EqOp(t, http.StatusOK, code, must.Sprint(body))
	must.StrContains(t, body, `title="default/ui-secret/g: 25 shares`)
	must.StrContains(t, body, "Sign out")

	code, body = page(readers["team-b"])
	must.EqOp(t, http.StatusOK, code, must.Sprint(body))
	must.StrNotContains(t, body, "ui-secret")
	must.StrContains(t, body, "25 shares used by another namespace")
	other := gpus(readers["team-b"])
	must.StrNotContains(t, other, "ui-secret")
	must.StrContains(t, other, `"other_namespace": true`)

	code, body = page("00000000-0000-0000-0000-000000000000")
	must.EqOp(t, http.StatusUnauthorized, code)
	must.StrContains(t, body, "Nomad does not know this token")
	resp, err := http.Get(sched.http + "/ui")
	must.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	must.NoError(t, err)
	must.EqOp(t, http.StatusUnauthorized, resp.StatusCode) // the token form
	must.StrContains(t, string(b), `<form method="post" action="/ui/login">`)
	must.StrNotContains(t, string(b), "ui-secret")
}

// The demo's example jobs declare fixture loads (GPUSHARE_FIXTURE_LOAD):
// the notebook, which declares no profile, is learned from its GPU's
// stats as a non-zero profile, and the page shows its GPU at work and the
// inference job's use over time.
func TestWebUIDemoExamplesShowWork(t *testing.T) {
	bin := chromium(t)
	e := newEnv(t)
	sched := e.startScheduler("s1", `observe_interval = "1s"`)
	for _, name := range []string{"notebook-opportunistic", "inference-quarter"} {
		path := filepath.Join("..", "jobspecs", "examples", name+".nomad.hcl")
		out, err := exec.Command(cliBin, "job", "run", "-address", e.c.Address(), "-timeout", liveness.String(), path).CombinedOutput()
		must.NoError(t, err, must.Sprintf("gpushare job run %s:\n%s", name, out))
	}
	var notebook service.GroupStatus
	e.eventually(90*time.Second, "the notebook's profile to be learned from its load", func() bool {
		var st service.JobStatus
		if getJSON(sched.http+"/v1/jobs/notebook?namespace=default", &st) != nil || len(st.Groups) != 1 {
			return false
		}
		notebook = st.Groups[0]
		return notebook.Profile != nil && notebook.Profile.Name == "learned" && notebook.Profile.SM > 0 && notebook.Profile.MemBW > 0
	})
	// the average of what was observed alone: sm=15, mem_util=10 since the
	// task's processes were seen (0 before)
	must.LessEq(t, 0.15, notebook.Profile.SM)
	must.LessEq(t, 0.10, notebook.Profile.MemBW)
	e.eventually(60*time.Second, "the inference job's use in the history", func() bool {
		var h service.History
		if getJSON(sched.http+"/v1/history", &h) != nil {
			return false
		}
		for _, j := range h.Jobs {
			if j.Job == "inference" && len(j.Utilization) >= 2 {
				return j.Utilization[len(j.Utilization)-1].Value >= 60 // 2 × sm=30
			}
		}
		return false
	})
	dom := browse(t, bin, sched.http+"/ui", "--dump-dom")
	at := strings.Index(dom, `title="default/notebook/jupyter: 10 shares`)
	must.Positive(t, at, must.Sprintf("page:\n%s", dom))
	row := dom[at:]
	row = row[:strings.Index(row, "</li>")]
	must.StrContains(t, row, `<span class="stats">`)
	must.StrNotContains(t, row, `<span class="stats">0% busy`, must.Sprintf("the notebook's GPU:\n%s", row))
	must.StrNotContains(t, row, ` 0 W</span>`)
	job := browse(t, bin, sched.http+"/ui/jobs/notebook?namespace=default", "--dump-dom")
	must.StrContains(t, job, "<dt>Interference profile</dt><dd>learned (SM 0.")
	must.StrNotContains(t, job, "learned (SM 0.00")
	must.StrContains(t, job, `<p class="live"><span class="sparkline"><svg class="spark"`)
	must.StrContains(t, job, `<span class="spark-label">job's GPU utilisation %, last `)
}
