# Workload-level cost: how much longer a kernel-heavy workload takes while a tool
# traces FUNC (kfree), the figure a user decides with. The workload is callers.sh's
# mixed busybox pass (find, ls -lR, cat /proc/*/stat, 20 forks of sh, md5sum, cp -r),
# PASSES passes in a row on CPU 0, each timed on CLOCK_MONOTONIC (under --icount the
# guest's clock counts instructions, so a figure repeats from run to run). Every tool
# runs on CPU 0 too, so its user space (topdown's polls, bpftrace's reader) is paid
# for in the workload's time, as on a busy machine. Rows, in interleaved rounds:
#   - untraced;
#   - topdown FUNC, as a user starts it (tier 1, the background sampler, automatic
#     capture);
#   - topdown FUNC --stack-on REASON: capture on, all run long, for FUNC's busiest caller
#     (the previous row's top reason), at the default --max-rate;
#   - topdown pin FUNC, with no reader: tier 1 always on, the BPF program alone (no
#     process of topdown's runs; from 5.17 the program names each call site first
#     called after the pin itself, at that first call);
#   - bpftrace's `fentry:FUNC { @n = count(); }` and `{ @[kstack(2)] = count(); }`, if
#     the guest has bpftrace (tests/guest/run --bpftrace: the newest it has).
# Each tool's passes start once it says it is ready (topdown's "Ctrl-C to end",
# bpftrace's probes attached), as a user would start the workload: the first pass holds
# topdown's start-up window (its call sites resolved after /proc/kallsyms is read),
# the later ones are steady. Prints each row's first pass (the median over rounds) and
# its later passes (the mean: a pass is about as long as topdown's 50 ms poll, so some
# passes hold a poll and some do not), and the slowdowns against untraced. Checks only that every row ran and
# that topdown counted calls.
# case-timeout: 2400
. "$TD_LIB"
. /bench/lib.sh
need_cmd topdown taskset elapsed find md5sum
FUNC=${TD_BENCH_FUNC:-kfree}
need_func "$FUNC"
PASSES=${TD_BENCH_PASSES:-10}
if [ -n "${TD_ICOUNT:-}" ]; then
	ROUNDS=${TD_BENCH_ROUNDS:-2}
else
	ROUNDS=${TD_BENCH_ROUNDS:-3}
fi

# This shell and all it starts (topdown among them, through td_start) on CPU 0.
taskset -pc 0 $$ >/dev/null || fail "taskset -p failed"
mixed_tree
bt_rows

# passes KIND ROUND: PASSES timed passes, "KIND ROUND PASS NS" each in results.
passes() {
	_p=0
	while [ $_p -lt "$PASSES" ]; do
		_p=$((_p + 1))
		echo "$1 $2 $_p $(mixed_ns)" >>"$TD_TMP/results"
	done
}

# td_row KIND ROUND ARGS...: the passes under topdown FUNC ARGS; its summary's figures
# as "KIND ROUND account TOTAL STACKS_SHOWN CAPTURES" in results.
td_row() {
	_k=$1 _r=$2
	shift 2
	td_start "$FUNC" "$@"
	passes "$_k" "$_r"
	td_stop INT >/dev/null
	[ "$TD_RC" = 0 ] || fail "topdown $FUNC $* exited with $TD_RC: $(cat "$TD_ERR")"
	_t=$(summary_num total)
	[ "${_t:-0}" -gt 0 ] || fail "topdown $FUNC $*: no calls counted"
	_c=$(echo "$TD_SUMMARY" | grep -o '"captures":\[[^]]*\]' | grep -o '"reason"' | wc -l)
	echo "$_k $_r account $_t $(summary_num stacks_captured) $_c" >>"$TD_TMP/results"
}

