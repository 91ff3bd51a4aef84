# go tool pprof (Debian's golang-go; tests/guest/run copies the go command and its pprof
# tool in) reads the profile topdown serve --capture serves at /debug/pprof/topdown: -top
# and -traces show the ZAP path's kernel frames, -tagfocus reason=R keeps R's samples
# only, and the samples add up to the growth of topdown_stacks_total over the window
# (/metrics scraped before the window opens and after it ends, with no call of the
# function outside it), in all and per reason. On 6.12 and later (deferred_split_folio)
# the window holds two reasons: THP faults make FAULT_ALLOC take over, then half munmaps
# move capture to ZAP; a tagfocus on a third reason, MADV_COLLAPSE, keeps nothing. On 6.1
# and 5.10 (deferred_split_huge_page, whose built-in profile names every call of thp ZAP:
# 256 at each half munmap and 256 more at exit) it holds ZAP's stacks alone, and UNMAP
# keeps nothing.
. "$TD_LIB"
need_cmd topdown thp wget go
split_fn
thp_callers
F=$TD_SPLIT
N=24
if [ $F = deferred_split_huge_page ]; then
	RMAP=page_remove_rmap REASONS=ZAP NONE=UNMAP
else
	RMAP=folio_remove_rmap_ptes REASONS="FAULT_ALLOC ZAP" NONE=MADV_COLLAPSE
fi
# go tool pprof reads a file and stays off the network (the guest has none anyway):
# no symbolization (the profile names its frames), no home or cache of the host's.
export HOME=$TD_TMP GOCACHE=$TD_TMP/gocache GOPATH=$TD_TMP/go GOFLAGS='' GOPROXY=off
URL=http://127.0.0.1:9476
# stacks N REASON: topdown_stacks_total of F and REASON in scrape N ($TD_TMP/metrics.N;
# 0 if it has no such series: no capture of REASON yet).
stacks() {
	_v=$(grep "^topdown_stacks_total{function=\"$F\",reason=\"$2\"} " "$TD_TMP/metrics.$1" | sed 's/.* //')
	echo "${_v:-0}"
}
# grown REASON: REASON's stacks captured from scrape 0 to scrape 1.
grown() {
	echo $(($(stacks 1 "$1") - $(stacks 0 "$1")))
}
# pprof_total ARGS...: the sum of the sample values of `go tool pprof ARGS -raw` (the
# profile after ARGS's filters), from its sample lines ("   VALUE: LOCATION-IDS...").
pprof_total() {
	go tool pprof -symbolize=none "$@" -raw "$TD_TMP/prof.gz" >"$TD_TMP/raw.txt" 2>"$TD_TMP/raw.err" ||
		fail "go tool pprof $* -raw: $(cat "$TD_TMP/raw.err")"
	awk '/^Samples:/ { s = 1; next } /^Locations/ { s = 0 } s && /^ *[0-9]+: / { sub(/:.*/, ""); t += $1 } END { print t + 0 }' \
		"$TD_TMP/raw.txt"
}

topdown pin $F 2>"$TD_TMP/pin.err" || fail "pin failed: $(cat "$TD_TMP/pin.err")"
topdown serve --capture --listen 127.0.0.1:9476 --min-rate 5 --min-events 3 2>"$TD_TMP/serve.err" &
serve_pid=$!
wait_line "$TD_TMP/serve.err" "^topdown: $F: watching for a reason to take over (threshold 80%)"

http_get $URL/metrics "$TD_TMP/metrics.0" || fail "scrape failed"
# The window: opened by a thread of serve's own, started for the request. The workload
# begins once that thread is there, so that its every stack falls in the window; the
# window (W s) outlasts the workload by seconds, checked below: stacks still on their
# way when it ends would be counted on /metrics but be missing from the profile.
W=10
threads() { awk '/^Threads:/ { print $2 }' /proc/$serve_pid/status; }
t0=$(threads)
timeout 60 wget -q -O "$TD_TMP/prof.gz" "$URL/debug/pprof/topdown?seconds=$W&function=$F" &
wget_pid=$!
opened=$(uptime_cs)
_i=0
until [ "$(threads)" -gt "$t0" ]; do
	_i=$((_i + 1))
	[ $_i -lt 300 ] || fail "no thread for the profile request in 30 s (threads: $(threads))"
	sleep 0.1
done
echo "serve's threads: $t0, $(threads) with the window open"

if [ $F = deferred_split_huge_page ]; then
	thp --munmap-halves $N --unmap-gap-ms 50 >"$TD_TMP/thp.out" 2>&1 || fail "thp failed: $(cat "$TD_TMP/thp.out")"
	wait_line "$TD_TMP/serve.err" "^topdown: $F: ZAP has .* of calls (.*threshold 80%): capturing its stacks"
