# --drill: a captured reason's calls split by path, exactly, judged against ftrace's
# own stack of every call in the same boot (the function tracer's func_stack_trace for
# a kernel function, a stacktrace trigger for a tracepoint). Each path topdown counts
# (its names from the caller up, --drill-levels 8 of them, "[stack end]" where the
# stack ends first) has the calls ftrace saw along it, no more and no fewer: so every
# node of the tree, each being the sum of the paths below it, is exact to level 8.
# - a kernel function, fentry and kprobe: thp's half munmaps and half MADV_DONTNEEDs
#   reach deferred_split_folio (6.12 on) from one caller by two paths; on 6.1 and
#   5.10 deferred_split_huge_page gets 256 calls per half unmap, and the exit's;
# - a tracepoint, kmem:mm_page_alloc, filtered to one process (-p, and the trigger's
#   common_pid): its faults' pages and page tables (its other allocations, such as
#   those of its wait for the go file, may fall outside one tool's window).
# The tree's root is every call of the reason (--stack-on from the start), and the
# text summary shows the tree.
. "$TD_LIB"
need_cmd topdown thp faults
split_fn
T=/sys/kernel/tracing
[ -w $T/options/func_stack_trace ] || skip "no ftrace func_stack_trace here"
LEVELS=8
R=folio_remove_rmap_ptes
[ $TD_SPLIT = deferred_split_folio ] || R=page_remove_rmap

# ftrace_paths AT SKIP FIRST: "CALLS PATH" lines from the stack traces in the trace
# buffer: each stack from the frame named AT (the one after it with SKIP=1), names
# only (offsets, clone suffixes and module names cut), LEVELS of them and
# "[stack end]" if the stack has fewer, joined by ";"; only paths whose first name is
# FIRST. Fails if ftrace lost events.
ftrace_paths() {
	_lost=$(awk '/^overrun:/ { s += $2 } END { print s + 0 }' $T/per_cpu/cpu*/stats)
	[ "$_lost" = 0 ] || fail "ftrace lost $_lost events"
	awk -v at="$1" -v skip="$2" -v first="$3" -v levels=$LEVELS '
		function flush(   i, j, p) {
			if (!nf)
				return
			for (i = 1; i <= nf && f[i] != at; i++)
				;
			if (i > nf) {
				print "no " at " in a stack" >"/dev/stderr"
				bad++
			}
			i += skip
			p = ""
			for (j = i; j < i + levels && j <= nf; j++)
				p = p (p == "" ? "" : ";") f[j]
			if (j < i + levels)
				p = p ";[stack end]"
			if (f[i] == first)
				n[p]++
			nf = 0
		}
		/<stack trace>/ { flush(); inside = 1; next }
		inside && /^ *=> / {
			name = $2
			sub(/\+.*/, "", name)
			sub(/\..*/, "", name)
			f[++nf] = name
			next
		}
		{ flush(); inside = 0 }
		END { flush(); for (p in n) print n[p], p; exit bad != 0 }
	' $T/trace | sort
}

# td_paths: "CALLS PATH" lines of the one drilled reason in $TD_SUMMARY.
td_paths() {
	echo "$TD_SUMMARY" | grep -o '{"calls":[0-9]*,"path":"[^"]*"}' |
		sed 's/{"calls":\([0-9]*\),"path":"\(.*\)"}/\1 \2/' | sort
}

# expect_paths NAME ORACLE REASON [WITH]: topdown's paths are ORACLE's (the same lines;
# only those with the pattern WITH if given), and every call of REASON is on one.
expect_paths() {
	td_paths | grep -e "${4:-.}" >"$TD_TMP/td.paths"
	echo "$2" | grep -e "${4:-.}" >"$TD_TMP/ftrace.paths"
	echo "$1: paths, topdown's then ftrace's:"
	cat "$TD_TMP/td.paths" "$TD_TMP/ftrace.paths"
	[ -s "$TD_TMP/td.paths" ] || fail "$1: no drilled path"
	cmp -s "$TD_TMP/td.paths" "$TD_TMP/ftrace.paths" || fail "$1: paths differ from ftrace's"
	echo "ok: $1: $(wc -l <"$TD_TMP/td.paths") paths as ftrace's"
	_calls=$(echo "$TD_SUMMARY" | grep -o '"drill":\[{"reason":"[^"]*","levels":8,"calls":[0-9]*' | sed 's/.*://')
	expect_eq "$1: drilled calls" "$_calls" "$(reason_count "$3")"
	expect_eq "$1: drilled paths' calls" "$(td_paths | awk '{ s += $1 } END { print s }')" "$_calls"
}

