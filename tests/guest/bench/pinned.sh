# Pinned-instance benchmark (prints figures; it checks only that every measurement was
# made): vfs_read pinned with a profile of 128 reasons, then the latency of
# `topdown show vfs_read --json` and of one scrape of `topdown serve` (busybox wget),
# median and worst of 5 each. Software emulation: read them as upper bounds.
. "$TD_LIB"
need_cmd topdown readloop wget elapsed
need_func vfs_read ksys_read

RUNS=5
rules="R0=ksys_read"
for i in $(seq 1 127); do rules="$rules;R$i=no_such_caller_$i"; done
topdown pin vfs_read --rules "$rules" 2>/dev/null || fail "pin failed"
readloop 10000 >/dev/null
[ "$(topdown show vfs_read --json | grep -o '{"reason":' | wc -l)" -ge 128 ] || fail "fewer than 128 reasons"

# ms FILE: median and worst of the elapsed lines in FILE, in ms.
ms() {
	sed -n 's/^elapsed: ns=//p' "$1" | sort -n | awk '{ v[NR] = $1 } END {
		printf "median %.1f ms, worst %.1f ms", v[int((NR + 1) / 2)] / 1e6, v[NR] / 1e6 }'
}

: >"$TD_TMP/show"
for r in $(seq $RUNS); do
	elapsed topdown show vfs_read --json 2>>"$TD_TMP/show" >/dev/null || fail "show failed"
done
topdown serve --listen 127.0.0.1:9477 2>"$TD_TMP/serve.err" &
serve_pid=$!
wait_line "$TD_TMP/serve.err" "serving http"
: >"$TD_TMP/scrape"
for r in $(seq $RUNS); do
	elapsed wget -q -O "$TD_TMP/metrics" http://127.0.0.1:9477/metrics 2>>"$TD_TMP/scrape" || fail "scrape failed"
done
kill -INT $serve_pid
wait $serve_pid
series=$(grep -c '^topdown_calls_total' "$TD_TMP/metrics")
topdown unpin vfs_read 2>/dev/null

echo "bench: kernel $TD_KERNEL, vfs_read pinned with 128 reasons, $RUNS runs each, software emulation"
echo "bench: topdown show vfs_read --json (the whole process; kallsyms only for new call sites): $(ms "$TD_TMP/show")"
echo "bench: one scrape of /metrics ($series topdown_calls_total series): $(ms "$TD_TMP/scrape")"
exit 0
