# Tier 1, auto reasons: exact per-caller counts of the THP deferred-split function for
# the THP workload, in fentry and in kprobe mode, ended by SIGINT with exit status 0.
# Both modes run with capture possible (the counting path with the stack gate); kprobe
# runs again with --no-auto, where the path has no gate. On 6.1 and 5.10 the function
# is deferred_split_huge_page, which page_remove_rmap calls for every PTE-mapped page
# of a THP it unmaps (256 at each half unmap, 256 more at exit; THP faults make none),
# and the built-in profile names them all ZAP.
. "$TD_LIB"
need_cmd topdown thp wget
split_fn

if [ $TD_SPLIT = deferred_split_huge_page ]; then
	F=3 P=2 Q=2
	want=$(((P + Q) * 512))
	for run in fentry kprobe "kprobe --no-auto"; do
		mode=${run%% *}
		# shellcheck disable=SC2086 # the run's words are separate arguments
		td_start $TD_SPLIT --$run --no-profile
		grep -q "$TD_SPLIT with $mode" "$TD_ERR" || fail "header does not name $mode: $(cat "$TD_ERR")"
		thp --faults $F --munmap-halves $P --dontneed-halves $Q || fail "thp failed"
		# The one caller has every call: hot, so its stacks are captured unless
		# --no-auto. The trigger decides on a tick (50 ms): wait for its notice, or
		# a stop that comes first (a busy host) would end the run still counting.
		phase="stack capture"
		if [ "$run" = "kprobe --no-auto" ]; then
			phase=counting
		else
			wait_line "$TD_ERR" "page_remove_rmap has .*: capturing its stacks"
		fi
		td_stop INT
		expect_eq "$run: exit status" "$TD_RC" 0
		expect_eq "$run: page_remove_rmap" "$(reason_count page_remove_rmap)" $want
		expect_eq "$run: total" "$(summary_num total)" $want
		expect_eq "$run: reasons" "$(reason_rows)" 1
		expect_eq "$run: caller not found" "$(summary_num caller_not_found)" 0
		expect_eq "$run: sites full" "$(summary_num sites_full)" 0
		expect_eq "$run: recursion misses" "$(summary_num recursion_misses)" 0
		expect_eq "$run: mode in summary" "$(summary_str mode)" $mode
		expect_eq "$run: phase" "$(summary_str phase)" "$phase"

		# shellcheck disable=SC2086
		td_start $TD_SPLIT --$run
		thp --faults $F --munmap-halves $P --dontneed-halves $Q || fail "thp failed"
		td_stop INT
		expect_eq "$run profile: ZAP" "$(reason_count ZAP)" $want
		expect_eq "$run profile: rows" "$(reason_rows)" 1
		expect_eq "$run profile: deep unwind failed" "$(summary_num deep_unwind_failed)" 0
	done
	# Past --max-reasons, callers would share an OTHER row; page_remove_rmap is the
	# only caller here, so the one row keeps every call.
	td_start $TD_SPLIT --no-profile --max-reasons 1
	thp --faults $F --munmap-halves $P --dontneed-halves $Q || fail "thp failed"
	td_stop INT
	expect_eq "max-reasons 1: rows" "$(reason_rows)" 1
	expect_eq "max-reasons 1: page_remove_rmap" "$(reason_count page_remove_rmap)" $want
	expect_eq "max-reasons 1: OTHER" "$(reason_count OTHER)" 0
	exit 0
fi

thp_callers

F=3 P=2 Q=2 C=2
for run in fentry kprobe "kprobe --no-auto"; do
	mode=${run%% *}
	# shellcheck disable=SC2086 # the run's words are separate arguments
	td_start deferred_split_folio --$run --no-profile
	grep -q "deferred_split_folio with $mode" "$TD_ERR" || fail "header does not name $mode: $(cat "$TD_ERR")"
	thp --faults $F --munmap-halves $P --dontneed-halves $Q --collapse $C || fail "thp failed"
	td_stop INT
	expect_eq "$run: exit status" "$TD_RC" 0
	fc=$((F + P + Q)) rows=3
	[ -z "$TD_THP_MERGED" ] || fc=$((fc + C)) rows=2
	expect_eq "$run: $TD_THP_FAULT_REASON" "$(reason_count "$TD_THP_FAULT_REASON")" $fc
	expect_eq "$run: folio_remove_rmap_ptes" "$(reason_count folio_remove_rmap_ptes)" $((P + Q))
	[ -n "$TD_THP_MERGED" ] || expect_eq "$run: collapse_huge_page" "$(reason_count collapse_huge_page)" $C
	expect_eq "$run: total" "$(summary_num total)" $((F + 2 * P + 2 * Q + C))
	expect_eq "$run: reasons" "$(reason_rows)" $rows
	expect_eq "$run: caller not found" "$(summary_num caller_not_found)" 0
	expect_eq "$run: sites full" "$(summary_num sites_full)" 0
	expect_eq "$run: recursion misses" "$(summary_num recursion_misses)" 0
	expect_eq "$run: mode in summary" "$(summary_str mode)" $mode
	expect_eq "$run: phase" "$(summary_str phase)" counting
