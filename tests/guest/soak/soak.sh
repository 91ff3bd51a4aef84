# case-timeout: 3000
# The soak (opt-in: TOPDOWN_TEST_SOAK=1 tests/run; not in CI's time): vfs_read pinned,
# read without a pause by a loop on CPU 1 (one reason holds nearly every call, so
# `serve --capture` captures it) and by the mixed busybox pass every 10 s (other
# callers), for TD_SOAK_MINUTES minutes (30 unless the case file is edited: settings do
# not pass into the guest). `topdown serve --capture` is scraped every second, and a
# 5 s pprof window is asked for every 30 s. Checks: every scrape answers; every counter
# (each *_total series) only grows from scrape to scrape; every pprof window is a gzip
# stream; serve's open file descriptors do not grow (the fewest over the last third of
# the run against the most over the first), nor its memory (RSS) by more than a tenth
# over the second half. Prints, a line a minute: serve's RSS, open descriptors, CPU
# time per scrape (the minute's CPU over its scrapes, pprof windows and capture
# included), the slowest scrape, and the calls counted.
. "$TD_LIB"
. /bench/lib.sh
need_cmd topdown readloop wget gunzip elapsed taskset
need_func vfs_read
MINUTES=${TD_SOAK_MINUTES:-30}
URL=http://127.0.0.1:9477

topdown pin vfs_read 2>/dev/null || fail "pin failed"
topdown serve --capture --listen 127.0.0.1:9477 2>"$TD_TMP/serve.err" &
serve_pid=$!
wait_line "$TD_TMP/serve.err" "serving http"

mixed_tree
touch "$TD_TMP/go"
(while [ -e "$TD_TMP/go" ]; do taskset -c 1 readloop 20000 >/dev/null 2>&1 || exit 1; done) &
reader=$!
(while [ -e "$TD_TMP/go" ]; do mixed; sleep 10; done) &
mixer=$!

rss_kib() { awk '/^VmRSS/ { print $2 }' "/proc/$1/status"; }
fds() { find "/proc/$1/fd" -mindepth 1 -maxdepth 1 | wc -l; }

# grown OLD NEW: fails unless every *_total series of scrape OLD is in NEW with a value
# no smaller.
grown() {
	awk '
		/^#/ || !/_total[{ ]/ { next }
		FILENAME == ARGV[1] { old[$1] = $2; next }
		{ new[$1] = $2 }
		END {
			for (s in old) {
				if (!(s in new)) { print "gone: " s; bad = 1 }
				else if (new[s] + 0 < old[s] + 0) { print "fell: " s " " old[s] " -> " new[s]; bad = 1 }
			}
			exit bad
		}' "$1" "$2" >"$TD_TMP/grown" || fail "a counter did not grow, scrape $n: $(head -3 "$TD_TMP/grown")"
}

: >"$TD_TMP/curve"
n=0 windows=0 minute=0 slowest=0
ticks0=$(cpu_ticks $serve_pid) scrapes0=0
end=$(($(date +%s) + MINUTES * 60))
next_minute=$(($(date +%s) + 60))
while [ "$(date +%s)" -lt $end ]; do
	n=$((n + 1))
	elapsed wget -q -O "$TD_TMP/m.$((n % 2))" "$URL/metrics" 2>"$TD_TMP/el" >/dev/null ||
		fail "scrape $n failed: $(cat "$TD_TMP/el")"
	ns=$(sed -n 's/^elapsed: ns=//p' "$TD_TMP/el")
	[ "$ns" -le "$slowest" ] || slowest=$ns
	[ $n -eq 1 ] || grown "$TD_TMP/m.$(((n - 1) % 2))" "$TD_TMP/m.$((n % 2))"
	if [ $((n % 30)) -eq 1 ]; then
		windows=$((windows + 1))
		(wget -q -O "$TD_TMP/w.pb.gz" "$URL/debug/pprof/topdown?seconds=5" &&
			gunzip -t "$TD_TMP/w.pb.gz" && echo ok) >"$TD_TMP/window.$windows" 2>&1 &
	fi
	if [ "$(date +%s)" -ge $next_minute ]; then
		minute=$((minute + 1)) next_minute=$((next_minute + 60))
		ticks=$(cpu_ticks $serve_pid)
		calls=$(awk '/^topdown_calls_total/ { s += $2 } END { printf "%d", s }' "$TD_TMP/m.$((n % 2))")
		echo "$minute $(rss_kib $serve_pid) $(fds $serve_pid) $ticks $((n - scrapes0)) $slowest $calls" >>"$TD_TMP/curve"
		awk -v hz="$TD_HZ" '{ l = $0 } END { split(l, f, " ")
			printf "soak: minute %d: serve RSS %d KiB, %d fds, %.1f ms CPU a scrape, slowest scrape %.1f ms, %d calls counted\n",
				f[1], f[2], f[3], (f[4] - t0) * 1000 / hz / f[5], f[6] / 1e6, f[7] }' t0="$ticks0" "$TD_TMP/curve"
		ticks0=$ticks scrapes0=$n slowest=0
	fi
	sleep 1
done
rm -f "$TD_TMP/go"
wait $reader || fail "the read loop failed"
wait $mixer
sleep 6
for w in $(seq $windows); do
	grep -qx ok "$TD_TMP/window.$w" || fail "pprof window $w: $(cat "$TD_TMP/window.$w")"
done
echo "ok: $n scrapes, $windows pprof windows, counters only grew"

# Flat: descriptors, the fewest over the last third of the run against the most over
# the first (a pprof window in flight holds one more for its 5 s: a leak raises the
# floor); RSS over the second half.
awk -v m="$MINUTES" '
	$1 <= m / 3 && $3 > early { early = $3 }
	$1 > m - m / 3 && (late == "" || $3 < late) { late = $3 }
	$1 == int(m / 2) { rss0 = $2 }
	END {
		if (late > early) { printf "serve had at most %d fds in the first third of the run, at least %d in the last\n", early, late; bad = 1 }
		if (rss0 && $2 > rss0 * 1.1) { printf "serve RSS grew from %d KiB at minute %d to %d KiB\n", rss0, int(m / 2), $2; bad = 1 }
		exit bad
	}' "$TD_TMP/curve" >"$TD_TMP/flat" || fail "$(cat "$TD_TMP/flat")"
echo "ok: serve's descriptors and memory flat ($(wc -l <"$TD_TMP/curve") minutes)"
kill -INT $serve_pid
wait_exit $serve_pid "topdown serve" || fail "serve exited with $?"
topdown unpin vfs_read || fail "unpin failed"