else
	# The faults 20 ms apart, the half munmaps 50 ms apart: each reason's burst outlasts
	# the trigger's reaction (see topdown_serve_capture).
	thp_start --munmap-halves $N --wait-usr1 --unmap-gap-ms 50 --fault-gap-ms 20
	wait_line "$TD_TMP/serve.err" "^topdown: $F: FAULT_ALLOC has 100.0% of calls (.*threshold 80%): capturing its stacks"
	kill -USR1 "$thp_pid"
	wait_exit "$thp_pid" thp || fail "thp failed: $(cat "$TD_TMP/thp.out")"
	wait_line "$TD_TMP/serve.err" "^topdown: $F: ZAP has 100.0% of calls (.*threshold 80%): moving stack capture from FAULT_ALLOC"
fi
done_at=$(uptime_cs)
echo "workload done $((done_at - opened)) cs after the window opened ($W s)"
[ $((done_at - opened)) -le $((100 * (W - 2))) ] && kill -0 $wget_pid 2>/dev/null ||
	fail "the workload ended less than 2 s before the window ($W s): a host too busy for this case"
wait $wget_pid || fail "the profile request failed"
cat "$TD_TMP/serve.err"
http_get $URL/metrics "$TD_TMP/metrics.1" || fail "scrape failed"
all=0
for r in $REASONS; do
	echo "stacks of $r: $(stacks 0 $r) before the window, $(grown $r) in it"
	all=$((all + $(grown $r)))
done
[ "$(grown ZAP)" -gt 0 ] || fail "no ZAP stacks in the window"

# -top: the ZAP path's frames; its header's total, the stacks.
go tool pprof -symbolize=none -top "$TD_TMP/prof.gz" >"$TD_TMP/top.txt" 2>"$TD_TMP/top.err" ||
	fail "go tool pprof -top: $(cat "$TD_TMP/top.err")"
echo "--- go tool pprof -top"
cat "$TD_TMP/top.err" "$TD_TMP/top.txt"
echo "---"
for fr in $RMAP "$TD_ZAP_WALK"; do
	grep -q " $fr\$" "$TD_TMP/top.txt" || fail "-top lacks the frame $fr"
done
grep -q "of $all total" "$TD_TMP/top.txt" || fail "-top: no 'of $all total': $(grep total "$TD_TMP/top.txt")"
expect_eq "samples' total (-raw) = stacks grown" "$(pprof_total)" $all

# -traces: each sample's stack, with its labels.
go tool pprof -symbolize=none -traces "$TD_TMP/prof.gz" >"$TD_TMP/traces.txt" 2>"$TD_TMP/traces.err" ||
	fail "go tool pprof -traces: $(cat "$TD_TMP/traces.err")"
echo "--- go tool pprof -traces (its first 40 lines)"
head -n 40 "$TD_TMP/traces.txt"
echo "---"
for fr in $RMAP "$TD_ZAP_WALK"; do
	grep -q " $fr\$" "$TD_TMP/traces.txt" || fail "-traces lacks the frame $fr"
done
for r in $REASONS; do
	grep -qx " *reason: *$r" "$TD_TMP/traces.txt" || fail "-traces shows no reason label $r"
done
grep -qx " *reason: *$NONE" "$TD_TMP/traces.txt" && fail "-traces shows the reason label $NONE"
grep -qx " *comm: *thp" "$TD_TMP/traces.txt" || fail "-traces shows no comm label thp"
grep -qx " *function: *$F" "$TD_TMP/traces.txt" || fail "-traces shows no function label $F"

# -tagfocus: one reason's samples, exactly its stacks; a reason without any, nothing.
for r in $REASONS; do
	expect_eq "-tagfocus reason=$r: total" "$(pprof_total -tagfocus "reason=$r")" "$(grown $r)"
done
go tool pprof -symbolize=none -tagfocus reason=ZAP -top "$TD_TMP/prof.gz" >"$TD_TMP/zap.txt" 2>&1 ||
	fail "go tool pprof -tagfocus reason=ZAP -top: $(cat "$TD_TMP/zap.txt")"
grep -q " $RMAP\$" "$TD_TMP/zap.txt" || fail "-tagfocus reason=ZAP: no $RMAP"
if [ $F = deferred_split_folio ]; then
	grep -q " $TD_THP_FAULT\$" "$TD_TMP/top.txt" || fail "-top lacks the fault's frame $TD_THP_FAULT"
	grep -q " $TD_THP_FAULT\$" "$TD_TMP/zap.txt" && fail "-tagfocus reason=ZAP keeps $TD_THP_FAULT"
fi
expect_eq "-tagfocus reason=$NONE: total" "$(pprof_total -tagfocus "reason=$NONE")" 0

kill -INT $serve_pid
wait_exit $serve_pid "topdown serve" || fail "serve exited with $?"
topdown unpin $F || fail "unpin failed"
expect_progs "programs left" 0
exit 0
