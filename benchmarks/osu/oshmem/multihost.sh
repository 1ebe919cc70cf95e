#!/usr/bin/env bash
# multihost.sh: sidebyside.sh across hosts. It makes HOSTS "hosts" out of
# namespaces (each with its own network, joined to this one by a bridge,
# and its own IPC, host name and /dev/shm, as launcher/e2e/multihost_test.go
# makes them), and runs the OSU-style tests with goshmem (benchmarks/osu
# through goshmem-run -hosts) and with the reference OpenSHMEM (osu_oshm.c
# through oshrun --host, its remote agent entering the namespaces) on the
# same hosts, interleaved, PPN PEs per host. It prints one comparison table
# per test and layout, the median of ROUNDS runs of each side, with plots.
#
#   benchmarks/osu/oshmem/multihost.sh [OUTDIR]
#
# Environment: HOSTS (default 2), PPNS (PEs per host, default "1 2"), TESTS
# (default "put get atomics barrier broadcast reduce collect alltoall"),
# ROUNDS (default 5), ARGS (extra flags of both sides, e.g. "-max 65536"),
# CORES_PER_HOST (default unset: every host's processes run on all of this
# machine's cores; k: host i's processes are bound to cores of their own,
# (i-1)*k to i*k-1 modulo the machine's, as on hosts of k cores each).
# Both sides fill each host before the next (PE i < n/2 works with PE
# i+n/2, on the other host) and use their default transports: shared
# memory within a host, tcp (the hosts' eth0) between hosts. oshrun binds
# nothing: each host's daemon would otherwise bind its PEs from core 0
# on, and every host's first PE would share one core. Needs root, ip(8),
# unshare, nsenter, oshcc and oshrun (Debian: iproute2 util-linux
# openmpi-bin libopenmpi-dev).
#
# However it ends (done, failed, Ctrl-C, SIGTERM, SIGHUP), it ends every
# process it started and every process left in the hosts' namespaces,
# removes the bridge and the veth pairs, and says what it could not
# remove; the hosts' /dev/shm are tmpfs mounts of their own, gone with
# their last process.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
out=${1:-$(mktemp -d /tmp/osu-multihost.XXXXXX)}
nhosts=${HOSTS:-2}
ppns=${PPNS:-1 2}
tests=${TESTS:-put get atomics barrier broadcast reduce collect alltoall}
rounds=${ROUNDS:-5}
args=${ARGS:-}

[ "$(id -u)" = 0 ] || { echo "multihost: needs root (namespaces, veth pairs, a bridge)" >&2; exit 2; }
for tool in ip unshare nsenter taskset oshcc oshrun go; do
	command -v "$tool" >/dev/null || { echo "multihost: $tool not found" >&2; exit 2; }
