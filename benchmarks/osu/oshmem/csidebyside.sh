#!/usr/bin/env bash
# csidebyside.sh: builds one C OpenSHMEM benchmark source twice, with oshcc
# (the reference, OSHMEM) and with goshcc (goshmem's C library), runs the
# two programs under oshrun and goshmem-run interleaved on the same
# machine, and prints the comparison of `osu compare`: the median of ROUNDS
# runs of each side.
#
#   benchmarks/osu/oshmem/csidebyside.sh SOURCE.c [OUTDIR]
#
# SOURCE must print what `osu compare` reads: an OSU table (osu_oshm.c
# beside this file, with ARGS="put") or "name value" lines (oshm_ref.c).
# Both jobs run under `taskset -c $CPUS` (default 0,1) with both launchers
# pinning each PE to one of those CPUs (--bind-to core), so both sides are
# placed alike; where OSHMEM's collectives would
# use shared memory although UCX_TLS leaves it out, --mca scoll basic sends
# them through UCX too. Each round also runs the floors, in C: memcpy of
# 1 MiB between mappings (benchmarks/memfloor) and a loopback tcp round
# trip (benchmarks/tcpfloor), printed after the table.
# Environment: NP (PEs, default 2), ROUNDS (default 5), TLS (UCX_TLS of
# both sides, default sm,self), ARGS (the program's arguments), CPUS,
# GOSHMEM_PREFIX (an installed goshmem C library; default: capi/install.sh
# installs one into OUTDIR). Needs oshcc and oshrun (Debian: openmpi-bin
# libopenmpi-dev) and a C compiler.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
[ $# -ge 1 ] && [ -f "$1" ] || { echo "usage: $0 SOURCE.c [OUTDIR]" >&2; exit 2; }
src=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
out=${2:-$(mktemp -d /tmp/osu-csidebyside.XXXXXX)}
np=${NP:-2}
rounds=${ROUNDS:-5}
cpus=${CPUS:-0,1}
tls=${TLS:-sm,self}
args=${ARGS:-}
name=$(basename "$src" .c)

for tool in oshcc oshrun go cc; do
	command -v "$tool" >/dev/null || { echo "csidebyside: $tool not found (apt-get install -y openmpi-bin libopenmpi-dev)" >&2; exit 2; }
done
mkdir -p "$out/bin"
out=$(cd "$out" && pwd)
prefix=${GOSHMEM_PREFIX:-$out/goshmem}
if [ -z "${GOSHMEM_PREFIX:-}" ]; then
	sh "$root/capi/install.sh" --shared-only "$prefix" >&2
fi
oshcc -O2 -o "$out/bin/$name-oshmem" "$src"
"$prefix/bin/goshcc" -O2 -o "$out/bin/$name-goshmem" "$src"
(cd "$root" && go build -o "$out/bin/" ./benchmarks/osu)
cc -O2 -o "$out/bin/memfloor" "$root/benchmarks/memfloor/memfloor.c"
cc -O2 -o "$out/bin/tcpfloor" "$root/benchmarks/tcpfloor/tcpfloor.c"
oshargs=(--allow-run-as-root --oversubscribe --bind-to core)
case ",$tls," in
*,sm,* | *,shm,* | *,posix,* | *,sysv,* | *,all,*) ;;
*) oshargs+=(--mca scoll basic) ;;
esac

for r in $(seq "$rounds"); do
	# shellcheck disable=SC2086
	timeout 600 taskset -c "$cpus" oshrun "${oshargs[@]}" -np "$np" -x UCX_TLS="$tls" \
		"$out/bin/$name-oshmem" $args >"$out/oshmem-$r.txt" 2>/dev/null || true
	# shellcheck disable=SC2086
	UCX_TLS=$tls timeout 600 taskset -c "$cpus" "$prefix/bin/goshmem-run" --bind-to core -np "$np" "$out/bin/$name-goshmem" $args >"$out/goshmem-$r.txt"
	{
		taskset -c "$cpus" "$out/bin/memfloor" 2000
		timeout 120 "$out/bin/tcpfloor" pingpong 20000
	} >"$out/floor-$r.txt" 2>&1 || true
	echo "round $r: load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
done
list() { local s=; for r in $(seq "$rounds"); do s+="${s:+,}$out/$1-$r.txt"; done; echo "$s"; }
echo "## $name $args, $np PEs (UCX_TLS=$tls, median of $rounds runs)"
"$out/bin/osu" compare -a goshmem -b OSHMEM "$(list goshmem)" "$(list oshmem)"
echo "floors, each round (C, same minutes):"
for r in $(seq "$rounds"); do echo "  round $r: $(tr '\n' ' ' <"$out/floor-$r.txt")"; done
echo "runs: $out" >&2
