# Overhead benchmark (prints figures; it checks only that every measurement was made).
# Software emulation distorts absolute times, so every figure is a ratio against the
# untraced baseline of the same guest run:
#   - readloop's time per read() untraced, and with topdown on vfs_read in fentry mode,
#     in kprobe mode, and with tier-2 stack capture on (default rate cap);
#   - the counting program's own cost per call (kernel.bpf_stats_enabled=1:
#     run_time_ns / run_cnt) next to an empty fentry program's on the same function.
. "$TD_LIB"
need_cmd topdown readloop
need_func vfs_read

N=${TD_BENCH_READS:-200000}
ROUNDS=3
echo 1 >/proc/sys/kernel/bpf_stats_enabled || skip "no kernel.bpf_stats_enabled"

# per_read: ns per read of one readloop run (its stderr line).
per_read() {
	readloop $N 2>&1 >/dev/null | sed -n 's/.*ns_per_read=//p'
}

# best CMD...: the fastest of $ROUNDS runs of per_read, with topdown ARGS attached if given.
best() {
	_best=
	for _r in $(seq $ROUNDS); do
		if [ $# -gt 0 ]; then
			td_start vfs_read --no-profile -q "$@" >/dev/null
		fi
		_v=$(per_read)
		if [ $# -gt 0 ]; then
			td_stop INT >/dev/null
			[ "$TD_RC" = 0 ] || fail "topdown $* exited with $TD_RC"
		fi
		[ -n "$_v" ] || fail "no figure from readloop"
		if [ -z "$_best" ] || [ "$_v" -lt "$_best" ]; then _best=$_v; fi
	done
	echo "$_best"
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }

base=$(best)
fentry=$(best --fentry)
kprobe=$(best --kprobe)
stacks=$(best --fentry --stack-on ksys_read)

# The programs' own cost, from the kernel's run statistics.
td_start vfs_read --no-profile -q --fentry --companion fentry
readloop $N >/dev/null 2>&1
td_stop INT
cnt=$(echo "$TD_SUMMARY" | grep -o '"bpf":{"run_cnt":[0-9]*,"run_time_ns":[0-9]*' | sed 's/.*"run_cnt"://')
prog_cnt=${cnt%%,*} prog_ns=${cnt##*:}
cnt=$(echo "$TD_SUMMARY" | grep -o '"stats":{"run_cnt":[0-9]*,"run_time_ns":[0-9]*' | sed 's/.*"run_cnt"://')
empty_cnt=${cnt%%,*} empty_ns=${cnt##*:}
[ "$prog_cnt" -ge $N ] && [ "$empty_cnt" -ge $N ] || fail "run counts $prog_cnt/$empty_cnt < $N"

echo "bench: kernel $TD_KERNEL, $N reads of /dev/zero, best of $ROUNDS, software emulation (ratios only)"
echo "bench: readloop ns/read  untraced $base = 1.00"
echo "bench: readloop ns/read  topdown fentry $fentry = $(ratio $fentry $base)x"
echo "bench: readloop ns/read  topdown kprobe $kprobe = $(ratio $kprobe $base)x"
echo "bench: readloop ns/read  topdown fentry + stack capture (cap 1000/s) $stacks = $(ratio $stacks $base)x"
echo "bench: BPF ns/call       counting program $((prog_ns / prog_cnt)) vs empty fentry $((empty_ns / empty_cnt)) = $(ratio $((prog_ns / prog_cnt)) $((empty_ns / empty_cnt)))x"
echo 0 >/proc/sys/kernel/bpf_stats_enabled
exit 0
