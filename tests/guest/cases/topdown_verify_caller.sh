# The cheap caller lookup agrees with a full bpf_get_stack unwind on every call, in
# fentry mode (also with an fexit program on the same function, which adds a slot to
# the trampoline frame) and in kprobe mode.
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

grep -q " deferred_split_folio\$" /proc/kallsyms || exit 0

for variant in "--fentry" "--fentry --companion fexit" "--kprobe"; do
	# shellcheck disable=SC2086
	td_start deferred_split_folio $variant --no-profile --verify-caller
	thp --faults 2 --munmap-halves 2 --collapse 1 || fail "thp failed"
	td_stop INT
	expect_eq "$variant: exit status" "$TD_RC" 0
	expect_eq "$variant: total" "$(summary_num total)" 7
	expect_eq "$variant: checked" "$(summary_num checked)" 7
	expect_eq "$variant: mismatches" "$(summary_num mismatches)" 0
	expect_eq "$variant: unwind failed" "$(summary_num unwind_failed)" 0
	expect_eq "$variant: caller not found" "$(summary_num caller_not_found)" 0
	expect_eq "$variant: do_huge_pmd_anonymous_page" "$(reason_count do_huge_pmd_anonymous_page)" 4
done
exit 0
