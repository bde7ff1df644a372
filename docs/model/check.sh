#!/usr/bin/env bash
# Model-checks the ebbfs reclamation protocol (docs/model/reclaim.pml) with
# spin and gcc: the main configurations must pass exhaustively; every
# mutant and every recorded finding must produce a counterexample trail.
# Exits non-zero if a main run fails or is incomplete, or if a mutant or
# finding passes. spin's generated files live in a temporary directory.
#
#   docs/model/check.sh            everything (about 3 minutes on 2 cores)
#   MODEL_JOBS=1 docs/model/check.sh
#   MODEL_ONLY=mutant docs/model/check.sh     only runs whose kind (or name) matches
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
model="$here/reclaim.pml"
jobs="${MODEL_JOBS:-2}"
only="${MODEL_ONLY:-}"

for tool in spin gcc; do
	if ! command -v "$tool" >/dev/null 2>&1; then
		echo "model: $tool not found (scripts/install-deps.sh installs it)" >&2
		exit 2
	fi
done

work="$(mktemp -d "${TMPDIR:-/tmp}/ebbfs-model.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# Configurations. Every run has 2 files of one extent each, segment ids
# 1..4 (segment 1 holds both files at the start), one checkpoint slot,
# time in 30-second ticks (floor 2, margin 1, replica span 3).
CRASH="-DOPS=2 -DCRASHES=2 -DZOMBIES=0 -DFAULTS=0 -DNOREPLICA -DNOADMIN"
ZOMBIE="-DOPS=1 -DCRASHES=0 -DZOMBIES=1 -DFAULTS=0 -DNOREPLICA -DNOADMIN"
READER="-DOPS=2 -DCRASHES=0 -DZOMBIES=0 -DFAULTS=0 -DNOADMIN"
CKPT="-DOPS=2 -DCRASHES=0 -DZOMBIES=0 -DFAULTS=0 -DNOREPLICA"
STALL="-DOPS=2 -DCRASHES=1 -DZOMBIES=0 -DFAULTS=0 -DNOREPLICA -DNOADMIN -DSTALLS"
LIVE="-DOPS=1 -DCRASHES=1 -DZOMBIES=0 -DFAULTS=0 -DNOREPLICA -DNOADMIN -DLIVENESS"
FAULT="-DOPS=2 -DCRASHES=1 -DZOMBIES=0 -DFAULTS=1 -DNOREPLICA -DNOADMIN"

# kind|name|expect|spin defines|gcc flags|pan flags|bounds
runs=(
	"main|crash|pass|$CRASH|-DSAFETY||2 files, 4 segment ids, 2 writes/deletes, 2 crashes at any step"
	"main|zombie|pass|$ZOMBIE|-DSAFETY||2 files, 4 segment ids, 1 write/delete, 1 takeover with a zombie writer"
	"main|reader|pass|$READER|-DSAFETY||2 files, 4 segment ids, 2 writes/deletes, 1 replica (reads within 2 ticks), writer reads"
	"main|checkpoint|pass|$CKPT|-DSAFETY||2 files, 4 segment ids, 2 writes/deletes, 1 persistent checkpoint created and deleted"
	"main|stall|pass|$STALL|-DSAFETY||2 files, 4 segment ids, 2 writes/deletes, 1 crash, 1 journal stall of any length"
	"main|liveness|pass|$LIVE|-DNFAIR=3|-a -f|2 files, 4 segment ids, 1 write/delete, 1 crash; weak fairness"
	"main|faults|pass|$FAULT|-DSAFETY||2 files, 4 segment ids, 2 writes/deletes, 1 crash, 1 counter under-count"
	"mutant|counter-before-delete|fail|$CRASH -DMUTANT_COUNTER_BEFORE_DELETE|-DSAFETY||crash configuration"
	"mutant|repoint-before-upload|fail|$CRASH -DMUTANT_REPOINT_BEFORE_UPLOAD|-DSAFETY||crash configuration"
	"mutant|drain-same-cycle|fail|$CRASH -DMUTANT_DRAIN_SAME_CYCLE|-DSAFETY||crash configuration"
	"mutant|cutoff-before-flush|fail|$STALL -DMUTANT_CUTOFF_BEFORE_FLUSH -DMUTANT_DELETE_BEFORE_BARRIER|-DSAFETY||stall configuration, without the barrier before the DELETE either"
	"mutant|no-span-grace|fail|$READER -DMUTANT_NO_SPAN_GRACE|-DSAFETY||reader configuration"
	"mutant|delete-before-barrier|fail|$FAULT -DMUTANT_DELETE_BEFORE_BARRIER|-DSAFETY||faults configuration"
	"finding|replica-pin-race|fail|$READER -DREPLICA_PIN_RACE|-DSAFETY||reader configuration, record written after the first view"
	"finding|journal-stall-replica|fail|$READER -DSTALLS|-DSAFETY||reader configuration + 1 journal stall"
	"finding|ephemeral-create-race|fail|$CKPT -DEPHEMERAL_CREATE|-DSAFETY||checkpoint configuration, ephemeral ttl 4 ticks"
)

