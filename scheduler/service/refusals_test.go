package service

import (
	"errors"
	"testing"
	"time"

	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/shoenig/test/must"
)

// The nodes Nomad refused a group on keep the time of their first refusal
// at a version of the job, start again at a new version, and byNomad's
// answer is a copy: nothing changes until keepByNomad keeps it.
func TestRefusalsByNomadKeepsFirstRefusal(t *testing.T) {
	var mu timedMutex
	r := newRefusals(&mu)
	t0 := time.Unix(1000, 0)
	on := r.byNomad(key("x"), []string{"n1"}, 7, t0)
	must.MapEmpty(t, r.nomad, must.Sprint("byNomad only reads"))
	r.keepByNomad(key("x"), on)
	later := t0.Add(refusedFor)
	on = r.byNomad(key("x"), []string{"n1", "n2"}, 7, later)
	must.Eq(t, t0, on["n1"].at, must.Sprint("the same refusal does not start its time again"))
	must.Eq(t, later, on["n2"].at)
	must.Eq(t, t0, r.nomad[key("x")]["n1"].at)
	must.Eq(t, []string{"n2"}, avoidedFor(on, later), must.Sprint("n1 was refused refusedFor ago"))
	on = r.byNomad(key("x"), []string{"n1"}, 8, later)
	must.Eq(t, later, on["n1"].at, must.Sprint("a new version is refused anew"))
}

// A follower shows what the leader refused for good, and forgets it once
// the leader does; its own refusals stay.
func TestRefusalsReadFromLeader(t *testing.T) {
	var mu timedMutex
	r := newRefusals(&mu)
	r.refuse(key("own"), refusal{reason: "mine"})
	r.readFrom(map[decide.Key]string{key("a"): "too big"}, map[decide.Key]bool{key("a"): true, key("b"): false})
	must.Eq(t, map[decide.Key]bool{key("own"): true, key("a"): true}, r.refusedGroups())
	f, ok := r.refusedForGood(key("a"))
	must.True(t, ok)
	must.Eq(t, refusal{reason: "too big", read: true}, f)
	r.readFrom(nil, nil)
	must.Eq(t, map[decide.Key]bool{key("own"): true}, r.refusedGroups())
	r.forgive(key("own"))
	must.MapEmpty(t, r.refusedGroups())
}

// A failed pin backs off twice as long each time, and a success forgets it.
func TestRefusalsBackOff(t *testing.T) {
	var mu timedMutex
	r := newRefusals(&mu)
	t0 := time.Unix(1000, 0)
	must.StrContains(t, r.failed(key("x"), "pin", errors.New("boom"), t0), "retrying in 2s")
	why, ok := r.backingOff(key("x"), t0.Add(time.Second))
	must.True(t, ok)
	must.StrContains(t, why, "pin failed: boom")
	_, ok = r.backingOff(key("x"), t0.Add(firstRetry))
	must.False(t, ok)
	must.StrContains(t, r.failed(key("x"), "pin", errors.New("boom"), t0), "retrying in 4s")
	r.succeeded(key("x"))
	_, ok = r.backingOff(key("x"), t0)
	must.False(t, ok)
	must.MapEmpty(t, r.retries)
}
