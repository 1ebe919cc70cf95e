#!/usr/bin/env bash
# RPC round trip against the raw active-message round trip, over shared
# memory and over loopback tcp: a 2-PE job of rpcperf -t rtt per transport,
# whose PE 0 runs the ways interleaved, ROUNDS rounds of N round trips each
# ("am": a raw ucp active-message ping-pong on the job's worker, as
# ucpperf's ucp_am_lat; "rpc": Func.Call then Future.Wait; "rpc-invoke":
# Func.Invoke), and prints the medians, the medians of the rounds' ratios
# to am and their ranges, elapsed ("us") and in PE 0's processor time
# ("cpu-us"). Every job runs pinned alike (taskset -c CPUS, the launcher
# and both PEs); the load average before each job is printed, since
# numbers from a loaded machine are indicative only. Then, for reference,
# one run of ucpperf's ucp_am_lat (a program of its own, its own worker).
#
#   benchmarks/rpcperf/compare.sh
#   ROUNDS=9 N=50000 CPUS=2,3 TLS="tcp,self" benchmarks/rpcperf/compare.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${ROUNDS:-7}
N=${N:-20000}
CPUS=${CPUS:-0,1}
TLS=${TLS:-"sm,self tcp,self"}
REF=${REF-1}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
CGO_ENABLED=0 go build -o "$out/goshmem-run" ./launcher/cmd/goshmem-run
CGO_ENABLED=0 go build -o "$out/rpcperf" ./benchmarks/rpcperf
CGO_ENABLED=0 go build -o "$out/ucpperf" ./benchmarks/ucpperf
if pgrep -f '(^|/)(goshmem-run|rpcperf|ucpperf)( |$)' >/dev/null; then
  echo "warning: another job runs:" >&2; pgrep -af '(^|/)(goshmem-run|rpcperf|ucpperf)( |$)' >&2
fi
for tls in $TLS; do
  echo "## UCX_TLS=$tls, taskset -c $CPUS, $ROUNDS rounds of $N; load average $(cut -d' ' -f1-3 /proc/loadavg)"
  UCX_TLS=$tls taskset -c "$CPUS" "$out/goshmem-run" -np 2 "$out/rpcperf" -t rtt -n "$N" -rounds "$ROUNDS" | grep -v '^#'
  if [ -n "$REF" ]; then
    # ucpperf gives half a round trip, as ucx_perftest does: doubled here.
    UCX_TLS=$tls taskset -c "$CPUS" "$out/goshmem-run" -np 2 "$out/ucpperf" -t ucp_am_lat -s 8 -n "$N" -f |
      awk 'END {printf "ref    ucp_am_lat  %12.3f  us (median)  %.3f us (mean); one run, 8 bytes\n", 2*$2, 2*$4}'
  fi
done
