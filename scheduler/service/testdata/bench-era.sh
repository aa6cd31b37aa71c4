#!/bin/sh
# bench-era.sh [COMMIT] [ROUNDS]: issue 30's 1,000-node goal, a pass at
# least 3x faster than on the day the issue was filed, measured in one run
# on this machine. BenchmarkPass (1,000 nodes, 10,000 allocations, 2,000
# waiting groups, their pins) runs at COMMIT (default 86b46df, main when
# issue 30 was filed) and at the working tree, alternately, ROUNDS times
# (default 3), both against today's fake Nomad (era_benchjob.go.txt); it
# prints each pass time and their ratio. Run from the repository's root
# (make bench does); a clone without COMMIT in its history skips it.
set -eu
era=${1:-86b46df}
rounds=${2:-3}
if ! git cat-file -e "$era^{commit}" 2>/dev/null; then
	echo "bench-era: commit $era is not in this clone's history; skipped"
	exit 0
fi
dir=$(mktemp -d)
trap 'git worktree remove --force "$dir" >/dev/null 2>&1 || rm -rf "$dir"; git worktree prune' EXIT
git worktree add -q --detach "$dir" "$era"
cp scheduler/service/testdata/era_benchjob.go.txt "$dir/scheduler/service/era_benchjob_test.go"
pass() {
	(cd "$1" && go test -run '^$' -bench 'BenchmarkPass$' -benchtime 10x -timeout 30m ./scheduler/service/) |
		awk '/^BenchmarkPass/ { print $3 / 1e6 }'
}
i=1
while [ "$i" -le "$rounds" ]; do
	then_ms=$(pass "$dir")
	now_ms=$(pass .)
	echo "bench-era round $i: pass at $era ${then_ms} ms, now ${now_ms} ms: $(awk "BEGIN { printf \"%.2f\", $then_ms / $now_ms }")x faster"
	i=$((i + 1))
done
