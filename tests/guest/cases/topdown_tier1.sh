# Tier 1, auto reasons: exact per-caller counts of deferred_split_folio for the THP
# workload, in fentry and in kprobe mode, ended by SIGINT with exit status 0.
. "$TD_LIB"
need_cmd topdown thp
need_func deferred_split_folio
thp_callers

F=3 P=2 Q=2 C=2
for mode in fentry kprobe; do
	td_start deferred_split_folio --$mode --no-profile
	grep -q "deferred_split_folio with $mode" "$TD_ERR" || fail "header does not name $mode: $(cat "$TD_ERR")"
	thp --faults $F --munmap-halves $P --dontneed-halves $Q --collapse $C || fail "thp failed"
	td_stop INT
	expect_eq "$mode: exit status" "$TD_RC" 0
	expect_eq "$mode: $TD_THP_FAULT" "$(reason_count $TD_THP_FAULT)" $((F + P + Q))
	expect_eq "$mode: folio_remove_rmap_ptes" "$(reason_count folio_remove_rmap_ptes)" $((P + Q))
	expect_eq "$mode: collapse_huge_page" "$(reason_count collapse_huge_page)" $C
	expect_eq "$mode: total" "$(summary_num total)" $((F + 2 * P + 2 * Q + C))
	expect_eq "$mode: reasons" "$(reason_rows)" 3
	expect_eq "$mode: caller not found" "$(summary_num caller_not_found)" 0
	expect_eq "$mode: sites full" "$(summary_num sites_full)" 0
	expect_eq "$mode: recursion misses" "$(summary_num recursion_misses)" 0
	expect_eq "$mode: mode in summary" "$(summary_str mode)" $mode
	expect_eq "$mode: phase" "$(summary_str phase)" counting
done

# Past --max-reasons, callers share an OTHER row that names them; nothing is lost.
td_start deferred_split_folio --no-profile --max-reasons 1
thp --faults $F --munmap-halves $P --dontneed-halves $Q --collapse $C || fail "thp failed"
td_stop INT
expect_eq "max-reasons 1: rows" "$(reason_rows)" 2
expect_eq "max-reasons 1: total" "$(summary_num total)" $((F + 2 * P + 2 * Q + C))
merged=$(echo "$TD_SUMMARY" | grep -o '"other_merges":\[[^]]*\]' | sed 's/.*\[//; s/\]//' | tr ',' '\n' | grep -c .)
expect_eq "max-reasons 1: callers merged into OTHER" "$merged" 2
named=$(echo "$TD_SUMMARY" | grep -o '{"reason":"[a-z_]*","count":[0-9]*' | sed 's/.*://')
expect_eq "max-reasons 1: named + OTHER" $((named + $(reason_count OTHER))) $((F + 2 * P + 2 * Q + C))
exit 0
