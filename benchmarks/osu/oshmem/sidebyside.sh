#!/usr/bin/env bash
# sidebyside.sh: runs the OSU-style tests with goshmem (benchmarks/osu) and
# with the reference OpenSHMEM (osu_oshm.c beside this file, built with
# oshcc), interleaved on the same machine, and prints one comparison table
# per test and PE count: the median of ROUNDS runs of each side.
#
#   benchmarks/osu/oshmem/sidebyside.sh [OUTDIR]
#
# Environment: NPS (PE counts, default "2 4"), TESTS (default "put get
# atomics barrier broadcast reduce collect fcollect"), ROUNDS (default 3),
# TLS (UCX_TLS of both sides, default sm,self), ARGS (extra flags of both
# sides, e.g. "-max 65536"). Needs oshcc and oshrun (Debian: openmpi-bin
# libopenmpi-dev). The reference build segfaults in shmem_finalize after
# its output (see shared/ANCHORS.md); its tables are still complete.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
out=${1:-$(mktemp -d /tmp/osu-sidebyside.XXXXXX)}
nps=${NPS:-2 4}
tests=${TESTS:-put get atomics barrier broadcast reduce collect fcollect}
rounds=${ROUNDS:-3}
tls=${TLS:-sm,self}
args=${ARGS:-}

for tool in oshcc oshrun go; do
	command -v "$tool" >/dev/null || { echo "sidebyside: $tool not found (apt-get install -y openmpi-bin libopenmpi-dev)" >&2; exit 2; }
done
mkdir -p "$out/bin"
oshcc -O2 -o "$out/bin/osu_oshm" "$here/osu_oshm.c"
(cd "$root" && go build -o "$out/bin/" ./launcher/cmd/goshmem-run ./benchmarks/osu)

for np in $nps; do
	for t in $tests; do
		for r in $(seq "$rounds"); do
			# shellcheck disable=SC2086
			timeout 600 oshrun --allow-run-as-root --oversubscribe -np "$np" -x UCX_TLS="$tls" \
				"$out/bin/osu_oshm" "$t" -precision 3 $args >"$out/oshmem-$t-np$np-$r.txt" 2>/dev/null || true
			# shellcheck disable=SC2086
			UCX_TLS=$tls timeout 600 "$out/bin/goshmem-run" -np "$np" "$out/bin/osu" "$t" -precision 3 $args \
				>"$out/goshmem-$t-np$np-$r.txt"
		done
		list() { local s=; for r in $(seq "$rounds"); do s+="${s:+,}$out/$1-$t-np$np-$r.txt"; done; echo "$s"; }
		echo "## $t, $np PEs (UCX_TLS=$tls, median of $rounds runs)"
		"$out/bin/osu" compare -a goshmem -b OSHMEM -svg "$out/$t-np$np.svg" "$(list goshmem)" "$(list oshmem)"
		echo
	done
done
echo "runs and plots: $out" >&2