done
id=$(printf '%04x' $((RANDOM % 65536)))
bridge=gsb$id
holders=()
netns=() # the inode numbers of the hosts' network namespaces
job=     # the process group of the run under way (timeout leads one)
# inns prints the processes of this machine in the hosts' namespaces.
inns() {
	[ ${#netns[@]} -gt 0 ] || return 0
	stat -L -c '%i %n' /proc/[0-9]*/ns/net 2>/dev/null |
		awk -v want=" ${netns[*]} " 'index(want, " " $1 " ") { split($2, f, "/"); print f[3] }'
	return 0
}
cleanup() {
	set +e
	trap '' INT TERM HUP
	[ -n "$job" ] && kill -TERM -- "-$job" 2>/dev/null
	local pids
	pids=$(inns)
	# shellcheck disable=SC2086
	[ -n "$pids" ] && kill -TERM $pids 2>/dev/null
	for _ in 1 2 3 4 5 6 7 8 9 10; do
		pids=$(inns)
		[ -z "$pids" ] && break
		sleep 0.3
	done
	# shellcheck disable=SC2086
	[ -n "$pids" ] && kill -KILL $pids 2>/dev/null
	[ -n "$job" ] && kill -KILL -- "-$job" 2>/dev/null
	for p in "${holders[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
	wait 2>/dev/null
	ip link del "$bridge" 2>/dev/null || true
	for _ in 1 2 3 4 5 6 7 8 9 10; do
		pids=$(inns)
		[ -z "$pids" ] && ! ip -o link show 2>/dev/null | grep -q "gsv$id" && break
		sleep 0.3
	done
	[ -n "$pids" ] && echo "multihost: processes left in the hosts' namespaces: $pids" >&2
	if ip -o link show 2>/dev/null | grep -q "gs[bv]$id"; then
		echo "multihost: links left: $(ip -o link show | grep -o "gs[bv]$id[0-9]*" | paste -sd' ')" >&2
	fi
	return 0
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP
# run runs a command under timeout in a process group of its own, in the
# background, and waits for it: a signal to this script is handled at
# once (bash runs a trap only after the foreground command ends), and
# cleanup ends the whole group.
run() {
	local rc=0
	timeout 600 "$@" &
	job=$!
	wait "$job" || rc=$?
	job=
	return "$rc"
}
mkdir -p "$out/bin" "$out/ns"
run oshcc -O2 -o "$out/bin/osu_oshm" "$here/osu_oshm.c"
run go -C "$root" build -o "$out/bin/" ./launcher/cmd/goshmem-run ./benchmarks/osu

# The hosts: 10.X.Y.11, .12, ... behind a bridge at 10.X.Y.1; each is
# named by its address (oshrun then needs no name service), and held by a
# sleeping process whose pid the remote shell enters.
subnet=10.$((100 + RANDOM % 100)).$((RANDOM % 256))
seed=$subnet.1
ip link add "$bridge" type bridge
ip addr add "$seed/24" dev "$bridge"
ip link set "$bridge" up
hosts=()
for i in $(seq "$nhosts"); do
	h=$subnet.$((10 + i))
	fifo=$out/ns/$h.ready
	mkfifo "$fifo"
	unshare --net --ipc --uts --mount --propagation private -- sh -c \
		"mount -t tmpfs -o mode=1777 tmpfs /dev/shm && hostname h$i && ip link set lo up && echo ready >$fifo && exec sleep 100000" &
	pid=$!
	holders+=("$pid")
	read -r _ <"$fifo"
	veth=gsv$id$i
	ip link add "$veth" type veth peer name eth0 netns "$pid"
	ip link set "$veth" master "$bridge" up
	nsenter -t "$pid" -n ip addr add "$h/24" dev eth0
	nsenter -t "$pid" -n ip link set eth0 up
	echo "$pid" >"$out/ns/$h.pid"
	netns+=("$(stat -L -c %i "/proc/$pid/ns/net")")
	cores=0-$(($(nproc) - 1))
	if [ -n "${CORES_PER_HOST:-}" ]; then
		cores=$(seq $(((i - 1) * CORES_PER_HOST)) $((i * CORES_PER_HOST - 1)) | awk -v n="$(nproc)" '{print $1 % n}' | paste -sd,)
	fi
	echo "$cores" >"$out/ns/$h.cores"
	hosts+=("$h")
done
rsh=$out/ns/nsrsh
cat >"$rsh" <<EOF
#!/bin/sh
host=\$1; shift
exec taskset -c "\$(cat "$out/ns/\$host.cores")" nsenter -t "\$(cat "$out/ns/\$host.pid")" -n -i -u -m -- "\$@"
EOF
# oshrun's agent gets its command as one string, for a shell, as ssh does.
shrsh=$out/ns/nsrsh-sh
cat >"$shrsh" <<EOF
#!/bin/sh
host=\$1; shift
exec taskset -c "\$(cat "$out/ns/\$host.cores")" nsenter -t "\$(cat "$out/ns/\$host.pid")" -n -i -u -m -- sh -c "\$*"
EOF
chmod +x "$rsh" "$shrsh"

for ppn in $ppns; do
	np=$((nhosts * ppn))
	hl=$(printf "%s:$ppn," "${hosts[@]}")
	hl=${hl%,}
	for t in $tests; do
		for r in $(seq "$rounds"); do
			# shellcheck disable=SC2086
			run oshrun --allow-run-as-root --oversubscribe -np "$np" --host "$hl" --map-by slot --bind-to none \
				--mca plm_rsh_agent "$shrsh" --mca oob_tcp_if_include "$subnet.0/24" \
				-x UCX_NET_DEVICES=eth0 -x PATH \
				"$out/bin/osu_oshm" "$t" -precision 3 $args >"$out/oshmem-$t-$nhosts"x"$ppn-$r.txt" 2>"$out/oshmem-$t-$nhosts"x"$ppn-$r.err" || true
			# shellcheck disable=SC2086
			run "$out/bin/goshmem-run" -hosts "$hl" -rsh "$rsh" -bind "$seed" \
				"$out/bin/osu" "$t" -precision 3 $args >"$out/goshmem-$t-$nhosts"x"$ppn-$r.txt" 2>"$out/goshmem-$t-$nhosts"x"$ppn-$r.err" || true
		done
		list() { local s=; for r in $(seq "$rounds"); do s+="${s:+,}$out/$1-$t-$nhosts"x"$ppn-$r.txt"; done; echo "$s"; }
		echo "## $t, $nhosts hosts x $ppn PEs (median of $rounds runs)"
		"$out/bin/osu" compare -a goshmem -b OSHMEM -svg "$out/$t-$nhosts"x"$ppn.svg" "$(list goshmem)" "$(list oshmem)" || true
		echo
	done
done
echo "runs and plots: $out" >&2
