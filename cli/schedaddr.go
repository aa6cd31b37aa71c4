package cli

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/hashicorp/nomad/api"
)

// How the CLI finds the scheduler, as Nomad's CLI finds Nomad: a flag, else
// an environment variable, else the Nomad service the shipped scheduler job
// registers, else the scheduler's default address on this machine.
const (
	// EnvSchedulerAddr is the scheduler's HTTP address (like NOMAD_ADDR).
	EnvSchedulerAddr = "GPUSHARE_ADDR"
	// EnvSchedulerToken is the Nomad ACL token sent to a scheduler whose
	// API requires one (http_require_token); NOMAD_TOKEN when unset.
	EnvSchedulerToken = "GPUSHARE_TOKEN"
	// SchedulerService is the Nomad service (provider "nomad") the shipped
	// scheduler job registers (deploy/nomad/gpushare-scheduler.nomad.hcl).
	SchedulerService = "gpushare-scheduler"
	// defaultSchedulerAddr is http_address's default.
	defaultSchedulerAddr = "http://127.0.0.1:8646"
)

// schedulerFlag is the -scheduler flag: it knows whether it was given, so
// that `-scheduler ""` (skip the scheduler) differs from no flag at all.
type schedulerFlag struct {
	value string
	set   bool
}

func (f *schedulerFlag) String() string { return f.value }

func (f *schedulerFlag) Set(v string) error {
	f.value, f.set = v, true
	return nil
}

// addSchedulerFlag declares -scheduler on fs; purpose ends the help line.
func addSchedulerFlag(fs *flag.FlagSet, purpose string) *schedulerFlag {
	f := &schedulerFlag{}
	fs.Var(f, "scheduler", "the gpushare scheduler's HTTP address, "+purpose+
		" (default: $"+EnvSchedulerAddr+", else the Nomad service "+SchedulerService+", else "+defaultSchedulerAddr+`; "" to skip)`)
	return f
}

// scheduler is where the CLI reaches the scheduler, and how it found it.
type scheduler struct {
	addr string // "" when skipped
	how  string // "-scheduler", "$GPUSHARE_ADDR", "Nomad service ...", "the default"
}

// hint says how to point a command at the scheduler, for error messages.
func (s scheduler) hint() string {
	return fmt.Sprintf("the scheduler at %s (%s) did not answer; set %s or pass -scheduler <its http_address>", s.addr, s.how, EnvSchedulerAddr)
}

// resolve finds the scheduler. nomadAddr is the command's -address ("":
// $NOMAD_ADDR or Nomad's default), used only to look up the service.
func (f *schedulerFlag) resolve(nomadAddr string) scheduler {
	if f.set {
		return scheduler{addr: f.value, how: "-scheduler"}
	}
	if v := os.Getenv(EnvSchedulerAddr); v != "" {
		return scheduler{addr: v, how: "$" + EnvSchedulerAddr}
	}
	if addr, how, err := discover(nomadAddr); err == nil {
		return scheduler{addr: addr, how: how}
	}
	return scheduler{addr: defaultSchedulerAddr, how: "the default; no " + EnvSchedulerAddr + " and no Nomad service " + SchedulerService + " found"}
}

// errNoService: Nomad answered, and has no instance of the service.
var errNoService = errors.New("no " + SchedulerService + " service registered in Nomad")

// discover looks the scheduler's service up in Nomad's service catalogue
// (every namespace the token may read) and returns the leader's address,
// else the first instance that answers, else the first instance.
func discover(nomadAddr string) (string, string, error) {
	cfg := api.DefaultConfig()
	if nomadAddr != "" {
		cfg.Address = nomadAddr
	}
	cfg.HttpClient = &http.Client{Timeout: 30 * time.Second} // against a hang, not a slow machine
	client, err := api.NewClient(cfg)
	if err != nil {
		return "", "", err
	}
	lists, _, err := client.Services().List(&api.QueryOptions{Namespace: "*"})
	if err != nil {
		return "", "", err
	}
	var regs []*api.ServiceRegistration
	for _, l := range lists {
		for _, s := range l.Services {
			if s.ServiceName != SchedulerService {
				continue
			}
			r, _, err := client.Services().Get(SchedulerService, &api.QueryOptions{Namespace: l.Namespace})
			if err != nil {
				return "", "", err
			}
			regs = append(regs, r...)
		}
	}
	if len(regs) == 0 {
		return "", "", errNoService
	}
	addrOf := func(r *api.ServiceRegistration) string {
		return "http://" + net.JoinHostPort(r.Address, strconv.Itoa(r.Port)) // brackets IPv6
	}
	how := func(r *api.ServiceRegistration, role string) string {
		return fmt.Sprintf("Nomad service %s in namespace %s, %s, allocation %.8s", SchedulerService, r.Namespace, role, r.AllocID)
	}
	var answered *api.ServiceRegistration
	for _, r := range regs {
		addr := addrOf(r)
		var h struct {
			Leader bool `json:"leader"`
		}
		if err := getJSON(addr+"/v1/health", &h); err != nil {
			continue
		}
		if h.Leader {
			return addr, how(r, "the leader"), nil
		}
		if answered == nil {
			answered = r
		}
	}
	if answered != nil {
		return addrOf(answered), how(answered, "no leader answered"), nil
	}
	r := regs[0]
	return addrOf(r), how(r, "not answering"), nil
}

// schedulerToken is what getJSON sends the scheduler.
func schedulerToken() string {
	if t := os.Getenv(EnvSchedulerToken); t != "" {
		return t
	}
	return os.Getenv("NOMAD_TOKEN")
}

// getJSON reads a scheduler endpoint, with the token when there is one.
func getJSON(url string, out any) error {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if t := schedulerToken(); t != "" {
		req.Header.Set("X-Nomad-Token", t)
	}
	c := &http.Client{Timeout: 30 * time.Second} // against a hang, not a slow machine
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&e)
		if e.Error != "" {
			return fmt.Errorf("%s: %s: %s", url, resp.Status, e.Error)
		}
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}