run_one() {
	local kind="$1" name="$2" expect="$3" defs="$4" cflags="$5" pflags="$6" bounds="$7"
	local d="$work/$kind-$name"
	mkdir -p "$d"
	cp "$model" "$d/reclaim.pml"
	local t0 t1
	t0=$(date +%s)
	(
		cd "$d"
		# shellcheck disable=SC2086
		spin -a $defs reclaim.pml >spin.out 2>&1 || { echo "spin -a failed"; cat spin.out; exit 3; }
		# shellcheck disable=SC2086
		gcc -O2 -DCOLLAPSE -DMEMLIM=6000 -DVECTORSZ=2048 $cflags -o pan pan.c >gcc.out 2>&1 || { echo "gcc failed"; cat gcc.out; exit 3; }
		# shellcheck disable=SC2086
		./pan -m200000 $pflags >pan.out 2>&1 || true
	) >"$d/run.log" 2>&1 || true
	t1=$(date +%s)
	local errors states got trail=no steps=""
	errors=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' "$d/pan.out" 2>/dev/null | tail -1 || true)
	states=$(sed -n 's/^ *\([0-9.e+]*\) states, stored.*/\1/p' "$d/pan.out" 2>/dev/null | tail -1 || true)
	if [ -f "$d/reclaim.pml.trail" ]; then
		trail=yes
		steps=$(wc -l <"$d/reclaim.pml.trail")
	fi
	if [ -z "$errors" ]; then
		got=broken
	elif [ "$errors" != 0 ]; then
		got=fail
	elif grep -qE 'reached -DMEMLIM bound|max search depth too small' "$d/pan.out"; then
		got=incomplete
	else
		got=pass
	fi
	local verdict=ok
	if [ "$got" != "$expect" ] || { [ "$expect" = fail ] && [ "$trail" != yes ]; }; then
		verdict=WRONG
	fi
	local what
	what=$(grep -E 'assertion violated|acceptance cycle' "$d/pan.out" 2>/dev/null | head -1 | sed 's/^pan:[0-9]*: *//' | cut -c1-140 || true)
	printf 'RESULT %-7s %-24s expect=%-4s got=%-10s trail=%-3s steps=%-5s states=%-10s time=%ss %s\n' \
		"$kind" "$name" "$expect" "$got" "$trail" "${steps:-0}" "${states:-?}" "$((t1 - t0))" "$verdict"
	printf '        bounds: %s\n' "$bounds"
	if [ -n "$what" ]; then printf '        counterexample: %s\n' "$what"; fi
	if [ "$verdict" != ok ]; then
		sed 's/^/        | /' "$d/run.log" "$d/pan.out" 2>/dev/null | tail -25
	fi
	[ "$verdict" = ok ]
}

echo "model: spin $(spin -V | sed -n 's/Spin Version \([^ ]*\).*/\1/p'), $(gcc --version | head -1), $jobs jobs"
start=$(date +%s)
pids=()
names=()
i=0
for r in "${runs[@]}"; do
	IFS='|' read -r kind name expect defs cflags pflags bounds <<<"$r"
	if [ -n "$only" ] && [ "$kind" != "$only" ] && [ "$name" != "$only" ]; then continue; fi
	while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do sleep 0.2; done
	run_one "$kind" "$name" "$expect" "$defs" "$cflags" "$pflags" "$bounds" >"$work/result.$i" 2>&1 &
	pids+=("$!")
	names+=("$i")
	i=$((i + 1))
done
status=0
for k in "${!pids[@]}"; do
	if ! wait "${pids[$k]}"; then status=1; fi
	cat "$work/result.${names[$k]}"
done
echo "model: $i runs in $(($(date +%s) - start))s; $([ $status = 0 ] && echo all as expected || echo SOME RUNS NOT AS EXPECTED)"
exit $status
