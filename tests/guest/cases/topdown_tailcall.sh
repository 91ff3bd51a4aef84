# Tail calls: the call instruction before a return address names the function that
# jumped to FUNC. read(2) reaches ksys_read through read's own wrapper, which ends in
# a jump to it where the compiler makes sibling calls (Debian's x86-64 kernels, built
# without frame pointers); the return address alone names the system-call dispatcher.
# readloop makes exactly N reads; -p counts its calls only.
#   x86-64 with x64_sys_call (6.9+): do_syscall_64 calls x64_sys_call, whose switch
#     jumps to __x64_sys_read, which jumps to ksys_read: a chain of tail jumps, named
#     after the function the call names, exactly N calls under
#     "x64_sys_call (tail call)", none under do_syscall_64, one tail-call site;
#   x86-64 before it (6.1): the dispatcher calls through sys_call_table, an indirect
#     call that may as well have been to FUNC: "do_syscall_64 → indirect", one indirect
#     site (a tail call not ruled out);
#   frame pointers (arm64): no sibling calls, __arm64_sys_read calls FUNC itself: N
#     calls under it, no tail-call site.
# A profile naming the jumping function routes its calls like any caller's.
. "$TD_LIB"
need_cmd topdown readloop
need_func ksys_read

N=3000
# run_loop ARGS...: topdown ksys_read ARGS on N reads of readloop only.
run_loop() {
	readloop $N "$TD_TMP/go" >"$TD_TMP/readloop" 2>&1 &
	loop=$!
	wait_line "$TD_TMP/readloop" "readloop: ready"
	td_start ksys_read -p $loop --verify-caller "$@"
	touch "$TD_TMP/go"
	wait $loop || fail "readloop failed: $(cat "$TD_TMP/readloop")"
	rm -f "$TD_TMP/go"
	td_stop INT
	expect_eq "exit status" "$TD_RC" 0
	expect_eq "caller not found" "$(summary_num caller_not_found)" 0
	expect_eq "mismatches" "$(summary_num mismatches)" 0
}

run_loop
grep -q "/proc/kcore" "$TD_ERR" && fail "kcore unreadable: $(cat "$TD_ERR")"
if grep -q '^CONFIG_FRAME_POINTER=y' "/boot/config-$TD_KERNEL"; then
	expect_eq "__arm64_sys_read" "$(reason_count "__arm64_sys_read")" $N
	expect_eq "tail-call sites" "$(summary_num tail_call_sites)" 0
elif ktext x64_sys_call; then
	expect_eq "x64_sys_call (tail call)" "$(reason_count 'x64_sys_call (tail call)')" $N
	expect_eq "do_syscall_64" "$(reason_count do_syscall_64)" 0
	expect_eq "tail-call sites" "$(summary_num tail_call_sites)" 1
	# A profile that names the jumping function.
	run_loop --rules 'READ=x64_sys_call'
	expect_eq "profile: READ" "$(reason_count READ)" $N
else
	expect_eq "do_syscall_64 → indirect" "$(reason_count 'do_syscall_64 → indirect')" $N
	expect_eq "do_syscall_64" "$(reason_count do_syscall_64)" 0
	expect_eq "tail-call sites" "$(summary_num tail_call_sites)" 0
	expect_eq "indirect sites" "$(summary_num indirect_sites)" 1
fi
exit 0
