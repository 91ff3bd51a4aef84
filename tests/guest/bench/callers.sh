# Many-caller overhead benchmark, beside overhead.sh's one-caller vfs_read loop (prints
# figures; it checks only that every measurement was made and that topdown counted
# every call its program ran for). Functions with many callers (kmem_cache_free, kfree,
# dput: tens of call sites each, some reached by tail jumps, in process and interrupt
# context) under a mixed busybox workload on CPU 0: find and ls -lR over a tree of
# files, cat of /proc/*/stat, forks of sh, md5sum and cp -r of the tree.
# Per function, in interleaved rounds (topdown, bpftrace, topdown, ...):
#   - topdown FUNC --no-profile --fentry --no-auto (tier 1: counting only), with the
#     bare per-CPU counter beside it (--companion bare); the counting program's cost per
#     call (kernel.bpf_stats_enabled=1: run_time_ns / run_cnt, read with bpftool) and
#     the bare counter's, over WINDOWS windows of one workload pass each, after a first
#     pass that lets topdown resolve the call sites; each figure is the median over the
#     windows of every round; and the first pass's own cost per call (its call sites
#     new: their calls take the pending path until a poll resolves them), and the whole
#     run's (the summary's figure: the bench's bpftool snapshots and pauses between
#     passes included);
#   - the whole run as a user meets it: topdown FUNC again, the workload's passes
#     started when it says "Ctrl-C to end", nothing else run meanwhile, then stopped;
#     the summary's cost per call from attach;
#   - bpftrace's `fentry:FUNC { @n = count(); }` over the same windows, if the guest has
#     bpftrace (tests/guest/run --bpftrace).
# Besides, topdown's own account of the run: calls counted, call sites (reasons), calls
# the site cache did not serve (uncached) and topdown's own calls, left out.
# case-timeout: 1500
. "$TD_LIB"
. /bench/lib.sh
need_cmd topdown taskset bpftool find md5sum
FUNCS=${TD_BENCH_FUNCS:-kmem_cache_free kfree dput}
need_func $FUNCS

rounds_windows
echo 1 >/proc/sys/kernel/bpf_stats_enabled || skip "no kernel.bpf_stats_enabled"

mixed_tree

bt_rows

# windows FUNC ROUND KIND:ID...: WINDOWS passes of the workload; per pass and program,
# "FUNC ROUND KIND NS_PER_CALL CALLS" in results.
windows() {
	_f=$1 _r=$2
	shift 2
	progs >"$TD_TMP/snap0"
	_w=0
	while [ $_w -lt "$WINDOWS" ]; do
		_w=$((_w + 1))
		mixed
		progs >"$TD_TMP/snap1"
		for _p in "$@"; do
			window_cost "${_p#*:}" "$_f $_r ${_p%%:*}"
		done
		mv "$TD_TMP/snap1" "$TD_TMP/snap0"
	done
}

# td_launch FUNC ARGS: topdown FUNC --no-profile --fentry ARGS --json on CPU 0, once it
# says "Ctrl-C to end".
td_launch() {
	TD_OUT=$TD_TMP/td.out TD_ERR=$TD_TMP/td.err
	rm -f "$TD_OUT" "$TD_ERR"
	# shellcheck disable=SC2086
	taskset -c 0 topdown "$1" --no-profile --fentry $2 --json >"$TD_OUT" 2>"$TD_ERR" &
	TD_PID=$!
	wait_line "$TD_ERR" "Ctrl-C to end"
}

# td_end FUNC: stops td_launch's topdown, which must exit with 0 (sets TD_SUMMARY).
td_end() {
	td_stop INT >/dev/null
	[ "$TD_RC" = 0 ] || fail "topdown $1 exited with $TD_RC: $(cat "$TD_ERR")"
}

# per_call: the run's cost per call from attach, "NS RUNS" (the summary's run_time_ns /
# run_cnt); nothing if the program never ran.
per_call() {
	echo "$TD_SUMMARY" | grep -o '"bpf":{[^}]*' |
		sed -nE 's/.*"run_cnt":([0-9]+),"run_time_ns":([0-9]+).*/\1 \2/p' |
		awk '$1 > 0 { printf "%.1f %d\n", $2 / $1, $1 }'
}

