# The cheap caller lookup agrees with a full bpf_get_stack unwind on every call, in
# fentry mode (also with an fexit program on the same function, which adds a slot to
# the trampoline frame, and on x86 7.x makes FUNC's entry jump to the trampoline
# instead of calling it: no entry word, no entry frame) and in kprobe mode (on arm64, where the unwind from a kprobe at
# FUNC's first instruction lacks the caller, the BPF side checks that the link register
# follows a call of FUNC instead).
. "$TD_LIB"
need_cmd topdown thp readloop
need_func vfs_read

# vfs_read: every call checked, on both kernels (other readers add calls, so the
# relation is exact, not the total).
for variant in "--fentry" "--fentry --companion fexit" "--kprobe"; do
	# shellcheck disable=SC2086
	td_start vfs_read $variant --verify-caller
	readloop 2000 || fail "readloop failed"
	td_stop INT
	total=$(summary_num total)
	[ "$total" -ge 2000 ] || fail "vfs_read $variant: total $total < 2000"
	expect_eq "vfs_read $variant: checked" "$(summary_num checked)" "$total"
	expect_eq "vfs_read $variant: mismatches" "$(summary_num mismatches)" 0
	expect_eq "vfs_read $variant: unwind failed" "$(summary_num unwind_failed)" 0
	expect_eq "vfs_read $variant: caller not found" "$(summary_num caller_not_found)" 0
done

# The THP path: deferred_split_folio on 6.12 (exact per-caller counts), or on 6.1
# deferred_split_huge_page, which page_remove_rmap calls for each PTE-mapped page of a
# THP it unmaps (256 per half unmap, 256 more at exit).
if grep -q " deferred_split_folio\$" /proc/kallsyms; then
	fn=deferred_split_folio want=7
	thp_callers
elif grep -q " deferred_split_huge_page\$" /proc/kallsyms; then
	fn=deferred_split_huge_page want=1024
else
	skip "neither deferred_split_folio nor deferred_split_huge_page in $TD_KERNEL"
fi
for variant in "--fentry" "--fentry --companion fexit" "--kprobe"; do
	# shellcheck disable=SC2086
	td_start $fn $variant --no-profile --verify-caller
	if [ $fn = deferred_split_folio ]; then
		thp --faults 2 --munmap-halves 2 --collapse 1 || fail "thp failed"
	else
		thp --munmap-halves 2 || fail "thp failed"
	fi
	td_stop INT
	expect_eq "$fn $variant: exit status" "$TD_RC" 0
	expect_eq "$fn $variant: total" "$(summary_num total)" $want
	expect_eq "$fn $variant: checked" "$(summary_num checked)" $want
	expect_eq "$fn $variant: mismatches" "$(summary_num mismatches)" 0
	expect_eq "$fn $variant: unwind failed" "$(summary_num unwind_failed)" 0
	expect_eq "$fn $variant: caller not found" "$(summary_num caller_not_found)" 0
	if [ $fn = deferred_split_folio ]; then
		expect_eq "$variant: $TD_THP_FAULT" "$(reason_count $TD_THP_FAULT)" 4
	else
		expect_eq "$variant: page_remove_rmap" "$(reason_count page_remove_rmap)" $want
	fi
done
exit 0