done

# Past --max-reasons, callers share an OTHER row that names them; nothing is lost.
td_start deferred_split_folio --no-profile --max-reasons 1
thp --faults $F --munmap-halves $P --dontneed-halves $Q --collapse $C || fail "thp failed"
td_stop INT
expect_eq "max-reasons 1: rows" "$(reason_rows)" 2
expect_eq "max-reasons 1: total" "$(summary_num total)" $((F + 2 * P + 2 * Q + C))
merged=$(echo "$TD_SUMMARY" | grep -o '"other_merges":\[[^]]*\]' | sed 's/.*\[//; s/\]//' | tr ',' '\n' | grep -c .)
expect_eq "max-reasons 1: callers merged into OTHER" "$merged" $((rows - 1))
named=$(echo "$TD_SUMMARY" | grep -o '{"reason":"[^"]*","count":[0-9]*' | grep -v '"OTHER"' | sed 's/.*://')
expect_eq "max-reasons 1: named + OTHER" $((named + $(reason_count OTHER))) $((F + 2 * P + 2 * Q + C))

# The same in every other output: a live run's text summary, a pinned instance's
# text (show), saved result (show --save) and /metrics. Each has an OTHER row, and its
# rows add up to every call.
n=$((F + 2 * P + 2 * Q + C))
# rows_add_up WHAT FILE: the rows of the last table in text FILE (after its last REASON
# header; a row is NAME TOTAL RATE SHARE%, NAME perhaps of several words) hold OTHER and
# add up to n.
rows_add_up() {
	awk '/REASON/ { s = 0; o = 0; t = 1; next }
		t && $NF ~ /%$/ && $(NF - 2) ~ /^[0-9]+$/ { s += $(NF - 2); if (NF == 4 && $1 == "OTHER") o = 1; next }
		{ t = 0 }
		END { printf "%d %d", s, o }' "$2" >"$TD_TMP/rows"
	read -r sum other <"$TD_TMP/rows"
	[ "$other" = 1 ] || fail "$1: no OTHER row: $(cat "$2")"
	expect_eq "$1: rows add up" "$sum" $n
}
topdown deferred_split_folio --no-profile --max-reasons 1 >"$TD_TMP/live.txt" 2>"$TD_TMP/live.err" &
live=$!
wait_line "$TD_TMP/live.err" "Ctrl-C to end"
thp --faults $F --munmap-halves $P --dontneed-halves $Q --collapse $C || fail "thp failed"
kill -INT $live
wait_exit $live "topdown" || fail "topdown exited with $?"
rows_add_up "max-reasons 1, text" "$TD_TMP/live.txt"

topdown pin deferred_split_folio --no-profile --max-reasons 1 2>/dev/null || fail "pin failed"
thp --faults $F --munmap-halves $P --dontneed-halves $Q --collapse $C || fail "thp failed"
topdown show deferred_split_folio >"$TD_TMP/show.txt" 2>&1 || fail "show failed: $(cat "$TD_TMP/show.txt")"
rows_add_up "max-reasons 1, pinned, show" "$TD_TMP/show.txt"
topdown show deferred_split_folio --save "$TD_TMP/saved.json" >/dev/null 2>&1 || fail "show --save failed"
grep -q '"reason":"OTHER","count":[1-9]' "$TD_TMP/saved.json" || fail "saved result: no OTHER row: $(cut -c1-600 "$TD_TMP/saved.json")"
expect_eq "max-reasons 1, saved result: total" "$(grep -o '"total":[0-9]*' "$TD_TMP/saved.json" | head -1 | cut -d: -f2)" $n
topdown serve --listen 127.0.0.1:9478 2>"$TD_TMP/serve.err" &
serve=$!
wait_line "$TD_TMP/serve.err" "serving http"
http_get http://127.0.0.1:9478/metrics "$TD_TMP/metrics" || fail "scrape failed"
kill -INT $serve
wait_exit $serve "topdown serve" || fail "serve exited with $?"
sed -n 's/^topdown_calls_total{function="deferred_split_folio",reason="\([^"]*\)"} \([0-9]*\)$/\1 \2/p' "$TD_TMP/metrics" >"$TD_TMP/series"
grep -q '^OTHER [1-9]' "$TD_TMP/series" || fail "/metrics: no OTHER series: $(cat "$TD_TMP/series")"
expect_eq "max-reasons 1, /metrics: series add up" "$(awk '{ s += $NF } END { print s }' "$TD_TMP/series")" $n
topdown unpin deferred_split_folio || fail "unpin failed"
exit 0
