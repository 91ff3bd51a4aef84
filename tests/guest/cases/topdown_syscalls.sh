# System calls' tracepoints (t:syscalls:sys_enter_NAME, sys_exit_NAME). The kernel has
# no tracepoint of its own for each: its syscalls events are raw_syscalls's sys_enter
# and sys_exit tested for the call's number, and so are topdown's programs, with the
# number from topdown's build (asm/unistd.h). Exact counts:
# - "sleeps S 5" calls nanosleep S times: glibc makes each a clock_nanosleep call, so
#   sys_enter_clock_nanosleep and sys_exit_clock_nanosleep are S each, and
#   sys_enter_nanosleep 0, counted with -p; through raw_tp too;
# - the syscalls workload (files, pipes, sockets ...) against the kernel's own syscalls
#   events, filtered to its pid in ftrace's buffer, at the same time as four topdowns,
#   one a call (entries and exits): each topdown's count is ftrace's;
# - a pinned one counts with no topdown running;
# - a misspelt call: one line, exit 2, naming the right one.
. "$TD_LIB"
need_cmd topdown sleeps syscalls
T=/sys/kernel/tracing
[ -d $T/events/syscalls ] || skip "no syscalls events in tracefs (CONFIG_FTRACE_SYSCALLS)"

# A misspelt call, and an event of syscalls that is no call's.
for bad in t:syscalls:sys_enter_clock_nanosleeep t:syscalls:sys_enter; do
	topdown "$bad" -d 1 >"$TD_TMP/bad.out" 2>"$TD_TMP/bad.err"
	expect_eq "$bad: exit status" $? 2
	expect_eq "$bad: lines" "$(wc -l <"$TD_TMP/bad.err")" 1
	echo "ok: $bad: $(cat "$TD_TMP/bad.err")"
done
topdown t:syscalls:sys_enter_clock_nanosleeep -d 1 2>&1 | grep -q "did you mean: sys_enter_clock_nanosleep" ||
	fail "a misspelt call names no close one"

# run_sleeps EVENT [TOPDOWN ARGS...]: one topdown run on EVENT, -p the sleeps process,
# around "sleeps S 5".
S=40
run_sleeps() {
	_ev=$1
	shift
	td_sleeps $S 5 "${TP:-t}:syscalls:$_ev" "$@"
	expect_eq "$_ev $*: exit status" "$TD_RC" 0
	expect_eq "$_ev $*: caller not found" "$(summary_num caller_not_found)" 0
}

for ev in sys_enter_clock_nanosleep sys_exit_clock_nanosleep; do
	run_sleeps $ev
	grep -q "tracing tracepoint $ev with tp_btf" "$TD_ERR" || fail "header: $(head -1 "$TD_ERR")"
	expect_eq "$ev: calls ($S nanosleep calls)" "$(summary_num total)" $S
	expect_eq "$ev: rows (the path that fired it)" "$(reason_rows)" 1
	expect_eq "$ev: category" "$(summary_str tracepoint)" syscalls
done
TP=rawtracepoint run_sleeps sys_enter_clock_nanosleep
expect_eq "raw_tp: mode" "$(summary_str mode)" raw_tp
expect_eq "raw_tp sys_enter_clock_nanosleep: calls" "$(summary_num total)" $S
run_sleeps sys_enter_nanosleep
expect_eq "sys_enter_nanosleep: calls (glibc calls clock_nanosleep)" "$(summary_num total)" 0

# Against the kernel's own events: four calls, entries and exits, all at once.
EVENTS="sys_enter_openat sys_exit_read sys_enter_write sys_exit_close"
ip link set lo up 2>/dev/null
syscalls 2 "$TD_TMP/sc" >"$TD_TMP/sc.out" 2>"$TD_TMP/sc.err" &
sc=$!
trap 'kill -USR1 $sc 2>/dev/null; for e in $EVENTS; do echo 0 >$T/events/syscalls/$e/enable; echo 0 >$T/events/syscalls/$e/filter; done' EXIT
wait_line "$TD_TMP/sc.out" "syscalls: ready"
pids=
for ev in $EVENTS; do
	topdown t:syscalls:$ev -p $sc --json >"$TD_TMP/$ev.out" 2>"$TD_TMP/$ev.err" &
	pids="$pids $!"
done
for ev in $EVENTS; do
	wait_line "$TD_TMP/$ev.err" "Ctrl-C to end" 60
	wait_line "$TD_TMP/$ev.out" '"type":"interval"' 60
done
echo 0 >$T/tracing_on
echo 8192 >$T/buffer_size_kb
echo >$T/trace
for ev in $EVENTS; do
	echo "common_pid == $sc" >$T/events/syscalls/$ev/filter || fail "cannot filter $ev"
	echo 1 >$T/events/syscalls/$ev/enable || fail "cannot enable $ev"
done
echo 1 >$T/tracing_on
kill -USR1 $sc
wait_line "$TD_TMP/sc.out" "syscalls: done" 120
echo 0 >$T/tracing_on
for p in $pids; do kill -INT $p; done
for p in $pids; do wait_exit $p "topdown (pid $p)" || fail "topdown $p exited with $?"; done
kill -USR1 $sc
wait_exit $sc syscalls || fail "syscalls exited with $?"
lost=$(awk '/^overrun:/ { s += $2 } END { print s + 0 }' $T/per_cpu/cpu*/stats)
expect_eq "ftrace's lost events" "$lost" 0
for ev in $EVENTS; do
	# "sys_openat(dfd: ...)" for an entry, "sys_read -> 0x..." for an exit.
	name=${ev#sys_*_}
	case $ev in
	sys_enter_*) want=$(grep -c ": sys_$name(" $T/trace) ;;
	*) want=$(grep -c ": sys_$name -> " $T/trace) ;;
	esac
	TD_SUMMARY=$(grep '"type":"summary"' "$TD_TMP/$ev.out")
	[ -n "$TD_SUMMARY" ] || fail "$ev: no summary: $(cat "$TD_TMP/$ev.err")"
	[ "$want" -gt 0 ] || fail "$ev: ftrace saw no call"
	expect_eq "$ev: calls (ftrace's syscalls event: $want)" "$(summary_num total)" "$want"
done
echo >$T/trace

# Pinned: counts with nobody reading, under the event's own name.
if [ -d /sys/fs/bpf ]; then
	topdown pin t:syscalls:sys_enter_clock_nanosleep >"$TD_TMP/pin.out" 2>&1 || fail "pin: $(cat "$TD_TMP/pin.out")"
	sleeps $S 5 >"$TD_TMP/w.out" || fail "sleeps failed"
	topdown show t:syscalls:sys_enter_clock_nanosleep --json >"$TD_TMP/show.json" 2>"$TD_TMP/show.err" ||
		fail "show: $(cat "$TD_TMP/show.err")"
	grep -q '"func":"sys_enter_clock_nanosleep","tracepoint":"syscalls"' "$TD_TMP/show.json" ||
		fail "show: no category: $(cut -c1-200 "$TD_TMP/show.json")"
	n=$(grep -o '"total":[0-9]*' "$TD_TMP/show.json" | head -1 | cut -d: -f2)
	[ "${n:-0}" -ge $S ] || fail "pinned: ${n:-0} calls, want >= $S: $(cut -c1-400 "$TD_TMP/show.json")"
	echo "ok: pinned sys_enter_clock_nanosleep: $n calls (>= $S)"
	topdown unpin t:syscalls:sys_enter_clock_nanosleep >/dev/null 2>&1 || fail "unpin failed"
	expect_progs "after unpin" 0
fi
exit 0
