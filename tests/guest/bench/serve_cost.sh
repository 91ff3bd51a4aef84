# case-timeout: 400
# The cost of topdown serve --capture over a long run (prints figures; checks only that
# every measurement was made): deferred_split_folio pinned, a THP workload that keeps
# its FAULT_ALLOC and ZAP reasons taking turns, /metrics scraped and a 14-second pprof
# profile taken every 15 s (a Prometheus and an Alloy scrape of 15 s) for RUN seconds.
# Serve's CPU time (user + system, from /proc/PID/stat) and resident memory are read at
# the start and the end; per scrape: the CPU time of 20 back-to-back /metrics scrapes.
# Software emulation makes every CPU figure larger than on hardware.
. "$TD_LIB"
need_cmd topdown thp wget
need_func deferred_split_folio

RUN=${TD_SERVE_COST_SECS:-300}
URL=http://127.0.0.1:9478
F=deferred_split_folio
cpu() { awk -v hz="$(getconf CLK_TCK 2>/dev/null || echo 100)" '{ printf "%.2f", ($14 + $15) / hz }' "/proc/$1/stat"; }
rss() { awk '/^VmRSS/ { print $2 }' "/proc/$1/status"; }

topdown pin $F 2>/dev/null || fail "pin failed"
topdown serve --capture --listen 127.0.0.1:9478 2>"$TD_TMP/serve.err" &
pid=$!
wait_line "$TD_TMP/serve.err" "watching for a reason to take over"
touch "$TD_TMP/go"
(while [ -e "$TD_TMP/go" ]; do thp --faults 20 --munmap-halves 20 --unmap-gap-ms 20 >/dev/null 2>&1; sleep 1; done) &
load=$!
sleep 2
c0=$(cpu $pid)
r0=$(rss $pid)
start=$(date +%s)
scrapes=0
while [ $(($(date +%s) - start)) -lt "$RUN" ]; do
	wget -q -O /dev/null $URL/metrics || fail "scrape failed"
	wget -q -O "$TD_TMP/p.gz" "$URL/debug/pprof/topdown?seconds=14" || fail "pprof failed"
	scrapes=$((scrapes + 1))
done
secs=$(($(date +%s) - start))
c1=$(cpu $pid)
r1=$(rss $pid)
rm "$TD_TMP/go"
wait $load
m0=$(cpu $pid)
i=0
while [ $i -lt 20 ]; do wget -q -O /dev/null $URL/metrics || fail "scrape failed"; i=$((i + 1)); done
m1=$(cpu $pid)
stacks=$(wget -q -O - $URL/metrics | grep '^topdown_stacks_total' | awk '{ s += $NF } END { print s + 0 }')
switches=$(grep -c "of calls" "$TD_TMP/serve.err")
kill -INT $pid
wait $pid || fail "serve exited with $?"
topdown unpin $F 2>/dev/null
echo "serve --capture over ${secs}s: $scrapes scrape pairs (/metrics + 14 s pprof), $switches switches, $stacks stacks"
echo "serve CPU: $(awk -v a=$c0 -v b=$c1 -v s=$secs 'BEGIN { printf "%.2f s over the run, %.1f s per hour", b - a, (b - a) * 3600 / s }')"
echo "serve CPU per /metrics scrape: $(awk -v a=$m0 -v b=$m1 'BEGIN { printf "%.1f ms", (b - a) * 1000 / 20 }')"
echo "serve CPU per scrape pair (run CPU / pairs): $(awk -v a=$c0 -v b=$c1 -v n=$scrapes 'BEGIN { printf "%.1f ms", (b - a) * 1000 / n }')"
echo "serve RSS: ${r0} KiB at the start, ${r1} KiB at the end"
[ -n "$c1" ] && [ -n "$r1" ] && [ "$scrapes" -gt 0 ] || fail "a measurement is missing"
exit 0
