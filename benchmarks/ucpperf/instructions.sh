#!/bin/bash
# instructions.sh: instructions per message of ucpperf -l beside ucx_perftest -l,
# counted by valgrind (cachegrind), not timed: the count of a loopback
# ping-pong (sender and receiver on one thread, no waiting for another
# process) is the same on a loaded machine as on a quiet one, where
# timings are not. Each figure is (Ir(N2) - Ir(N1)) / (N2 - N1) over the
# whole process, so start-up and teardown cancel out.
#
#   benchmarks/ucpperf/instructions.sh            # TESTS="tag_lat stream_lat" SIZE=8 TLS=sm N1=2000 N2=22000
#
# Without self in UCX_TLS the endpoint to the own worker goes through the
# shared-memory FIFO (posix) on both sides. valgrind 3.19 does not know
# RDTSCP, which Go's runtime uses where the CPU has it: GODEBUG turns it
# off. The ucpperf figure includes its loop and, as valgrind slows it
# past a microsecond an iteration, a clock reading per iteration (about
# 200 instructions that a run at full speed spreads over 32 iterations).
set -euo pipefail
cd "$(dirname "$0")/../.."
TESTS=${TESTS:-"tag_lat stream_lat"} SIZE=${SIZE:-8} TLS=${TLS:-sm} N1=${N1:-2000} N2=${N2:-22000}
command -v valgrind >/dev/null || { echo "instructions.sh: valgrind is not installed" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/ucpperf" ./benchmarks/ucpperf
ir() { # command...: instructions of the whole process
	UCX_TLS=$TLS GOGC=off GOMAXPROCS=1 GODEBUG=cpu.rdtscp=off,asyncpreemptoff=1 \
		valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null "$@" 2>&1 >/dev/null |
		sed -n 's/.*I *refs: *//p' | tr -d ,
}
per() { # command-with-@N@...
	local a b
	a=$(ir "${@//@N@/$N1}")
	b=$(ir "${@//@N@/$N2}")
	echo $(((b - a) / (N2 - N1)))
}
printf '%-12s %6s %10s %14s\n' test size ucpperf ucx_perftest
for t in $TESTS; do
	ours=$(per "$tmp/ucpperf" -l -t "$t" -s "$SIZE" -n @N@ -w 0 -f)
	ref=-
	if command -v ucx_perftest >/dev/null; then
		ref=$(per ucx_perftest -l -t "$t" -s "$SIZE" -n @N@ -w 0 -f)
	fi
	printf '%-12s %6s %10s %14s\n' "$t" "$SIZE" "$ours" "$ref"
done
