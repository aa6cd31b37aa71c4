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
	"strings"
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
	addr  string // "" when skipped
	how   string // "-scheduler", "$GPUSHARE_ADDR", "Nomad service ...", "the default"
	token string // sent as X-Nomad-Token: $GPUSHARE_TOKEN, else Nomad's token
	// lookup is why finding the service through Nomad failed, when the
	// default address is used for want of it
	lookup error
}

// hint says that the scheduler did not answer and how to point a command
// at it, for error messages: first what went wrong looking it up in
// Nomad, when that is why the default address was tried.
func (s scheduler) hint() string {
	var ue api.UnexpectedResponseError
	switch {
	case s.lookup == nil || errors.Is(s.lookup, errNoService):
	case errors.As(s.lookup, &ue) && (ue.StatusCode() == http.StatusForbidden || ue.StatusCode() == http.StatusUnauthorized):
		return fmt.Sprintf("Nomad refused the token when asked for the service %s (%d %s), so the scheduler was looked for at the default address %s, and it did not answer: "+
			"set NOMAD_TOKEN (or -token) to a token that may read the scheduler's namespace (read-job), or set %s or pass -scheduler <its http_address>",
			SchedulerService, ue.StatusCode(), nomadError(ue), s.addr, EnvSchedulerAddr)
	case errors.As(s.lookup, &ue):
		return fmt.Sprintf("Nomad answered %d %s when asked for the service %s, so the scheduler was looked for at the default address %s, and it did not answer: set %s or pass -scheduler <its http_address>",
			ue.StatusCode(), nomadError(ue), SchedulerService, s.addr, EnvSchedulerAddr)
	default:
		return fmt.Sprintf("Nomad did not answer when asked for the service %s (%v), so the scheduler was looked for at the default address %s, and it did not answer: "+
			"set NOMAD_ADDR (or -address) to reach Nomad, or set %s or pass -scheduler <its http_address>",
			SchedulerService, s.lookup, s.addr, EnvSchedulerAddr)
	}
	return fmt.Sprintf("the scheduler at %s (%s) did not answer; set %s or pass -scheduler <its http_address>", s.addr, s.how, EnvSchedulerAddr)
}

// nomadError is the text of Nomad's error answer, on one line.
func nomadError(ue api.UnexpectedResponseError) string {
	body := strings.Join(strings.Fields(ue.Body()), " ")
	if body == "" {
		return http.StatusText(ue.StatusCode())
	}
	return body
}

// why says what went wrong asking the scheduler (err from get): it did
// not answer (hint), it refused the token, or it answered an error.
func (s scheduler) why(err error) string {
	var se *statusError
	if !errors.As(err, &se) {
		return fmt.Sprintf("%s (%v)", s.hint(), err)
	}
	switch se.code {
	case http.StatusUnauthorized, http.StatusForbidden:
		tok := "no token was sent: set " + EnvSchedulerToken + " or NOMAD_TOKEN (or -token)"
		if s.token != "" {
			tok = "set " + EnvSchedulerToken + " or NOMAD_TOKEN (or -token) to a token that may read the job's namespace (read-job)"
		}
		return fmt.Sprintf("the scheduler at %s (%s) refused the token: %s: %s", s.addr, s.how, se.detail(), tok)
	}
	return fmt.Sprintf("the scheduler at %s (%s) answered %s", s.addr, s.how, se.detail())
}

// resolve finds the scheduler. nf are the command's Nomad flags (nil: the
// NOMAD_* environment), used to look up the service and for the token.
func (f *schedulerFlag) resolve(nf *nomadFlags) scheduler {
	tok := os.Getenv(EnvSchedulerToken)
	if tok == "" {
		tok = nf.config().SecretID
	}
	if f.set {
		return scheduler{addr: f.value, how: "-scheduler", token: tok}
	}
	if v := os.Getenv(EnvSchedulerAddr); v != "" {
		return scheduler{addr: v, how: "$" + EnvSchedulerAddr, token: tok}
	}
	addr, how, err := discover(nf, tok)
	if err == nil {
		return scheduler{addr: addr, how: how, token: tok}
	}
	how = "the default; no " + EnvSchedulerAddr + " and no Nomad service " + SchedulerService + " found"
	return scheduler{addr: defaultSchedulerAddr, how: how, token: tok, lookup: err}
}

// errNoService: Nomad answered, and has no instance of the service.
var errNoService = errors.New("no " + SchedulerService + " service registered in Nomad")

// discover looks the scheduler's service up in Nomad's service catalogue
// (every namespace the token may read) and returns the leader's address,
// else the first instance that answers, else the first instance.
func discover(nf *nomadFlags, token string) (string, string, error) {
	client, err := nf.client(30 * time.Second) // against a hang, not a slow machine
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
		if err := getJSON(addr+"/v1/health", token, &h); err != nil {
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

// statusError is an answer of the scheduler other than 200 OK.
type statusError struct {
	url, status, msg string
	code             int
}

func (e *statusError) Error() string { return e.url + ": " + e.detail() }

// detail is the status and the scheduler's error message.
func (e *statusError) detail() string {
	if e.msg != "" {
		return e.status + ": " + e.msg
	}
	return e.status
}

// get reads the scheduler's endpoint path ("/v1/..."), with its token.
func (s scheduler) get(path string, out any) error {
	return getJSON(strings.TrimSuffix(s.addr, "/")+path, s.token, out)
}

// getJSON reads a scheduler endpoint, with the token when there is one;
// an answer other than 200 OK is a *statusError.
func getJSON(url, token string, out any) error {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("X-Nomad-Token", token)
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
		return &statusError{url: url, status: resp.Status, msg: e.Error, code: resp.StatusCode}
	}
	return json.NewDecoder(resp.Body).Decode(out)
}
