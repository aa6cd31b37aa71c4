// Package service is the gpushare scheduling service: it watches Nomad's
// event stream, keeps a live model of the cluster, and on every pass hands
// the model to the one decision step (package decide) and executes the
// actions it returns against Nomad: pin a group into its job, re-pin one
// whose capacity is gone, preempt opportunistic work for a guaranteed
// tenant, refuse for good a group no node could ever hold, unpair a GPU
// where a production job was observed slower than its bound (live
// introspection of the plugin's per-process SM utilisation, introspect.go),
// or leave a group waiting with its reason. Each group is offered only the
// nodes its job's own rules allow, as Nomad's scheduler would check them
// (package feasible; feasible.go): a group no node passes waits, with
// Nomad's tally of filtered nodes, and holds nothing. It confirms pins when allocations appear and
// serves its state over HTTP with Prometheus metrics. Replicas elect a
// leader through a Nomad Variable lock; only the leader pins.
//
// Service wires one type per concern, each talking to the others only
// through a small interface declared where it is used:
//
//   - watcher (watch.go): applies events and relists to the model; it owns
//     the model and the one lock (cluster), and reads Nomad through
//     eventSource. A pass reads the model without that lock (reading.go):
//     what the watcher and the observer write meanwhile waits, in order,
//     until the read ends, and the API reads beside the pass. The watcher
//     also reports nodes whose meta opens the gate (gateopen.go), and
//     keeps out of the model only the holds the scheduler signed: any
//     other job, whatever its name, is modelled (hold_watch.go). It
//     watches Nomad's namespaces too: the stream covers those of when it
//     opened, and a new one opens it again (watch_namespaces.go);
//   - loop (loop.go, reconcile.go, collect*.go, lifecycle.go, pins.go,
//     confirm.go, prior.go, introspect.go): the decision loop;
//     it acts on Nomad through nomadActions, asks the records through
//     recordKeeper and the lease through leadership. It composes a type
//     per concern that owns its state: the stager (staging: stager.go,
//     hold.go, hold_stage.go, hold_keep.go, hold_release.go,
//     hold_rules.go; it reaches Nomad, the signing key, the lease and the
//     answers through small interfaces), the rule mirror (ruleMirror,
//     feasible.go: which nodes a group's own rules allow), introspection
//     (introspect.go, which locks itself), stopping and preemptionLog
//     (preemptions.go), the gater (preemptions.go: stops allocations by
//     gating their groups again, for preempt and unpair), the pinner
//     (pins.go, batchended.go: writes a pass's pins into their jobs,
//     signed, and registers them; it reaches Nomad, the records, staging
//     and the answers through small interfaces) with its runtimes
//     (runtime.go: what a pin writes besides the pins), refusals (refusals.go, retry.go), answers
//     (answers.go), unconfirmed (confirm.go), and, keeping nothing, moves
//     (moves.go: where a group runs and whether it stays), the promoter
//     (promote.go), pools (pool.go) and elasticScan (elastic_read.go),
//     built from what it holds; loopNotes (loop.go) are what the records
//     save and read of those parts;
//   - sampler (observe.go, gpustats.go): reads the GPUs' device stats
//     on a ticker of its own beside the loop: the history every replica
//     shows, and on the leader the samples of groups running alone, from
//     which profiles are learned, and those introspection keeps of
//     allocations alone or sharing a GPU (introspectSample); it reads
//     Nomad through statsReader;
//   - records (state.go, records.go, submit.go): the records in Nomad
//     Variables (varStore), the signing key and the submit times; it saves
//     and reads the loop's notes (loopNotes) through notes;
//   - apiView (view.go, miglayout.go, ui_family.go): what the API shows,
//     read under the model's lock from the model and from what the
//     loop's parts keep for it (answers, refusals, unpairs, preemptions,
//     elastic status), each through a small interface; it keeps nothing;
//   - httpAPI (http.go, ui.go, auth.go): the HTTP API and the page; it
//     shows what view (the apiView) gives and checks tokens through
//     authorizer;
//   - lease (leader.go): whether this replica leads and may write.
//   - elastic (elastic.go, elastic_policy.go, elastic_read.go): grows
//     the groups that opt in (gpushare.elastic, a scaling block without a
//     policy) into idle shares and shrinks them for waiting work through
//     Nomad's scale API; the loop reads the groups during its read of the
//     model and hands them over once the pass's pins are sent.
//
// Nomad and the records in Variables are the truth: lifecycle.Reconcile
// derives each group's stage from them every pass. What the loop keeps
// per group beyond that, and why it is not in Nomad or the Variables:
//
//   - answers (answers.go; under the model's lock), the last pass's
//     answers per group, kept for the API until the next pass: pending
//     and placed (why groups wait, why pinned ones are where they are),
//     saved in the records for followers: the reasons depend on the whole
//     cluster and are never in a job's signed meta; and, rebuilt by every
//     pass, positions (the queue places of the groups left waiting) and
//     stages (lifecycle.Reconcile's, as collect found them);
//   - refusals (refusals.go, retry.go; one record of the three maps
//     below, written under the model's lock but for nomad, the pass's
//     own): forGood, the job version, cluster shape and allowed nodes a
//     group was refused for good with, so that it is not decided again
//     until one changes (its reason is saved; the rest is rebuilt by
//     deciding again); retries, when a group whose pin request failed is
//     tried again — a failed request leaves nothing in Nomad; and nomad,
//     every node Nomad refused a group's pins on while it misses
//     allocations: the model holds only Nomad's verdict on the current
//     pin, and a pin decided again without those refused in the last 5
//     minutes (refusedFor) never swings between two, nor waits for ever
//     on a refusal that has gone;
//   - staging (the stager: hold_stage.go, hold_keep.go, hold_rules.go): the pins
//     whose holds Nomad has not placed yet (their placement, its digest
//     and when the holds were registered: a later pass pins them, and
//     their holds are kept meanwhile; each pass holds their shares in
//     the snapshot for their group, which keeps its decision until it no
//     longer stands), the nodes where Nomad did not place a group's hold
//     within 30 s (it is not staged there for 10 minutes), and what each
//     namespace's capabilities allow holds to run with (read again every
//     5 minutes, or learned from Nomad's refusal); a restarted scheduler
//     reads the waiting pins back from the holds Nomad lists (each
//     carries the placement it stages, signed through its digest);
//   - unconfirmed (confirm.go; the pass's own): when each pin whose
//     allocations Nomad has not made yet was sent, for the placement
//     latency metric and the warning of a pin with no allocation;
//   - preempted (saved in the records) and preemptions (the last ones,
//     for the API; preemptions.go): allocations Nomad is stopping whose
//     capacity is already given away;
//   - observations (the sampler's, observe.go; under the model's lock), and
//     introspection's samples (introspect.go, behind its own lock): stats
//     of groups running alone or sharing, from which profiles are learned
//     (the learned profiles and unpair reasons are saved);
//   - nothing for elastic groups but what Nomad says back: the count a
//     group's user registered, its last resize, why and when, are read
//     from Nomad's scaling events (whose meta the scheduler writes), once
//     per job version; the loop keeps only the last resize it sent of
//     each group (so that one job version is resized once, and one Nomad
//     refused is not tried again before elastic_interval) and what the
//     last pass said, for the API;
//   - nothing for promotions (promote.go): whether a deployment of the
//     scheduler's own pin waits for a promote, and whether the pin is its
//     only change, is read from Nomad every pass (the job's latest
//     deployment, the version an older allocation runs), and a promote
//     Nomad refused is tried again by the next pass;
//   - caches of what Nomad or the job says, rebuilt when lost: priors
//     (prior.go: the pins of running
//     allocations' versions) and the rule mirror's (ruleMirror,
//     feasible.go): the groups' compiled rules, the nodes a group's rules
//     allowed when last decided, and the node sets groups' rules allowed
//     in the last pass, kept while the snapshot's nodes are the same; and
//     collected (collect_cache.go): what collect
//     derived for each job in the passes before, reused until the model
//     marks the job, a node it read, or its pinned shares' shortage
//     changed, so that a pass looks again only at what changed (thousands
//     of jobs at once are looked at on every processor:
//     collect_workers.go).
package service