# pin_row KIND ROUND: the passes with FUNC pinned and nobody reading it; checks that it
# counted.
pin_row() {
	topdown pin "$FUNC" 2>"$TD_TMP/pin.err" || fail "topdown pin $FUNC failed: $(cat "$TD_TMP/pin.err")"
	passes "$1" "$2"
	_t=$(topdown show "$FUNC" --json | grep -o '"total":[0-9]*' | head -1 | sed 's/.*://')
	topdown unpin "$FUNC" 2>/dev/null || fail "topdown unpin $FUNC failed"
	[ "${_t:-0}" -gt 0 ] || fail "pinned $FUNC counted no calls"
	echo "$1 $2 account $_t 0 0" >>"$TD_TMP/results"
}

# bt_row KIND ROUND PROGRAM
bt_row() {
	bt_start "$3"
	passes "$1" "$2"
	bt_stop >/dev/null
}

: >"$TD_TMP/results"
mixed # warm the caches of the tree
top=
for r in $(seq "$ROUNDS"); do
	passes none "$r"
	td_row td "$r"
	[ -n "$top" ] || top=$(summary_str top_reason)
	[ -n "$top" ] || fail "topdown $FUNC: no top reason in $TD_SUMMARY"
	td_row capture "$r" --stack-on "$top"
	pin_row pinned "$r"
	[ -z "$bt" ] || bt_row bt.count "$r" "$bt_fentry:$FUNC { @n = count(); }"
	[ -z "$bt" ] || bt_row bt.kstack "$r" "$bt_fentry:$FUNC { @[kstack(2)] = count(); }"
done

# pass_ms KIND FIRST|STEADY: KIND's first passes' median, or the later passes' mean, in ms.
pass_ms() {
	awk -v k="$1" -v w="$2" '$1 == k && $3 ~ /^[0-9]+$/ && (w == "first") == ($3 == 1) { print $4 / 1e6 }' \
		"$TD_TMP/results" >"$TD_TMP/passes"
	if [ "$2" = first ]; then
		median_of %.2f <"$TD_TMP/passes"
	else
		awk '{ t += $1 } END { if (NR) printf "%.2f", t / NR }' "$TD_TMP/passes"
	fi
}
slower() { awk -v a="$1" -v b="$2" 'BEGIN { if (a != "" && b > 0) printf "%+.1f%%", (a / b - 1) * 100; else print "-" }'; }
# account KIND FIELD: the mean over rounds of field FIELD (4: calls, 5: stacks, 6: captures).
account() { awk -v k="$1" -v f="$2" '$1 == k && $3 == "account" { n += $f; r++ } END { if (r) printf "%d", n / r }' "$TD_TMP/results"; }

clock="software emulation (ratios only)"
[ -z "${TD_ICOUNT:-}" ] || clock="software emulation, the guest's clock counting instructions (-icount $TD_ICOUNT: repeatable)"
echo "bench: kernel $TD_KERNEL, CPU 0, $ROUNDS interleaved rounds of $PASSES passes of the mixed workload (find, ls -lR, cat /proc/*/stat, 20 forks of sh, md5sum, cp -r) on $FUNC, $clock"
base_first=$(pass_ms none first) base=$(pass_ms none steady)
echo "bench: untraced: first pass $base_first ms, later passes $base ms"
row() {
	_first=$(pass_ms "$1" first) _steady=$(pass_ms "$1" steady)
	echo "bench: $2: first pass $_first ms = $(slower "$_first" "$base_first"), later passes $_steady ms = $(slower "$_steady" "$base") against untraced$3"
}
row td "topdown $FUNC (tier 1, sampler, automatic capture)" "; $(account td 4) calls counted a run, automatic captures $(account td 6), stacks captured $(account td 5)"
row capture "topdown $FUNC --stack-on $top (capture on, --max-rate 1000)" "; $(account capture 4) calls counted a run, stacks captured $(account capture 5)"
row pinned "topdown pin $FUNC, no reader" "; $(account pinned 4) calls counted a run (topdown show's own among them)"
if [ -n "$bt" ]; then
	row bt.count "bpftrace $bt_version $bt_fentry:$FUNC { @n = count(); }" ""
	row bt.kstack "bpftrace $bt_version $bt_fentry:$FUNC { @[kstack(2)] = count(); }" ""
fi
exit 0
