# Prometheus itself (Debian's server, copied in by tests/guest/run) scrapes topdown serve
# every second, with the rules the packages ship loaded
# (/usr/share/topdown/prometheus/topdown.rules.yml). The THP deferred-split function is
# pinned after a thp process has faulted its THPs in, so that what it counts is a
# ZAP-only workload of a known size: N half munmaps (on 6.12 and later,
# deferred_split_folio: one call each; on 6.1 and 5.10, deferred_split_huge_page, whose
# built-in profile names every call of thp ZAP: 256 at each half munmap and 256 more at
# exit). Asked over the HTTP API (PromQL), Prometheus answers topdown_calls_total of ZAP
# with the exact count, ZAP's share of the function as 1 (from the counters, and from
# their rates as docs/always-on.md writes it), the recording rules' share (1 for ZAP, 0
# for FAULT_ALLOC or UNMAP) and rate, and the alert TopdownHotReason pending for ZAP
# (it fires after 5 minutes: not waited for).
. "$TD_LIB"
need_cmd topdown thp wget prometheus
split_fn
F=$TD_SPLIT
N=8
if [ $F = deferred_split_huge_page ]; then
	WANT=$((512 * N)) OTHER=UNMAP
else
	WANT=$N OTHER=FAULT_ALLOC
fi
RULES=/usr/share/topdown/prometheus/topdown.rules.yml
[ -f $RULES ] || fail "no $RULES in the guest"
PROM=http://127.0.0.1:9090

# urlencode TEXT: TEXT with every byte %-escaped (valid in a query string).
urlencode() {
	printf '%s' "$1" | od -An -tx1 -v | tr -d ' \n' | sed 's/../%&/g'
}
# query PROMQL: the value of the one series PROMQL gives, now ("" if none); the
# answer is in $TD_TMP/answer.json.
query() {
	timeout 30 wget -q -O "$TD_TMP/answer.json" "$PROM/api/v1/query?query=$(urlencode "$1")" ||
		fail "query $1: request failed"
	grep -q '"status":"success"' "$TD_TMP/answer.json" || fail "query $1: $(cat "$TD_TMP/answer.json")"
	_n=$(grep -o '"value":\[' "$TD_TMP/answer.json" | wc -l)
	[ "$_n" -le 1 ] || fail "query $1: $_n series: $(cat "$TD_TMP/answer.json")"
	grep -o '"value":\[[^]]*\]' "$TD_TMP/answer.json" | sed 's/.*,"//; s/"\]$//'
}
# await PROMQL WANT: wait (up to 30 s; scrapes and rule evaluations are a second
# apart) until PROMQL's value is WANT, then print "ok: PROMQL = WANT".
await() {
	_i=0
	until [ "$(query "$1")" = "$2" ]; do
		_i=$((_i + 1))
		[ $_i -lt 150 ] || fail "$1: '$(query "$1")' after 30 s, want '$2': $(cat "$TD_TMP/answer.json")"
		sleep 0.2
	done
	echo "ok: $1 = $2"
}

# The THPs faulted in first: their calls (6.12 on: FAULT_ALLOC) are not counted.
thp_start --munmap-halves $N --wait-usr1
topdown pin $F 2>"$TD_TMP/pin.err" || fail "pin failed: $(cat "$TD_TMP/pin.err")"
topdown serve --listen 127.0.0.1:9476 2>"$TD_TMP/serve.err" &
serve_pid=$!
wait_line "$TD_TMP/serve.err" "serving http://127.0.0.1:9476/metrics"

cat >"$TD_TMP/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - $RULES
scrape_configs:
  - job_name: topdown
    static_configs:
      - targets: ["127.0.0.1:9476"]
EOF
# The TSDB on the case's directory, in /tmp: a tmpfs.
prometheus --config.file="$TD_TMP/prometheus.yml" --storage.tsdb.path="$TD_TMP/tsdb" \
	--web.listen-address=127.0.0.1:9090 2>"$TD_TMP/prometheus.log" &
prom_pid=$!
t0=$(uptime_cs)
wait_line "$TD_TMP/prometheus.log" "Server is ready to receive web requests" 60
echo "prometheus: ready in $(($(uptime_cs) - t0)) cs"
grep -q 'msg="Completed loading of configuration file"' "$TD_TMP/prometheus.log" ||
	fail "configuration not loaded: $(cat "$TD_TMP/prometheus.log")"
await 'up{job="topdown"}' 1
# Before the workload: a first sample of ZAP's counter, at 0.
await "topdown_calls_total{function=\"$F\",reason=\"ZAP\"}" 0

# The workload: ZAP only.
kill -USR1 $thp_pid
wait_exit $thp_pid thp || fail "thp failed: $(cat "$TD_TMP/thp.out")"
cat "$TD_TMP/thp.out"
await "topdown_calls_total{function=\"$F\",reason=\"ZAP\"}" $WANT
await "sum(topdown_calls_total{function=\"$F\"})" $WANT
await "sum(topdown_calls_total{function=\"$F\",reason=\"ZAP\"}) / sum(topdown_calls_total{function=\"$F\"})" 1
# As docs/always-on.md gives it: the share of one reason over the last five minutes.
await "sum by (instance) (rate(topdown_calls_total{function=\"$F\",reason=\"ZAP\"}[5m])) / sum by (instance) (rate(topdown_calls_total{function=\"$F\"}[5m]))" 1
# The shipped recording rules and alert.
await "function_reason:topdown_calls:share5m{function=\"$F\",reason=\"ZAP\"}" 1
await "function_reason:topdown_calls:share5m{function=\"$F\",reason=\"$OTHER\"}" 0
# The function's rate, all of it ZAP's (one query: the rates move at every evaluation).
rate=$(query "function:topdown_calls:rate5m{function=\"$F\"}")
echo "function:topdown_calls:rate5m{function=\"$F\"} = $rate calls/s"
case $rate in "" | 0 | 0.0) fail "function:topdown_calls:rate5m: '$rate'" ;; esac
await "function:topdown_calls:rate5m{function=\"$F\"} - ignoring (reason) function_reason:topdown_calls:rate5m{function=\"$F\",reason=\"ZAP\"}" 0
await "ALERTS{alertname=\"TopdownHotReason\",alertstate=\"pending\",function=\"$F\",reason=\"ZAP\"}" 1
await "count(ALERTS{alertname=\"TopdownHotReason\"})" 1
echo "answer: $(cat "$TD_TMP/answer.json")"
echo "prometheus: $(awk '/^VmRSS/ { print $2, $3 }' /proc/$prom_pid/status) resident;" \
	"guest: $(awk '/^MemAvailable/ { print $2, $3 }' /proc/meminfo) available"

kill $prom_pid
wait_exit $prom_pid prometheus || fail "prometheus exited with $?"
kill -INT $serve_pid
wait_exit $serve_pid "topdown serve" || fail "serve exited with $?"
topdown unpin $F || fail "unpin failed"
expect_progs "programs left" 0
exit 0
