# Tier 1, auto reasons: exact per-caller counts of the THP deferred-split function for
# the THP workload, in fentry and in kprobe mode, ended by SIGINT with exit status 0.
# Both modes run with capture possible (the counting path with the stack gate); kprobe
# runs again with --no-auto, where the path has no gate. On 6.1 and 5.10 the function
# is deferred_split_huge_page, which page_remove_rmap calls for every PTE-mapped page
# of a THP it unmaps (256 at each half unmap, 256 more at exit; THP faults make none),
# and the built-in profile names them all ZAP.
. "$TD_LIB"
need_cmd topdown thp
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
exit 0
