# One poll's cost at the guest's CPU count (prints figures; it checks only that every
# measurement was made): tests/guest/run --smp N, for N of 2, 8, 16 in turn. topdown
# vfs_read --no-profile --min-events 1000000000 (its 50 ms polls, capture never on) runs
# SECS seconds with a read loop on every CPU (every CPU's per-CPU values hold counts),
# then SECS seconds idle; topdown's CPU time (user + system, 10 ms ticks) over each
# stretch, per poll (20 a second); then the time from SIGINT to its exit, summary
# printed. Software emulation: read the growth with the CPU count, not the times.
# case-timeout: 600
. "$TD_LIB"
. /bench/lib.sh
need_cmd topdown readloop taskset
need_func vfs_read
SECS=${TD_BENCH_SECS:-10}
n=$(nproc)

# stretch: topdown's CPU ticks and the guest's hundredths of a second over SECS seconds.
stretch() {
	_t=$(cpu_ticks "$TD_PID") _s=$(uptime_cs)
	sleep "$SECS"
	echo "$(($(cpu_ticks "$TD_PID") - _t)) $(($(uptime_cs) - _s))"
}
td_start vfs_read --no-profile --min-events 1000000000
sleep 1
touch "$TD_TMP/go"
loops=
for c in $(seq 0 $((n - 1))); do
	(while [ -e "$TD_TMP/go" ]; do taskset -c "$c" readloop 20000 >/dev/null 2>&1 || exit 1; done) &
	loops="$loops $!"
done
sleep 1
busy=$(stretch)
rm -f "$TD_TMP/go"
for p in $loops; do wait "$p" || fail "a read loop failed"; done
sleep 1
idle=$(stretch)
s3=$(uptime_cs)
kill -INT "$TD_PID"
wait_exit "$TD_PID" "topdown" || fail "topdown exited with $?"
s4=$(uptime_cs)
grep -q '"type":"summary"' "$TD_OUT" || fail "no summary"
echo "bench: kernel $TD_KERNEL, $n CPUs, software emulation (read the growth with the CPU count)"
awk -v n="$n" -v hz="$TD_HZ" -v busy="$busy" -v idle="$idle" -v end=$((s4 - s3)) 'BEGIN {
	split(busy, b, " "); split(idle, i, " ")
	printf "bench: %d CPUs: topdown %.2f ms of CPU a poll with a read loop on every CPU, %.2f ms idle (20 polls a second); SIGINT to exit, summary printed: %d ms\n",
		n, b[1] * 1000 / hz / (b[2] / 100 * 20), i[1] * 1000 / hz / (i[2] / 100 * 20), end * 10 }'
