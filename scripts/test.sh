#!/usr/bin/env bash
# Runs every test, as make test does, in go test runs started together:
# "units" (every package but tests/), "e2e" (tests/, whose end-to-end tests
# that own their resources run t.Parallel), and one run per group of
# tests/alone.txt, each running its group's tests one at a time. The
# end-to-end runs are the longest, so none of them waits for a unit
# package to finish first. Every line of output is prefixed with the
# run it comes from; the script fails if any run fails, and says which.
#
# Settings come from the environment (the Makefile passes its own):
# GO, TEST_TAGS, TEST_PARALLEL, TEST_TIMEOUT.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

go=${GO:-go}
tags=${TEST_TAGS:-ebbfs_testclock,ebbfs_gnutls}
parallel=${TEST_PARALLEL:-4}
timeout=${TEST_TIMEOUT:-40m}

# group -> "TestA|TestB"
declare -A groups=()
while read -r group name; do
	case "$group" in '' | '#'*) continue ;; esac
	groups[$group]+="${groups[$group]:+|}$name"
done <tests/alone.txt
all=$(IFS='|'; echo "${groups[*]}")

work=$(mktemp -d "${TMPDIR:-/tmp}/ebbfs-test.XXXXXX")
trap 'rm -rf "$work"' EXIT

# run NAME ARGS...: go test ARGS with output prefixed by NAME; its exit
# status goes to a file (a status file, not wait's, as in docs/model).
run() {
	local name=$1
	shift
	(
		"$go" test -tags "$tags" -count=1 -timeout "$timeout" "$@" 2>&1 |
			tee "$work/$name.log" | sed -u "s/^/[$name] /"
		echo "${PIPESTATUS[0]}" >"$work/$name.rc"
	) &
}

start=$SECONDS
units=$("$go" list -tags "$tags" ./...) || { echo "test.sh: go list failed"; exit 1; }
mapfile -t units < <(grep -v '/tests$' <<<"$units")
names=(units e2e)
run units -parallel "$parallel" "${units[@]}"
run e2e -parallel "$parallel" -skip "^($all)\$" ./tests
for group in $(printf '%s\n' "${!groups[@]}" | sort); do
	names+=("$group")
	run "$group" -run "^(${groups[$group]})\$" ./tests
done
wait

failed=()
for name in "${names[@]}"; do
	rc=$(cat "$work/$name.rc" 2>/dev/null || echo "no status (killed?)")
	echo "test.sh: $name exited $rc"
	[ "$rc" = 0 ] || failed+=("$name")
done
echo "test.sh: ${#names[@]} runs in $((SECONDS - start)) s"
if [ ${#failed[@]} -gt 0 ]; then
	# A CI log keeps only the end of the output: repeat each failure there,
	# with the lines go test printed under it.
	for name in "${failed[@]}"; do
		awk -v run="$name" '
			/^(--- FAIL|panic:|FAIL|ok|---|=== )/ { keep = 0 }
			/^--- FAIL|^panic:/ { keep = 1; shown = 0 }
			keep && shown < 20 { print "test.sh: [" run "] " $0; shown++ }
		' "$work/$name.log"
	done
	echo "test.sh: FAILED: ${failed[*]}"
	exit 1
fi
