# Tier 1 on Debian 12's 6.1, where the function is deferred_split_huge_page and
# page_remove_rmap calls it once per PTE-mapped page of a THP that it unmaps: 256 at
# each half unmap and 256 more when the process exits (thp.c). Exact counts in both
# modes, by caller and with the built-in profile (all of them are zaps).
. "$TD_LIB"
need_cmd topdown thp
need_func deferred_split_huge_page

P=2 Q=2
want=$(((P + Q) * 512))
for mode in fentry kprobe; do
	td_start deferred_split_huge_page --$mode --no-profile
	thp --munmap-halves $P --dontneed-halves $Q || fail "thp failed"
	td_stop INT
	expect_eq "$mode: exit status" "$TD_RC" 0
	expect_eq "$mode: page_remove_rmap" "$(reason_count page_remove_rmap)" $want
	expect_eq "$mode: total" "$(summary_num total)" $want
	expect_eq "$mode: caller not found" "$(summary_num caller_not_found)" 0

	td_start deferred_split_huge_page --$mode
	thp --munmap-halves $P --dontneed-halves $Q || fail "thp failed"
	td_stop INT
	expect_eq "$mode profile: ZAP" "$(reason_count ZAP)" $want
	expect_eq "$mode profile: rows" "$(reason_rows)" 1
	expect_eq "$mode profile: deep unwind failed" "$(summary_num deep_unwind_failed)" 0
done
exit 0