# drill_split MODE ARGS: thp's halves under topdown --drill, beside the function tracer.
drill_split() {
	thp_start --munmap-halves 2 --dontneed-halves 2 --wait-usr1
	echo 0 >$T/tracing_on
	echo nop >$T/current_tracer
	echo 8192 >$T/buffer_size_kb
	echo $TD_SPLIT >$T/set_ftrace_filter
	echo >$T/trace
	echo 1 >$T/options/func_stack_trace
	echo function >$T/current_tracer
	echo 1 >$T/tracing_on
	td_start $TD_SPLIT "$@" --no-profile --drill --drill-levels $LEVELS --stack-on $R
	kill -USR1 $thp_pid
	wait $thp_pid || fail "thp failed"
	td_stop INT
	echo 0 >$T/tracing_on
	echo 0 >$T/options/func_stack_trace
	oracle=$(ftrace_paths $TD_SPLIT 1 $R) || fail "ftrace's stacks"
	ftrace_reset
	expect_paths "$TD_SPLIT $*" "$oracle" $R
}

drill_split
drill_split --kprobe

# The tracepoint: the allocator function that fires it is its reason (--no-profile),
# named by a first run.
fn=$(topdown t:kmem:mm_page_alloc --no-profile --json -d 30 -c "faults touch 4" 2>"$TD_TMP/first.err" |
	grep '"type":"summary"' | grep -o '"reasons":\[{"reason":"[^"]*"' | sed 's/.*"reason":"//; s/"$//')
[ -n "$fn" ] || { cat "$TD_TMP/first.err"; fail "no reason from the first run"; }
echo "mm_page_alloc fires in $fn"
rm -f "$TD_TMP/go" "$TD_TMP/w.out"
faults touch 64 "$TD_TMP/go" >"$TD_TMP/w.out" 2>&1 &
w=$!
wait_line "$TD_TMP/w.out" "faults: ready"
echo nop >$T/current_tracer
echo 8192 >$T/buffer_size_kb
echo >$T/trace
# The trigger alone (the event soft-enabled): the buffer holds this process's stacks.
echo "stacktrace if common_pid == $w" >$T/events/kmem/mm_page_alloc/trigger
echo 1 >$T/tracing_on
td_start t:kmem:mm_page_alloc -p $w --no-profile --drill --drill-levels $LEVELS --stack-on "$fn"
td_ready
: >"$TD_TMP/go"
wait $w || { cat "$TD_TMP/w.out"; fail "faults failed"; }
td_stop INT
echo 0 >$T/tracing_on
echo "!stacktrace if common_pid == $w" >$T/events/kmem/mm_page_alloc/trigger
oracle=$(ftrace_paths "$fn" 0 "$fn") || fail "ftrace's stacks"
# The faults' paths: the process's other allocations (its wait for the go file's
# access() calls, now and then a slab page) may come before topdown attached or
# after the trigger is on.
expect_paths "mm_page_alloc" "$oracle" "$fn" handle_mm_fault

# The text: the reason's line, and its callers' chain.
topdown $TD_SPLIT --no-profile --drill --stack-on $R -c "thp --munmap-halves 1" >"$TD_TMP/text.out" 2>&1 ||
	{ cat "$TD_TMP/text.out"; fail "text run failed"; }
grep "by path\|<-" "$TD_TMP/text.out"
grep -q "^  $R by path (--drill, exact, 4 levels): [1-9][0-9]* calls of its [0-9]* calls seen while captured" "$TD_TMP/text.out" ||
	fail "no tree in the text summary"
grep -q "^    $R <- [a-z_]*" "$TD_TMP/text.out" || fail "no chain of callers in the text summary"

# --save and --baseline by path: a baseline with half MADV_DONTNEEDs beside the half
# munmaps, then a run without them (the "fix"): the node that lost its calls is the
# madvise path's, its share of the reason's calls from Q/(P+Q) (6.12 on; 6.1 and 5.10:
# the exit's calls besides) to none.
drill_run() {
	thp_start --munmap-halves 30 --dontneed-halves "$1" --wait-usr1
	shift
	td_start $TD_SPLIT --no-profile --drill --drill-levels $LEVELS --stack-on $R "$@"
	kill -USR1 $thp_pid
	wait $thp_pid || fail "thp failed"
	td_stop INT
}
drill_run 6 --save "$TD_TMP/base.json"
grep -q '"drill":\[{"reason":"'$R'","paths":\[' "$TD_TMP/base.json" || fail "no drilled paths in the result file"
drill_run 0 --baseline "$TD_TMP/base.json"
drop=$(echo "$TD_SUMMARY" | grep -o '"drill_drop":{[^}]*}')
echo "$drop"
[ -n "$drop" ] || fail "no drill_drop against the baseline"
echo "$drop" | grep -q '"reason":"'$R'","path":\["'$R'",[^]]*madvise' ||
	fail "the node that lost its calls is not the madvise path's"
echo "$drop" | grep -q '"share":0}' || fail "the madvise path kept calls"
echo "ok: drill_drop names the madvise path"
