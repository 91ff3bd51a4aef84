# Fallback: a function that is in kallsyms but not in the kernel's BTF cannot be
# traced by fentry; topdown says so in its header and counts it with a kprobe.
# The function ($TD_NOBTF, lib.sh) depends on the architecture.
. "$TD_LIB"
need_cmd topdown pidloop
need_func "$TD_NOBTF"

N=5000
# Only pidloop's calls count (-p): it waits for its go file until topdown has attached.
# x86_64: getpid's own wrapper, exactly N. arm64: every system call's path, so pidloop's
# other system calls (its waits for the go file, its output) come on top: at least N,
# and not many more.
case $TD_NOBTF in
*getpid*) slack=0 ;;
*) slack=$((N / 10)) ;;
esac
pidloop $N "$TD_TMP/go" >"$TD_TMP/pidloop" 2>&1 &
loop=$!
wait_line "$TD_TMP/pidloop" "pidloop: ready"
td_start "$TD_NOBTF" -p $loop
grep -q "tracing $TD_NOBTF with a kprobe: fentry unavailable: $TD_NOBTF is not in the kernel's BTF" "$TD_ERR" ||
	fail "no fallback notice: $(cat "$TD_ERR")"
touch "$TD_TMP/go"
wait $loop || fail "pidloop failed: $(cat "$TD_TMP/pidloop")"
td_stop INT
expect_eq "exit status" "$TD_RC" 0
expect_eq "mode" "$(summary_str mode)" kprobe
expect_eq "caller not found" "$(summary_num caller_not_found)" 0
n=$(reason_count "$TD_NOBTF_CALLER")
echo "$TD_NOBTF_CALLER: $n calls"
[ "$n" -ge $N ] && [ "$n" -le $((N + slack)) ] || fail "$TD_NOBTF_CALLER: $n calls, want $N..$((N + slack))"
expect_eq "total" "$(summary_num total)" "$n"

# Forcing fentry on it is an error that says why.
topdown "$TD_NOBTF" --fentry >"$TD_TMP/out" 2>"$TD_TMP/err"
expect_eq "--fentry: exit status" $? 1
grep -q "cannot trace $TD_NOBTF with fentry: $TD_NOBTF is not in the kernel's BTF" "$TD_TMP/err" ||
	fail "--fentry: $(cat "$TD_TMP/err")"
exit 0
