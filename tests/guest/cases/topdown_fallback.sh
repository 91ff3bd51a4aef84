# Fallback: a function that is in kallsyms but not in the kernel's BTF cannot be
# traced by fentry; topdown says so in its header and counts it with a kprobe.
. "$TD_LIB"
need_cmd topdown pidloop
need_func __x64_sys_getpid

N=5000
td_start __x64_sys_getpid
grep -q "tracing __x64_sys_getpid with a kprobe: fentry unavailable: __x64_sys_getpid is not in the kernel's BTF" "$TD_ERR" ||
	fail "no fallback notice: $(cat "$TD_ERR")"
pidloop $N || fail "pidloop failed"
td_stop INT
expect_eq "exit status" "$TD_RC" 0
expect_eq "mode" "$(summary_str mode)" kprobe
expect_eq "caller not found" "$(summary_num caller_not_found)" 0
# The syscall entry calls it (x64_sys_call is inlined into do_syscall_64 here). The
# shell around the case may add a getpid or two of its own, so allow a few more.
n=$(reason_count do_syscall_64)
[ "$n" -ge $N ] && [ "$n" -le $((N + 10)) ] || fail "do_syscall_64: $n calls, want $N..$((N + 10))"
expect_eq "total" "$(summary_num total)" "$n"

# Forcing fentry on it is an error that says why.
topdown __x64_sys_getpid --fentry >"$TD_TMP/out" 2>"$TD_TMP/err"
expect_eq "--fentry: exit status" $? 1
grep -q "cannot trace __x64_sys_getpid with fentry: __x64_sys_getpid is not in the kernel's BTF" "$TD_TMP/err" ||
	fail "--fentry: $(cat "$TD_TMP/err")"
exit 0
