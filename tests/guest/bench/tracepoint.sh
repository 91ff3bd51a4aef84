# Tracepoint cost benchmark (prints figures; it checks only that every measurement was
# made): the cost per event of topdown's program on kmem:mm_page_alloc against
# bpftrace's on the same tracepoint in the same boot, in interleaved rounds:
#   - topdown t:kmem:mm_page_alloc --no-profile --no-auto: the firing function found
#     by the quick read (one word above the program's context, learnt once) and the
#     site cache, with the bare per-CPU counter beside it (--companion bare);
#   - topdown t:kmem:mm_page_alloc --no-auto: the built-in profile, whose reasons are
#     in the frames above the firing function: those frames read from the stack once
#     learned (x86-64 from 5.17; elsewhere an unwind every event; the first events
#     of a path are unwound and teach the frames) and the rule walk on every event;
#   - bpftrace's `tracepoint:kmem:mm_page_alloc { @[kstack(3)] = count(); }` and
#     `{ @n = count(); }`, if the guest has bpftrace (tests/guest/run --bpftrace).
# Each figure is run_time_ns / run_cnt (kernel.bpf_stats_enabled=1, read with bpftool)
# over WINDOWS passes of the workload per round, the median over every window of every
# round. The workload, on CPU 0 (as everything here: see overhead.sh): "faults touch"
# faulting in 1000 fresh pages 4 times (MADV_DONTNEED between): 4000 order-0
# allocations from the fault path and their page tables per pass.
# case-timeout: 1500
. "$TD_LIB"
. /bench/lib.sh
need_cmd topdown faults taskset bpftool

rounds_windows
echo 1 >/proc/sys/kernel/bpf_stats_enabled || skip "no kernel.bpf_stats_enabled"
TP=kmem:mm_page_alloc

bt_rows

pass() { taskset -c 0 faults touch 1000 - 4 >/dev/null 2>&1 || fail "faults failed"; }

# windows KIND:ID...: WINDOWS passes; per pass and program, "KIND NS_PER_EVENT EVENTS"
# in results.
windows() {
	progs >"$TD_TMP/snap0"
	_w=0
	while [ $_w -lt "$WINDOWS" ]; do
		_w=$((_w + 1))
		pass
		progs >"$TD_TMP/snap1"
		for _p in "$@"; do
			window_cost "${_p#*:}" "${_p%%:*}"
		done
		mv "$TD_TMP/snap1" "$TD_TMP/snap0"
	done
}

# td_round KIND ARGS: topdown t:TP ARGS, its figures as KIND (the bare counter's, if
# ARGS has one, as KIND.bare).
td_round() {
	_k=$1
	shift
	TD_OUT=$TD_TMP/td.out TD_ERR=$TD_TMP/td.err
	rm -f "$TD_OUT" "$TD_ERR"
	taskset -c 0 topdown t:$TP "$@" --json >"$TD_OUT" 2>"$TD_ERR" &
	TD_PID=$!
	wait_line "$TD_ERR" "Ctrl-C to end"
	td_ready
	pass # new call sites, resolved by the polls meanwhile
	sleep 1
	prog=$(progs | awk '$2 ~ /^td_(tp|rawtp)(_nl)?$/ { m = $2 } END { print m }')
	[ -n "$prog" ] || fail "topdown t:$TP: no counting program loaded: $(progs)"
	set -- "$_k:$(prog_id "^$prog\$")"
	bare=$(prog_id '^td_bare_(tp|rawtp)$')
	[ -z "$bare" ] || set -- "$@" "$_k.bare:$bare"
	windows "$@"
	td_stop INT >/dev/null
	[ "$TD_RC" = 0 ] || fail "topdown t:$TP exited with $TD_RC: $(cat "$TD_ERR")"
	echo "$_k.account $(summary_num total) $(summary_num uncached) $(summary_num caller_not_found) $(summary_num deep_unwind_failed)" >>"$TD_TMP/results"
}

# bt_round KIND PROGRAM
bt_round() {
	bt_start "$2"
	windows "$1:$(bt_prog)"
	bt_stop
}

: >"$TD_TMP/results"
pass # warm up
for r in $(seq "$ROUNDS"); do
	td_round count --no-profile --no-auto --companion bare
	td_round profile --no-auto
	if [ -n "$bt" ]; then
		bt_round bt.kstack "tracepoint:$TP { @[kstack(3)] = count(); }"
		bt_round bt.count "tracepoint:$TP { @n = count(); }"
	fi
done

median() {
	awk -v k="$1" '$1 == k { print $2 }' "$TD_TMP/results" | median_of
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }

c=$(median count) cb=$(median count.bare) p=$(median profile) pb=$(median profile.bare)
[ -n "$c" ] && [ -n "$p" ] || fail "missing figures: $(cat "$TD_TMP/results")"
echo "bench: tracepoint $TP on $TD_KERNEL, ns per event (median of $((ROUNDS * WINDOWS)) windows):"
echo "bench:   topdown --no-profile (firing function): $c ns; bare counter beside it: $cb ns"
echo "bench:   topdown, built-in profile (frames + rules): $p ns"
if [ -n "$bt" ]; then
	k=$(median bt.kstack) n=$(median bt.count)
	echo "bench:   bpftrace $bt_version { @[kstack(3)] = count(); }: $k ns; { @n = count(); }: $n ns"
	echo "bench:   ratios: --no-profile/kstack(3) $(ratio "$c" "$k"), profile/kstack(3) $(ratio "$p" "$k"), --no-profile/count() $(ratio "$c" "$n"), profile/count() $(ratio "$p" "$n")"
fi
grep account "$TD_TMP/results" | sed 's/^/bench:   account (total uncached not_found deep_failed): /'
exit 0
