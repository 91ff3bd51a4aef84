# The cheap caller lookup agrees with a full bpf_get_stack unwind on every call, in
# fentry mode (also with an fexit program on the same function, which adds a slot to
# the trampoline frame, and on x86 7.x makes FUNC's entry jump to the trampoline
# instead of calling it: no entry word, no entry frame) and in kprobe mode (on arm64, where the unwind from a kprobe at
# FUNC's first instruction lacks the caller, the BPF side checks that the link register
# follows a call of FUNC instead).
. "$TD_LIB"
need_cmd topdown thp readloop
need_func vfs_read

# On x86-64 fentry's common path reads the caller in one load, where the trampoline's
# frame has it unless an fexit program adds a return-value slot and FUNC's entry calls
# the trampoline (jumped to, as from Linux 7.x, it is there again): uncached counts
# the calls that read missed and the site cache did not serve.
# Before bpf_get_func_arg_cnt (5.17), which the one-load read needs, the checked way is
# the common path, and nothing misses (the kernel's BTF names the helpers it has).
fexit_misses=
[ "$TD_ARCH" = amd64 ] && ! grep -q '^CONFIG_DYNAMIC_FTRACE_WITH_JMP=y' "/boot/config-$TD_KERNEL" &&
	grep -q BPF_FUNC_get_func_arg_cnt /sys/kernel/btf/vmlinux && fexit_misses=1

# vfs_read: every call checked, on both kernels (other readers add calls, so the
# relation is exact, not the total). The reader's site is resolved by a first run, so
# that the second one's 2000 calls are served by the cache, but where the layout
# makes every call miss.
for variant in "--fentry" "--fentry --companion fexit" "--kprobe"; do
	# shellcheck disable=SC2086
	td_start vfs_read $variant --verify-caller
	readloop 100 || fail "readloop failed"
	# Resolved: its calls are named after it, not pending.
	wait_line "$TD_OUT" '"reason":"ksys_read"'
	readloop 2000 || fail "readloop failed"
	td_stop INT
	total=$(summary_num total)
	[ "$total" -ge 2100 ] || fail "vfs_read $variant: total $total < 2100"
	expect_eq "vfs_read $variant: checked" "$(summary_num checked)" "$total"
	expect_eq "vfs_read $variant: mismatches" "$(summary_num mismatches)" 0
	expect_eq "vfs_read $variant: unwind failed" "$(summary_num unwind_failed)" 0
	expect_eq "vfs_read $variant: caller not found" "$(summary_num caller_not_found)" 0
	uncached=$(summary_num uncached)
	if [ "$variant" = "--fentry --companion fexit" ] && [ -n "$fexit_misses" ]; then
		# Every call through the final trampoline misses: readloop's 2100 at least.
		# A call in the moment between the fentry and the fexit attach went through a
		# trampoline without the slot, where the quick read is right (mismatches 0).
		[ "$uncached" -ge 2100 ] && [ "$uncached" -le "$total" ] ||
			fail "vfs_read $variant: $uncached of $total calls uncached, want readloop's 2100 at least: the quick read hit behind an fexit slot"
		echo "ok: vfs_read $variant: $uncached of $total calls uncached (readloop's 2100 among them)"
	else
		[ $((uncached + 2000)) -le "$total" ] ||
			fail "vfs_read $variant: $uncached of $total calls uncached: the 2000 reads were not all served by the site cache"
		echo "ok: vfs_read $variant: $uncached of $total calls uncached"
	fi
done

# The THP path: deferred_split_folio on 6.12 (exact per-caller counts), or on 6.1
# deferred_split_huge_page, which page_remove_rmap calls for each PTE-mapped page of a
# THP it unmaps (256 per half unmap, 256 more at exit).
if ktext deferred_split_folio; then
	fn=deferred_split_folio want=7
	thp_callers
elif ktext deferred_split_huge_page; then
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
		# 2 faults and 2 half unmaps (their faults); and the collapse where merged
		expect_eq "$variant: $TD_THP_FAULT_REASON" "$(reason_count "$TD_THP_FAULT_REASON")" $((4 + ${TD_THP_MERGED:-0}))
	else
		expect_eq "$variant: page_remove_rmap" "$(reason_count page_remove_rmap)" $want
	fi
done
exit 0
