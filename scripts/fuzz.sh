#!/usr/bin/env bash
# Runs every fuzz target of the module (every func FuzzXxx in a _test.go
# file), one after the other, each for a bounded time: FUZZ_TIME (default
# 1m), NBD_FUZZ_TIME (default 10m) for those of nbd/. FUZZ_MATCH, a
# regexp, limits the run to the targets whose "package/FuzzName" matches.
#
# An input that makes a target fail is written by go test to
# <package>/testdata/fuzz/<FuzzName>/ and from then on runs with the
# package's ordinary tests as a regression case: commit it with the fix.
# The script goes on with the other targets and exits non-zero at the end
# if any failed.
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
FUZZ_TIME=${FUZZ_TIME:-1m}
NBD_FUZZ_TIME=${NBD_FUZZ_TIME:-10m}
FUZZ_MATCH=${FUZZ_MATCH:-.}

failed=()
ran=0
while IFS= read -r dir; do
	pkg="./${dir#./}"
	for target in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go | sed 's/^func //' | sort -u); do
		name="${dir#./}/$target"
		if ! [[ $name =~ $FUZZ_MATCH ]]; then
			continue
		fi
		time=$FUZZ_TIME
		if [[ ${dir#./} == nbd ]]; then
			time=$NBD_FUZZ_TIME
		fi
		echo "== $name for $time"
		ran=$((ran + 1))
		if ! "$GO" test -run '^$' -fuzz "^${target}\$" -fuzztime "$time" "$pkg"; then
			failed+=("$name")
			echo "!! $name failed: the input is in ${dir#./}/testdata/fuzz/$target/"
		fi
	done
done < <(grep -rl --include='*_test.go' '^func Fuzz' . | xargs -n1 dirname | sort -u)

echo "fuzzed $ran targets"
if ((${#failed[@]} > 0)); then
	echo "failed: ${failed[*]}"
	exit 1
fi
