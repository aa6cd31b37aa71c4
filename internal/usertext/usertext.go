// Package usertext turns the scheduler's reasons into the words shown to
// users (gpushare status, gpushare job status, the scheduler's web page):
// the API keeps its reasons as composed, stable for scripts and tests;
// what a person reads names jobs as they wrote them, allocations and
// nodes by the 8 characters Nomad's CLI shows, and no internal names.
package usertext

import (
	"regexp"
	"strings"

	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/model"
)

var (
	// a Nomad ID (allocation, node, evaluation): a UUID not part of a GPU
	// or MIG instance UUID (those stay whole: nvidia-smi shows them so)
	uuid = regexp.MustCompile(`(^|[^-\w])([0-9a-f]{8})-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b`)
	// a learned profile's name: "learned:" and a group's key
	learned = regexp.MustCompile(regexp.QuoteMeta(model.LearnedPrefix) + `([^\s,;()]+)`)
	// a group's key whose parts are escaped (a job ID with '/' or '%')
	escapedKey = regexp.MustCompile(`[^\s,;()"]*%(2[Ff]|25)[^\s,;()"]*`)
)

// Reason is reason as users read it: job IDs unescaped ("nightly/periodic-1"
// not "nightly%2Fperiodic-1"), Nomad IDs of allocations and nodes cut to
// their first 8 characters, and a learned profile named by the group it
// was learned from ("the profile learned from default/train/g"), not
// "learned:default/train/g".
func Reason(reason string) string {
	if reason == "" {
		return ""
	}
	reason = learned.ReplaceAllStringFunc(reason, func(m string) string {
		return "the profile learned from " + unescapeKey(strings.TrimPrefix(m, model.LearnedPrefix))
	})
	reason = escapedKey.ReplaceAllStringFunc(reason, unescapeKey)
	return uuid.ReplaceAllString(reason, "$1$2")
}

// unescapeKey reads a group key written by decide.Key.String back as
// "<namespace>/<job>/<group>" with each part as written; anything else
// only loses its escapes of '/' and '%'.
func unescapeKey(s string) string {
	if k, ok := decide.ParseKey(s); ok {
		return k.Namespace + "/" + k.Job + "/" + k.Group
	}
	return strings.NewReplacer("%2F", "/", "%2f", "/", "%25", "%").Replace(s)
}
