#!/usr/bin/env bash
# ucpperf against ucx_perftest, side by side: the same tests, server and
# client on loopback, interleaved round by round (ucx_perftest, then this
# tree's ucpperf, then, when BEFORE names one, an older ucpperf binary, for
# a before/after table), each pinned alike (server on the first CPU of
# CPUS, client on the second). It prints, per transport selection and
# test, each side's median over ROUNDS rounds of the 50th-percentile
# latency (us, the "typical" column, for *_lat tests) or of the overall
# bandwidth (MB/s, for *_bw tests), with the range of the rounds, and the
# ratio of the medians to ucx_perftest's. For the sm *_lat rows it runs
# benchmarks/smfloor in each round too (a cache line passed between two
# processes on the same CPUs: the hardware's floor of a message through
# shared memory, which moves with the VM's fast and slow modes) and prints
# its median as "floor". TLS "loop" runs each test in loopback (-l: one
# process, pinned to the second CPU, sending to itself through the sm
# FIFO): no message crosses between cores, so the figure is the software
# cost of a message alone, the same in the VM's fast and slow modes.
#
#   benchmarks/ucpperf/compare.sh
#   BEFORE=/tmp/ucpperf-old ROUNDS=7 TLS="sm,self" TESTS="tag_lat:8 stream_lat:8" benchmarks/ucpperf/compare.sh
#   TLS=loop TESTS="tag_lat:8 stream_lat:8" benchmarks/ucpperf/compare.sh
#
# Needs ucx_perftest (apt-get install -y ucx-utils). A quiet machine:
# nothing else running (see README, "How to measure").
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${ROUNDS:-5}
N=${N:-100000}
CPUS=${CPUS:-0,1}
TLS=${TLS:-"sm,self tcp,self"}
TESTS=${TESTS:-"tag_lat:8 stream_lat:8 ucp_am_lat:8 ucp_put_lat:8 ucp_get:8 tag_bw:1048576 ucp_put_bw:8"}
BEFORE=${BEFORE:-}
command -v ucx_perftest >/dev/null || { echo "compare: ucx_perftest not found (apt-get install -y ucx-utils)" >&2; exit 2; }
out=$(mktemp -d)
trap 'pkill -f "$out/" 2>/dev/null || true; rm -rf "$out"' EXIT
CGO_ENABLED=0 go build -o "$out/ucpperf" ./benchmarks/ucpperf
floorbin=
if command -v cc >/dev/null && cc -O2 -o "$out/smfloor" benchmarks/smfloor/smfloor.c; then
	floorbin=$out/smfloor
fi
sides=("ucx_perftest" "$out/ucpperf")
names=(ucx ours)
if [ -n "$BEFORE" ]; then
	sides+=("$BEFORE")
	names+=(before)
fi
srv=${CPUS%%,*}
cli=${CPUS##*,}
export GOSHMEM_KEY=${GOSHMEM_KEY:-$(head -c 32 /dev/urandom | base64)}
port=13500

# one runs side $1's test $2 of $3 bytes once and prints its figure.
one() {
	local prog=$1 t=$2 s=$3 n=$N
	case $t in *_bw) n=$((N / 10)) ;; esac
	[ "$s" -ge 65536 ] && n=$((n / 20 + 100))
	local line
	if [ "$tls" = loop ]; then
		line=$(UCX_TLS=sm taskset -c "$cli" timeout 120 "$prog" -l -t "$t" -s "$s" -n "$((n * 10))" 2>/dev/null | grep '^Final:' || true)
		awk '{print $3}' <<<"$line"
		return
	fi
	port=$((port + 1))
	taskset -c "$srv" "$prog" -p "$port" >/dev/null 2>&1 &
	local pid=$!
	sleep 0.5
	line=$(taskset -c "$cli" timeout 120 "$prog" -p "$port" 127.0.0.1 -t "$t" -s "$s" -n "$n" 2>/dev/null | grep '^Final:' || true)
	wait "$pid" 2>/dev/null || true
	# Final: iterations typical avg overall bw-avg bw-overall rate-avg rate-overall
	case $t in
	*_lat | ucp_get) awk '{print $3}' <<<"$line" ;;
	*) awk '{print $7}' <<<"$line" ;;
	esac
}

stats() { # median min max of the numbers on stdin
	sort -g | awk '{a[NR]=$1} END {if (NR==0) {print "- - -"; exit} m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; print m, a[1], a[NR]}'
}

echo "# ucpperf against ucx_perftest; $ROUNDS interleaved rounds, server on CPU $srv, client on CPU $cli; load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# lat tests: 50%ile us (lower is better); bw tests: overall MB/s (higher is better)"
for tls in $TLS; do
	for ts in $TESTS; do
		t=${ts%%:*}
		s=${ts##*:}
		for i in "${!sides[@]}"; do : >"$out/${names[$i]}"; done
		floor=
		case $tls,$t in sm*,*_lat) floor=$floorbin ;; esac
		: >"$out/floor"
		for r in $(seq "$ROUNDS"); do
			for i in "${!sides[@]}"; do
				UCX_TLS=$tls one "${sides[$i]}" "$t" "$s" >>"$out/${names[$i]}"
			done
			if [ -n "$floor" ]; then
				timeout 60 "$floor" 200000 "$srv" "$cli" | awk '{print $2}' >>"$out/floor" || true
			fi
		done
		read -r um ulo uhi < <(stats <"$out/ucx")
		printf '%-9s %-12s %8s B  ucx %s (%s-%s)' "$tls" "$t" "$s" "$um" "$ulo" "$uhi"
		if [ -s "$out/floor" ]; then
			read -r fm flo fhi < <(stats <"$out/floor")
			printf '  floor %s (%s-%s)' "$fm" "$flo" "$fhi"
		fi
		for i in "${!sides[@]}"; do
			[ "$i" = 0 ] && continue
			read -r m lo hi < <(stats <"$out/${names[$i]}")
			ratio=$(awk -v a="$m" -v b="$um" 'BEGIN {if (b+0 > 0 && a != "-") printf "%.2f", a/b; else print "-"}')
			printf '  %s %s (%s-%s) x%s' "${names[$i]}" "$m" "$lo" "$hi" "$ratio"
		done
		echo
	done
done
