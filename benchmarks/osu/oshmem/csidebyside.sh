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
# Environment: NP (PEs, default 2), ROUNDS (default 3), TLS (UCX_TLS of
# both sides, default sm,self), ARGS (the program's arguments),
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
rounds=${ROUNDS:-3}
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

for r in $(seq "$rounds"); do
	# shellcheck disable=SC2086
	timeout 600 oshrun --allow-run-as-root --oversubscribe -np "$np" -x UCX_TLS="$tls" \
		"$out/bin/$name-oshmem" $args >"$out/oshmem-$r.txt" 2>/dev/null || true
	# shellcheck disable=SC2086
	UCX_TLS=$tls timeout 600 "$prefix/bin/goshmem-run" -np "$np" "$out/bin/$name-goshmem" $args >"$out/goshmem-$r.txt"
done
list() { local s=; for r in $(seq "$rounds"); do s+="${s:+,}$out/$1-$r.txt"; done; echo "$s"; }
echo "## $name $args, $np PEs (UCX_TLS=$tls, median of $rounds runs)"
"$out/bin/osu" compare -a goshmem -b OSHMEM "$(list goshmem)" "$(list oshmem)"
echo "runs: $out" >&2