# td_round FUNC ROUND KIND ARGS: topdown FUNC ARGS, its figures as KIND (the bare
# counter's as KIND.bare).
td_round() {
	td_launch "$1" "--companion bare $4"
	# Until start-up ends every call is pending: the passes below measure new call
	# sites and steady state, not the start-up window.
	td_ready
	prog=$(progs | awk '$2 ~ /^td_fentry(_nl|_known)?$/ { m = $2 } END { print m }')
	[ -n "$prog" ] || fail "topdown $1: no td_fentry program loaded: $(progs)"
	# The first pass: its call sites are new, resolved by the polls meanwhile.
	_windows=$WINDOWS WINDOWS=1
	windows "$1" "$2" "$3.first:$(prog_id "^$prog\$")"
	WINDOWS=$_windows
	sleep 1.5
	windows "$1" "$2" "$3:$(prog_id "^$prog\$")" "$3.bare:$(prog_id '^td_bare_fentry$')"
	td_end "$1"
	total=$(summary_num total) own=$(summary_num own_calls)
	runs=$(echo "$TD_SUMMARY" | grep -o '"bpf":{[^}]*' | sed -nE 's/.*"run_cnt":([0-9]+).*/\1/p')
	[ "$((total + own))" = "$runs" ] ||
		fail "topdown $1: $total calls counted + $own own calls, but its program ran $runs times"
	# the whole run's cost per call, warm-up pass and all (the summary's figure)
	whole=$(per_call | cut -d' ' -f1)
	echo "$1 $2 $3.account $total $(summary_num uncached) $own $(reason_rows) $whole" >>"$TD_TMP/results"
}

# clean_round FUNC ROUND KIND ARGS: the whole run as a user meets it: topdown FUNC ARGS,
# the workload started when it says "Ctrl-C to end" (the first pass and WINDOWS more,
# nothing else run meanwhile: no snapshot), then stopped; its cost per call from attach
# (the summary's run_time_ns / run_cnt) as KIND.clean.
clean_round() {
	td_launch "$1" "$4"
	_p=0
	while [ $_p -le "$WINDOWS" ]; do
		mixed
		_p=$((_p + 1))
	done
	td_end "$1"
	_w=$(per_call)
	[ -z "$_w" ] || echo "$1 $2 $3.clean $_w" >>"$TD_TMP/results"
}

# bt_round FUNC ROUND
bt_round() {
	bt_start "$bt_fentry:$1 { @n = count(); }"
	windows "$1" "$2" "bt:$(bt_prog)"
	bt_stop
}

: >"$TD_TMP/results"
mixed # warm the caches of the tree
for r in $(seq "$ROUNDS"); do
	for f in $FUNCS; do
		td_round "$f" "$r" count --no-auto
		clean_round "$f" "$r" count --no-auto
		td_round "$f" "$r" auto "--min-events 1000000000"
		clean_round "$f" "$r" auto "--min-events 1000000000"
		[ -z "$bt" ] || bt_round "$f" "$r"
	done
done

median() {
	awk -v f="$1" -v k="$2" '$1 == f && $3 == k { print $4 }' "$TD_TMP/results" | median_of
}
calls() { awk -v f="$1" -v k="$2" '$1 == f && $3 == k { n += $5; w++ } END { if (w) printf "%d", n / w }' "$TD_TMP/results"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }

clock="software emulation (ratios only)"
[ -z "${TD_ICOUNT:-}" ] || clock="software emulation, the guest's clock counting instructions (-icount $TD_ICOUNT: ratios only, repeatable)"
echo "bench: kernel $TD_KERNEL, CPU 0, $ROUNDS interleaved rounds, $clock; BPF: the median over $WINDOWS passes a round of a mixed workload (find, ls -lR, cat /proc/*/stat, 20 forks of sh, md5sum, cp -r)"
for f in $FUNCS; do
	b=$(median "$f" bt)
	for k in count auto; do
		case $k in
		count) what="tier 1, counting only (--no-auto)" ;;
		auto) what="tier 1 with its 50 ms polls, capture never on (--min-events 1000000000)" ;;
		esac
		td=$(median "$f" $k) bare=$(median "$f" $k.bare)
		# shellcheck disable=SC2046
		set -- $(awk -v f="$f" -v k="$k.account" '$1 == f && $3 == k { t += $4; u += $5; o += $6; if ($7 > s) s = $7; print $8 >"/dev/stderr" } END { printf "%d %d %d %d", t, u, o, s }' "$TD_TMP/results" 2>"$TD_TMP/whole")
		line="bench: $f, $4 callers, $(calls "$f" $k) calls a pass: topdown $what $td ns/call = $(ratio "$td" "$bare")x the bare fentry counter beside it ($bare ns)"
		[ -z "$b" ] || line="$line = $(ratio "$td" "$b")x bpftrace $bt_version $bt_fentry:$f { @n = count(); } ($b ns)"
		whole=$(median_of <"$TD_TMP/whole")
		first=$(median "$f" $k.first)
		line="$line; first pass (new call sites) $first ns/call"
		[ -z "$b" ] || line="$line = $(ratio "$first" "$b")x"
		line="$line; whole run, first pass and all: $whole ns/call"
		[ -z "$b" ] || line="$line = $(ratio "$whole" "$b")x"
		clean=$(median "$f" $k.clean)
		[ -n "$clean" ] || fail "$f: no run of the workload alone"
		line="$line; whole run of the workload alone, from Ctrl-C: $clean ns/call"
		[ -z "$b" ] || line="$line = $(ratio "$clean" "$b")x"
		echo "$line; over its runs: $1 calls counted, $2 uncached, $3 own calls left out"
	done
done
echo 0 >/proc/sys/kernel/bpf_stats_enabled
exit 0
