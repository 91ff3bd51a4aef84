# Drill-down cost benchmark (prints figures; it checks only that every measurement was
# made, and that every drilled call was counted on a path): the counting program's
# cost per call of the drilled reason, by --drill-levels, against the same reason
# captured without --drill, and against bpftrace's @[kstack(N)] = count() in the same
# boot. Two targets:
#   - vfs_read (fentry), readloop's reads of /dev/zero on CPU 0: one caller
#     (ksys_read), --stack-on ksys_read --max-rate 1 (capture on, one stack a second:
#     the gate's cost without the stacks');
#   - kmem:mm_page_alloc, "faults touch 1000 - 4" on CPU 0: the firing function its
#     one reason (--no-profile), named by a first run, --stack-on it --max-rate 1.
# Rows: "capture" (no --drill), "drill L" for L = 2, 4 and 8; bpftrace kstack(3),
# kstack(5) and kstack(8) and count(). Each figure is run_time_ns / run_cnt
# (kernel.bpf_stats_enabled=1, read with bpftool) over WINDOWS passes per round, the
# median over every window of every round (under --icount, guest instructions).
# case-timeout: 1500
. "$TD_LIB"
. /bench/lib.sh
need_cmd topdown readloop faults taskset bpftool
need_func vfs_read ksys_read

rounds_windows
READS=${TD_BENCH_READS:-5000}
echo 1 >/proc/sys/kernel/bpf_stats_enabled || skip "no kernel.bpf_stats_enabled"
bt_rows

# pass TARGET: one pass of TARGET's workload on CPU 0.
pass() {
	case $1 in
	read) taskset -c 0 readloop "$READS" >/dev/null 2>&1 || fail "readloop failed" ;;
	alloc) taskset -c 0 faults touch 1000 - 4 >/dev/null 2>&1 || fail "faults failed" ;;
	esac
}

# windows TARGET KIND PROG_ID: WINDOWS passes; per pass "TARGET KIND NS_PER_CALL CALLS"
# in results.
windows() {
	progs >"$TD_TMP/snap0"
	_w=0
	while [ $_w -lt "$WINDOWS" ]; do
		_w=$((_w + 1))
		pass "$1"
		progs >"$TD_TMP/snap1"
		window_cost "$3" "$1 $2"
		mv "$TD_TMP/snap1" "$TD_TMP/snap0"
	done
}

# td_round TARGET KIND ARGS: topdown on TARGET with ARGS, captured (and drilled) before
# the windows; checks that the drilled calls are all on paths.
td_round() {
	_t=$1 _k=$2
	shift 2
	TD_OUT=$TD_TMP/td.out TD_ERR=$TD_TMP/td.err
	rm -f "$TD_OUT" "$TD_ERR"
	case $_t in
	read) taskset -c 0 topdown vfs_read --fentry --no-profile --stack-on ksys_read --max-rate 1 "$@" --json >"$TD_OUT" 2>"$TD_ERR" & ;;
	alloc) taskset -c 0 topdown t:kmem:mm_page_alloc --no-profile --stack-on "$fn" --max-rate 1 "$@" --json >"$TD_OUT" 2>"$TD_ERR" & ;;
	esac
	TD_PID=$!
	wait_line "$TD_ERR" "Ctrl-C to end"
	td_ready
	pass "$_t" # new call sites resolved
	sleep 1
	prog=$(progs | awk '$2 ~ /^td_(fentry|fentry_known|tp|rawtp)(_nl)?$/ { m = $2 } END { print m }')
	[ -n "$prog" ] || fail "no counting program loaded: $(progs)"
	windows "$_t" "$_k" "$(prog_id "^$prog\$")"
	td_stop INT >/dev/null
	[ "$TD_RC" = 0 ] || fail "topdown exited with $TD_RC: $(cat "$TD_ERR")"
	if [ "$_k" != capture ]; then
		_d=$(echo "$TD_SUMMARY" | grep -o '"drill":\[{"reason":"[^"]*","levels":[0-9]*,"calls":[0-9]*,"captured_calls":[0-9]*')
		[ -n "$_d" ] || fail "$_t $_k: no drilled reason"
		_c=$(echo "$_d" | sed 's/.*"calls":\([0-9]*\),.*/\1/') _s=$(echo "$_d" | sed 's/.*"captured_calls"://')
		expect_eq "$_t $_k: drilled calls = calls seen while captured" "$_c" "$_s"
	fi
}

# bt_round TARGET KIND PROGRAM
bt_round() {
	bt_start "$3"
	windows "$1" "$2" "$(bt_prog)"
	bt_stop
}

fn=$(topdown t:kmem:mm_page_alloc --no-profile --json -d 30 -c "faults touch 4" 2>"$TD_TMP/first.err" |
	grep '"type":"summary"' | grep -o '"reasons":\[{"reason":"[^"]*"' | sed 's/.*"reason":"//; s/"$//')
[ -n "$fn" ] || fail "no reason from the first run: $(cat "$TD_TMP/first.err")"
: >"$TD_TMP/results"
pass read
pass alloc
for r in $(seq "$ROUNDS"); do
	for t in read alloc; do
		td_round $t capture
		for l in 2 4 8; do td_round $t "drill$l" --drill --drill-levels $l; done
	done
	if [ -n "$bt" ]; then
		for n in 3 5 8; do
			bt_round read "kstack$n" "$bt_fentry:vfs_read { @[kstack($n)] = count(); }"
			bt_round alloc "kstack$n" "tracepoint:kmem:mm_page_alloc { @[kstack($n)] = count(); }"
		done
		bt_round read count "$bt_fentry:vfs_read { @n = count(); }"
		bt_round alloc count "tracepoint:kmem:mm_page_alloc { @n = count(); }"
	fi
done

median() { awk -v t="$1" -v k="$2" '$1 == t && $2 == k { print $3 }' "$TD_TMP/results" | median_of; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a != "" && b > 0) printf "%.2f", a / b; else print "-" }'; }

echo "bench: drill-down on $TD_KERNEL, per call of the drilled reason (median of $((ROUNDS * WINDOWS)) windows):"
for t in read alloc; do
	c=$(median $t capture) d2=$(median $t drill2) d4=$(median $t drill4) d8=$(median $t drill8)
	[ -n "$c" ] && [ -n "$d2" ] && [ -n "$d4" ] && [ -n "$d8" ] || fail "missing figures: $(cat "$TD_TMP/results")"
	name=vfs_read
	[ $t = read ] || name=t:kmem:mm_page_alloc
	echo "bench:   $name: captured $c; --drill-levels 2: $d2, 4: $d4, 8: $d8"
	echo "bench:   $name: the drill adds $(awk -v a="$d2" -v b="$c" 'BEGIN { printf "%.0f", a - b }') at 2 levels, then $(awk -v a="$d8" -v b="$d2" 'BEGIN { printf "%.0f", (a - b) / 6 }') a level to 8"
	if [ -n "$bt" ]; then
		k3=$(median $t kstack3) k5=$(median $t kstack5) k8=$(median $t kstack8) n=$(median $t count)
		echo "bench:   $name: bpftrace $bt_version kstack(3) $k3, kstack(5) $k5, kstack(8) $k8, count() $n"
		echo "bench:   $name: ratios drill4/kstack(5) $(ratio "$d4" "$k5"), drill8/kstack(8) $(ratio "$d8" "$k8")"
	fi
done
exit 0
