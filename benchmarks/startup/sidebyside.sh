#!/usr/bin/env bash
# Start-up side by side: goshmem-run -np N of examples/hello (init, one
# atomic, barrier, finalize) against oshrun -np N of the same steps in C
# (launcher/e2e/testdata/oshmem_hello.c), interleaved, medians of REPS runs.
# Wall time and the whole job's CPU (user+sys of the launcher and every PE).
#
#   benchmarks/startup/sidebyside.sh            # N = 2 16 64 side by side; 128 256 goshmem only
#   REPS=3 NS="2 16" ALONE="" benchmarks/startup/sidebyside.sh
#
# Needs oshcc and oshrun (Debian's openmpi-bin, libopenmpi-dev) for the
# reference side; without them it measures goshmem-run alone.
set -euo pipefail
cd "$(dirname "$0")/../.."
REPS=${REPS:-5}
NS=${NS:-"2 16 64"}
ALONE=${ALONE-"128 256"}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export PATH=/usr/local/go/bin:$PATH
CGO_ENABLED=0 go build -o "$out/goshmem-run" ./launcher/cmd/goshmem-run
CGO_ENABLED=0 go build -o "$out/hello" ./examples/hello
osh=""
if command -v oshcc >/dev/null && command -v oshrun >/dev/null; then
  oshcc -O2 -o "$out/oshmem_hello" launcher/e2e/testdata/oshmem_hello.c && osh=1
fi
if pgrep -f 'goshmem-run|oshrun|ucpperf|ucx_perftest' >/dev/null; then
  echo "warning: another job runs:" >&2; pgrep -af 'goshmem-run|oshrun|ucpperf|ucx_perftest' >&2
fi

# one NAME N CMD...: runs the job once, appends "wall cpu" to $out/NAME.N.
one() {
  local name=$1 n=$2; shift 2
  /usr/bin/time -f '%e %U %S' -o "$out/t" "$@" >/dev/null 2>"$out/err" || true
  tail -1 "$out/t" | awk '{printf "%.3f %.3f\n", $1, $2+$3}' >>"$out/$name.$n"
}
for rep in $(seq "$REPS"); do
  for n in $NS; do
    one goshmem "$n" "$out/goshmem-run" -np "$n" "$out/hello"
    # Debian's OSHMEM crashes in shmem_finalize after the job's work
    # (ANCHORS.md): its exit status is not looked at.
    [ -n "$osh" ] && one oshrun "$n" oshrun --allow-run-as-root --oversubscribe -np "$n" "$out/oshmem_hello"
  done
  for n in $ALONE; do
    one goshmem "$n" "$out/goshmem-run" -np "$n" "$out/hello"
  done
done

med() { sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
col() { [ -f "$1" ] && cut -d' ' -f"$2" "$1" | med || echo -; }
echo "| N | goshmem-run wall s (CPU s) | oshrun wall s (CPU s) | goshmem/oshrun (wall) | goshmem runs (wall) |"
echo "|---|---|---|---|---|"
for n in $NS $ALONE; do
  gw=$(col "$out/goshmem.$n" 1); gc=$(col "$out/goshmem.$n" 2)
  ow=$(col "$out/oshrun.$n" 1); oc=$(col "$out/oshrun.$n" 2)
  ratio=-
  [ "$ow" != - ] && ratio=$(awk -v a="$gw" -v b="$ow" 'BEGIN {printf "%.2f", a/b}')
  runs=$(cut -d' ' -f1 "$out/goshmem.$n" | tr '\n' ' ')
  echo "| $n | $gw ($gc) | $ow ($oc) | $ratio | $runs|"
done
