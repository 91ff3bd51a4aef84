# Helpers for guest cases (busybox sh).  Source it first:   . "$TD_LIB"
# This file is not a case itself.

# fail MSG...: print "FAIL: MSG" and end the case as failed (exit 1). A topdown of
# td_start still running is stopped first, as Ctrl-C would: a case's EXIT trap that
# waits for its children would otherwise wait for it until the case's time limit.
fail() {
	echo "FAIL: $*"
	[ -z "${TD_LIVE:-}" ] || kill -INT "$TD_LIVE" 2>/dev/null
	exit 1
}

# skip MSG...: print "SKIP: MSG" and end the case as skipped (exit 77).
skip() {
	echo "SKIP: $*"
	exit 77
}

# expect_eq NAME GOT WANT: print "ok: NAME = GOT" if GOT = WANT (string compare),
# else fail.
expect_eq() {
	if [ "$2" = "$3" ]; then
		echo "ok: $1 = $2"
	else
		fail "$1: got '$2', want '$3'"
	fi
}

# vmstat KEY: print the value of KEY in /proc/vmstat; print nothing and return 1 if
# there is no such key.
vmstat() {
	awk -v k="$1" '$1 == k { print $2; found = 1 } END { exit !found }' /proc/vmstat
}

# ktext FUNC: true if FUNC is a function (a text symbol) of the running kernel. Reading
# /proc/kallsyms takes seconds under emulation, so the kernel's functions are read
# from it once per boot (the kernel's own, not those of modules or BPF programs).
TD_KTEXT=/tmp/td-ktext
ktext() {
	if [ ! -s $TD_KTEXT ]; then
		grep ' [tT] [^ ]*$' /proc/kallsyms >$TD_KTEXT.new && mv $TD_KTEXT.new $TD_KTEXT
	fi
	grep -q " [tT] $1\$" $TD_KTEXT
}

# need_cmd CMD...: skip the case unless every CMD is in PATH.
need_cmd() {
	for _c in "$@"; do
		command -v "$_c" >/dev/null 2>&1 || skip "$_c not available"
	done
}

# ftrace_on FUNC [PID]: start ftrace's function tracer on the kernel function FUNC, for
# process PID alone if given (else every task, until a pid is written to
# set_ftrace_pid). Returns 77 if ftrace cannot trace FUNC.
ftrace_on() {
	_t=/sys/kernel/tracing
	[ -w "$_t/set_ftrace_filter" ] || return 77
	grep -qx "$1" "$_t/available_filter_functions" 2>/dev/null || return 77
	echo 0 >"$_t/tracing_on"
	echo nop >"$_t/current_tracer"
	echo 8192 >"$_t/buffer_size_kb"
	echo "$1" >"$_t/set_ftrace_filter" || return 77
	[ -z "${2:-}" ] || echo "$2" >"$_t/set_ftrace_pid" || return 77
	echo >"$_t/trace"
	echo function >"$_t/current_tracer"
	echo 1 >"$_t/tracing_on"
}

# ftrace_off FUNC: stop the tracer ftrace_on started, print one line per process name
# and caller:
#   ftrace: FUNC <count> <comm> <caller>
# (the caller is the function FUNC was called from, as ftrace shows it after "<-"),
# then "ftrace: lost N events (buffer overrun)" if events were lost; then ftrace_reset.
ftrace_off() {
	_t=/sys/kernel/tracing
	echo 0 >"$_t/tracing_on"
	# Lines look like "  thp-123  [001] ..... 12.345678: FUNC <-CALLER".
	awk -v fn="$1" '
		/^#/ { next }
		{
			for (i = 1; i < NF; i++)
				if ($i == fn && substr($(i + 1), 1, 2) == "<-") {
					comm = $1
					sub(/-[0-9]+$/, "", comm)
					n[comm " " substr($(i + 1), 3)]++
				}
		}
		END { for (k in n) print "ftrace: " fn " " n[k] " " k }
	' "$_t/trace" | sort
	_lost=$(awk '/^overrun:/ { s += $2 } END { print s + 0 }' "$_t"/per_cpu/cpu*/stats)
	[ "$_lost" = 0 ] || echo "ftrace: lost $_lost events (buffer overrun)"
	ftrace_reset
}

# ftrace_reset: ftrace with no tracer, no function filter and no pid filter.
ftrace_reset() {
	echo nop >/sys/kernel/tracing/current_tracer
	echo >/sys/kernel/tracing/set_ftrace_filter
	echo >/sys/kernel/tracing/set_ftrace_pid
}

# ftrace_calls FUNC CMD [ARG...]: run CMD with the ftrace function tracer limited to the
# kernel function FUNC and to CMD's process, print CMD's output, then ftrace_off's lines.
# Returns CMD's exit status; returns 77 if ftrace cannot trace FUNC.
ftrace_calls() {
	_fn=$1
	shift
	ftrace_on "$_fn" || return 77
	sh -c 'echo $$ >/sys/kernel/tracing/set_ftrace_pid && exec "$@"' sh "$@"
	_rc=$?
	ftrace_off "$_fn"
	return $_rc
}

# need_func FUNC...: skip the case unless every FUNC is a function of the running kernel.
need_func() {
	for _f in "$@"; do
		ktext "$_f" || skip "no kernel function $_f in $TD_KERNEL"
	done
}

# need_madvise ADVICE: skip unless the kernel takes madvise advice ADVICE, which a
# workload uses: MADV_COLLAPSE (Linux 6.1; thp --collapse) or MADV_POPULATE_WRITE
# (5.14; faults populate). Tried once on a small region: EINVAL means it is unknown.
need_madvise() {
	case $1 in
	MADV_COLLAPSE) _try="thp --collapse 1" _since=6.1 ;;
	MADV_POPULATE_WRITE) _try="faults populate 1" _since=5.14 ;;
	*) fail "need_madvise: unknown advice $1" ;;
	esac
	$_try >"$TD_TMP/madvise.out" 2>&1 && return 0
	grep -q "$1.*Invalid argument" "$TD_TMP/madvise.out" &&
		skip "no $1 in $TD_KERNEL (Linux $_since)"
	fail "$_try: $(cat "$TD_TMP/madvise.out")"
}

# Kernel symbols that play the same part on each architecture (uname -m):
#   TD_ENTRY         the system call entry: in kallsyms, neither in BTF nor kprobe-able;
#   TD_NOBTF         in kallsyms but not in BTF, kprobe-able, called once per system call
#                    (x86_64: getpid's wrapper; arm64, where the wrappers are in BTF: the
#                    common syscall path, a constprop clone);
#   TD_NOBTF_CALLER  the function that calls TD_NOBTF.
case $(uname -m) in
aarch64)
	TD_ENTRY=el0t_64_sync TD_NOBTF=el0_svc_common.constprop.0 TD_NOBTF_CALLER=do_el0_svc
	;;
*)
	TD_ENTRY=entry_SYSCALL_64 TD_NOBTF=__x64_sys_getpid TD_NOBTF_CALLER="do_syscall_64 → indirect"
	# Before it, do_syscall_64 calls the wrapper through sys_call_table: an indirect call.
	# Where the dispatcher is x64_sys_call (6.9, and stable backports), do_syscall_64
	# calls it and its switch jumps to the wrapper: topdown names the jumping function.
	if ktext x64_sys_call; then
		TD_NOBTF_CALLER="x64_sys_call (tail call)"
	fi
	;;
esac

# split_fn: sets TD_SPLIT to this kernel's THP deferred-split function, the one the
# thp workload's counts are known for: deferred_split_folio (6.12 on: once per THP
# fault, half unmap and collapse), or deferred_split_huge_page (6.1, 5.10: called by
# page_remove_rmap for every PTE-mapped page of a THP it unmaps, 256 at each half unmap
# and 256 more at exit; never at fault or collapse time, so faults add no call). Skips
# if the kernel has neither.
split_fn() {
	if grep -q " [tT] deferred_split_folio\$" /proc/kallsyms; then
		TD_SPLIT=deferred_split_folio
	elif grep -q " [tT] deferred_split_huge_page\$" /proc/kallsyms; then
		TD_SPLIT=deferred_split_huge_page
	else
		skip "neither deferred_split_folio nor deferred_split_huge_page in $TD_KERNEL"
	fi
}

# Deeper-frame rules that tell deferred_split_huge_page's calls apart (6.1, 5.10; all
# from page_remove_rmap): MUNMAP under unmap_region, EXIT under exit_mmap; a half
# MADV_DONTNEED keeps the caller's name, page_remove_rmap.
TD_RULES_61="MUNMAP=page_remove_rmap@unmap_region/8;EXIT=page_remove_rmap@exit_mmap/8"

# held_dontneeds K: K thp processes one after another, each a half MADV_DONTNEED (on
# 6.1 and 5.10: 256 calls of deferred_split_huge_page at once) that then holds its exit
# (the other 256); waits for each to be done; their pids are added to $held_pids.
held_dontneeds() {
	_k=0
	while [ $_k -lt "$1" ]; do
		rm -f "$TD_TMP/held.out"
		thp --dontneed-halves 1 --hold-ms 600000 >"$TD_TMP/held.out" 2>&1 &
		held_pids="$held_pids $!"
		wait_line "$TD_TMP/held.out" "^thp: faults=0 munmap_halves=0 dontneed_halves=1 "
		_k=$((_k + 1))
	done
}

# kprobe_links: true if the kernel links kprobe programs (BPF_LINK_TYPE_PERF_EVENT,
# Linux 5.15), which a pin in kprobe mode takes.
kprobe_links() {
	bpftool btf dump file /sys/kernel/btf/vmlinux 2>/dev/null | grep -q "'BPF_LINK_TYPE_PERF_EVENT'"
}

# thp_callers: sets the callers of deferred_split_folio for the thp workload that moved
# between kernel versions (the ones that did not: folio_remove_rmap_ptes for a partial
# unmap, collapse_huge_page for MADV_COLLAPSE):
#   TD_THP_FAULT  the THP fault path's: do_huge_pmd_anonymous_page up to 6.x (with
#                 __do_huge_pmd_anonymous_page inlined), map_anon_folio_pmd_pf from 7.x on;
#   TD_THP_FAULT_REASON  the reason topdown counts that path's calls under: from 7.x
#                 on x86-64, map_anon_folio_pmd_pf calls map_anon_folio_pmd_nopf, which
#                 ends in a jump to deferred_split_folio (a tail call; arm64 makes none);
#   TD_THP_COLLAPSE_REASON  MADV_COLLAPSE's: collapse_huge_page, or where it too calls
#                 map_anon_folio_pmd_nopf, the same reason as the fault's (TD_THP_MERGED=1);
#   TD_ZAP_WALK   the page-table walk of a zap: unmap_page_range, from 7.x on
#                 __zap_vma_range.
thp_callers() {
	TD_THP_FAULT=do_huge_pmd_anonymous_page TD_ZAP_WALK=unmap_page_range
	ktext map_anon_folio_pmd_pf && TD_THP_FAULT=map_anon_folio_pmd_pf
	ktext __zap_vma_range && TD_ZAP_WALK=__zap_vma_range
	TD_THP_FAULT_REASON=$TD_THP_FAULT TD_THP_COLLAPSE_REASON=collapse_huge_page TD_THP_MERGED=
	if [ "$TD_ARCH" = amd64 ] && ktext map_anon_folio_pmd_nopf; then
		TD_THP_FAULT_REASON="map_anon_folio_pmd_nopf (tail call)"
		TD_THP_COLLAPSE_REASON=$TD_THP_FAULT_REASON TD_THP_MERGED=1
	fi
	echo "thp callers here: fault $TD_THP_FAULT (reason: $TD_THP_FAULT_REASON), zap walk $TD_ZAP_WALK"
}

# ------------------------------------------------------------------ topdown helpers

# wait_line FILE PATTERN [SECS]: wait (up to SECS, default 30 s) until FILE has a line
# matching PATTERN.
wait_line() {
	_i=0 _s=${3:-30}
	until grep -qs "$2" "$1"; do
		_i=$((_i + 1))
		[ $_i -lt $((_s * 10)) ] || fail "no '$2' in $1 after $_s s: $(cat "$1" 2>/dev/null)"
		sleep 0.1
	done
}

# thp_start ARGS...: start "thp ARGS" in the background (output to $TD_TMP/thp.out, pid
# in $thp_pid) and wait for its "thp: ready" (its THP faults done). The previous run's
# line must not be taken for this one's: the background shell may not have truncated
# the file yet when the wait begins.
thp_start() {
	rm -f "$TD_TMP/thp.out"
	thp "$@" >"$TD_TMP/thp.out" 2>&1 &
	thp_pid=$!
	wait_line "$TD_TMP/thp.out" "thp: ready"
}

# td_start ARGS...: start "topdown ARGS --json" in the background (stdout to $TD_OUT,
# stderr to $TD_ERR, pid in $TD_PID) and wait until it has attached.
td_start() {
	TD_OUT=$TD_TMP/td.out
	TD_ERR=$TD_TMP/td.err
	# The previous run's "Ctrl-C to end" must not be taken for this one's.
	rm -f "$TD_OUT" "$TD_ERR"
	topdown "$@" --json >"$TD_OUT" 2>"$TD_ERR" &
	TD_PID=$! TD_LIVE=$!
	_i=0
	until grep -qs "Ctrl-C to end" "$TD_ERR"; do
		if ! kill -0 "$TD_PID" 2>/dev/null; then
			cat "$TD_ERR"
			fail "topdown $* exited before it attached"
		fi
		_i=$((_i + 1))
		[ $_i -lt 600 ] || fail "topdown $* did not attach within 60 s"
		sleep 0.1
	done
	echo "+ topdown $* (pid $TD_PID): $(head -1 "$TD_ERR")"
}

# cpu_ticks PID: PID's CPU time so far, user and system, in clock ticks (TD_HZ a second).
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
TD_HZ=$(getconf CLK_TCK 2>/dev/null || echo 100)

# uptime_cs: the guest's uptime in hundredths of a second.
uptime_cs() {
	sed 's/^\([0-9]*\)\.\([0-9][0-9]\).*/\1\2/; s/^0*\([0-9]\)/\1/' /proc/uptime
}

# wait_exit PID WHAT: wait for the background process PID to end and return its exit
# status; a process still running after 30 s fails the case, by name, rather than
# leaving the case to hang until its time limit (which prints no FAIL line).
wait_exit() {
	_w=0
	# Running, and not a zombie waiting for this shell to reap it.
	while [ -n "$(sed -n 's/^[0-9]* (.*) \([^Z]\) .*/\1/p' "/proc/$1/stat" 2>/dev/null)" ]; do
		_w=$((_w + 1))
		[ $_w -lt 300 ] || fail "$2 did not exit within 30 s"
		sleep 0.1
	done
	wait "$1"
}

# td_sleeps S MS TARGET [TOPDOWN ARGS...]: one topdown run on TARGET, -p a "sleeps S MS"
# process (its output in $TD_TMP/w.out), around its S nanosleep calls; td_stop's
# TD_RC and TD_SUMMARY are set. sleeps blocks opening a FIFO until topdown counts
# (one switch), not spinning, so that its calls do not depend on how busy the host
# is while topdown starts (spinning, it was preempted 86 times in one run and 226 in
# the next, which a baseline took for a fix).
td_sleeps() {
	_s=$1 _ms=$2 _target=$3
	shift 3
	rm -f "$TD_TMP/go" "$TD_TMP/w.out"
	mkfifo "$TD_TMP/go" || fail "mkfifo failed"
	sleeps "$_s" "$_ms" "$TD_TMP/go" >"$TD_TMP/w.out" 2>&1 &
	_w=$!
	wait_line "$TD_TMP/w.out" "sleeps: ready"
	td_start "$_target" -p $_w "$@"
	td_ready
	: >"$TD_TMP/go"
	wait $_w || { cat "$TD_TMP/w.out"; fail "sleeps failed"; }
	td_stop INT
}

# td_ready: wait until the topdown of td_start is past start-up. It counts from attach
# ("Ctrl-C to end", with the kernel's symbols read), but resolves no call site until its
# loop runs: the first calls are pending until then. Its first interval line (--json,
# not -q) comes from the loop.
td_ready() {
	wait_line "$TD_OUT" '"type":"interval"'
}

# td_stop [SIGNAL]: send SIGNAL (default INT) to topdown, wait for it; sets TD_RC and
# TD_SUMMARY (the summary object of the JSON output).
td_stop() {
	kill -"${1:-INT}" "$TD_PID"
	wait_exit "$TD_PID" "topdown (pid $TD_PID, sent SIG${1:-INT})"
	TD_RC=$? TD_LIVE=
	TD_SUMMARY=$(grep '"type":"summary"' "$TD_OUT")
	[ -n "$TD_SUMMARY" ] || [ "${1:-INT}" = KILL ] || { cat "$TD_ERR"; fail "no summary from topdown"; }
	[ -z "$TD_SUMMARY" ] || echo "summary: $TD_SUMMARY" | cut -c1-2000
	[ -z "$TD_SUMMARY" ] || gates_hold
}

# gate_num REASON FIELD: field FIELD (calls, shown, rate_capped, ...) of REASON's
# capture_calls entry in $TD_SUMMARY (0 if it has none).
gate_num() {
	_v=$(echo "$TD_SUMMARY" | grep -o '"capture_calls":\[[^]]*\]' | grep -o "{\"reason\":\"$1\"[^}]*}" |
		grep -o "\"$2\":[0-9]*" | cut -d: -f2)
	echo "${_v:-0}"
}

# gates_hold: in $TD_SUMMARY, every captured reason's calls at the stack gate equal its
# stacks shown plus each cause of the others (capture_calls), else fail: checked on
# every run that ends with a summary.
gates_hold() {
	_bad=$(echo "$TD_SUMMARY" | grep -o '"capture_calls":\[[^]]*\]' | grep -o '{[^}]*}' |
		while read -r _g; do
			_sum=0
			for _k in shown sampled_out rate_capped ringbuf_full not_kept unseen unnamed; do
				_sum=$((_sum + $(echo "$_g" | grep -o "\"$_k\":[0-9]*" | cut -d: -f2)))
			done
			_calls=$(echo "$_g" | grep -o '"calls":[0-9]*' | cut -d: -f2)
			# A captured reason's calls are its capture spans' ("stack capture" lines).
			_r=$(echo "$_g" | sed 's/^{"reason":"\([^"]*\)".*/\1/')
			_span=$(echo "$TD_SUMMARY" | grep -o '"captures":\[[^]]*\]' | grep -o "{\"reason\":\"$_r\",[^}]*}" |
				grep -o '"calls":[0-9]*' | cut -d: -f2 | awk '{ s += $1; n++ } END { print n ? s : "" }')
			if [ "$_sum" = "$_calls" ] && { [ -z "$_span" ] || [ "$_span" = "$_calls" ]; }; then
				echo "$_g" | sed 's/^{"reason":"\([^"]*\)".*/ok: \1: capture calls add up/; s/$/ '"$_calls"'/' >&2
			else
				echo "$_g"
			fi
		done)
	[ -z "$_bad" ] || fail "capture calls do not add up (shown + drops, and the spans' calls): $_bad"
}

# reason_count NAME: the run's count for reason NAME in $TD_SUMMARY (0 if it has no row).
reason_count() {
	_v=$(echo "$TD_SUMMARY" | grep -o "{\"reason\":\"$1\",\"count\":[0-9]*" | sed 's/.*://')
	echo "${_v:-0}"
}

# reason_background NAME: the stacks of reason NAME in $TD_SUMMARY that the background
# sampler took (0 if it has none).
reason_background() {
	_v=$(echo "$TD_SUMMARY" | grep -o "{\"reason\":\"$1\",\"captured\":[0-9]*,\"background\":[0-9]*" |
		sed 's/.*://')
	echo "${_v:-0}"
}

# reason_rows: number of rows of the "reasons" table in $TD_SUMMARY.
reason_rows() {
	echo "$TD_SUMMARY" | grep -o '"reasons":\[[^]]*\]' | head -n 1 | grep -o '{"reason":' | wc -l
}

# expect_share NAME PCT: reason NAME has at least PCT percent of the calls in
# $TD_SUMMARY (and there were calls), else fail.
expect_share() {
	_n=$(reason_count "$1")
	_t=$(summary_num total)
	[ "${_t:-0}" -gt 0 ] || fail "$1: no calls at all"
	if [ $((_n * 100)) -ge $(($2 * _t)) ]; then
		echo "ok: $1 = $_n of $_t calls (>= $2%)"
	else
		fail "$1: $_n of $_t calls, want >= $2%"
	fi
}

# expect_calls NAME [WHEN]: reason NAME has calls in $TD_SUMMARY, else fail (WHEN, e.g.
# "in 4 tries", is said in the failure).
expect_calls() {
	_n=$(reason_count "$1")
	[ "$_n" -gt 0 ] || fail "$1: no calls${2:+ $2}: $TD_SUMMARY"
	echo "ok: $1 = $_n calls"
}

# expect_none NAME...: no calls for any reason NAME in $TD_SUMMARY.
expect_none() {
	for _r in "$@"; do
		expect_eq "$_r" "$(reason_count "$_r")" 0
	done
}

# summary_num KEY: the first number stored under "KEY" in $TD_SUMMARY.
summary_num() {
	echo "$TD_SUMMARY" | grep -o "\"$1\":[0-9]*" | head -1 | sed 's/.*://'
}

# summary_str KEY: the first string stored under "KEY" in $TD_SUMMARY.
summary_str() {
	echo "$TD_SUMMARY" | grep -o "\"$1\":\"[^\"]*\"" | head -1 | sed 's/.*:"//; s/"$//'
}

# td_progs: how many BPF programs of topdown's (named td_*) are loaded.
td_progs() {
	bpftool prog show 2>/dev/null | grep -c ' name td_'
}

# td_maps: how many of topdown's maps are loaded.
td_maps() {
	bpftool map show 2>/dev/null | grep -c -E ' name (counts|sites|pending|names|meta|samples) '
}

# expect_settled NAME WANT COUNT: the output of COUNT (td_progs, td_maps) is WANT,
# waiting up to 20 s for it: 5.10 frees a program by an RCU callback after its last
# link or pin is gone, and maps in a kernel workqueue, and a host that starves the
# guest's CPUs delays both by seconds.
expect_settled() {
	_i=0
	while [ "$($3)" != "$2" ] && [ $_i -lt 200 ]; do
		sleep 0.1
		_i=$((_i + 1))
	done
	expect_eq "$1" "$($3)" "$2"
}
expect_progs() { expect_settled "$1" "$2" td_progs; }
expect_maps() { expect_settled "$1" "$2" td_maps; }

# http_get URL FILE [WGET-ARGS...]: wget URL into FILE, given 90 s: the limit names a
# hang and bounds nothing (a first scrape of serve reads /proc/kallsyms: over 30 s once
# on 5.10 with the host busy). A request still unanswered after 15 s gets a second one
# beside it, said on stdout: on 5.10 under TCG a wake-up of serve's accepting thread
# was seen lost, every thread asleep, until the next request came (topdown_many_cpus).
http_get() {
	_hg_url=$1 _hg_file=$2
	shift 2
	timeout 90 wget -q "$@" -O "$_hg_file" "$_hg_url" &
	_hg_pid=$!
	_hg_k=0
	while kill -0 $_hg_pid 2>/dev/null && [ $_hg_k -lt 150 ]; do
		_hg_k=$((_hg_k + 1))
		sleep 0.1
	done
	if kill -0 $_hg_pid 2>/dev/null; then
		echo "note: $_hg_url unanswered after 15 s: a second request beside it"
		timeout 30 wget -q -O /dev/null "$_hg_url" || true
	fi
	wait $_hg_pid
}

# check_formats NAME URL FUNC: /metrics at URL in both formats. Without an Accept
# header: the Prometheus text format 0.0.4 (its Content-Type, no # EOF), which passes
# promtool check metrics, lint included (a guest without promtool, an arm64 one, says
# so and goes on). With Prometheus's Accept header: OpenMetrics (its Content-Type, the
# info type, # EOF), whose series of FUNC are those of the text format.
check_formats() {
	http_get "$2/metrics" "$TD_TMP/fmt.txt" -S 2>"$TD_TMP/fmt.hdr" || fail "$1: scrape failed"
	grep -q '^  Content-Type: text/plain; version=0.0.4; charset=utf-8' "$TD_TMP/fmt.hdr" ||
		fail "$1: no Accept header, got: $(cat "$TD_TMP/fmt.hdr")"
	grep -q '^# EOF' "$TD_TMP/fmt.txt" && fail "$1: # EOF in the text format"
	grep -qx '# TYPE topdown_info gauge' "$TD_TMP/fmt.txt" || fail "$1: topdown_info is not a gauge"
	if command -v promtool >/dev/null 2>&1; then
		if ! promtool check metrics <"$TD_TMP/fmt.txt" >"$TD_TMP/promtool.out" 2>&1 ||
			[ -s "$TD_TMP/promtool.out" ]; then
			fail "$1: promtool check metrics: $(cat "$TD_TMP/promtool.out")"
		fi
		echo "ok: $1: promtool check metrics passes $(grep -c '^topdown' "$TD_TMP/fmt.txt") samples"
	else
		echo "note: $1: no promtool in this guest: promtool check metrics not run"
	fi
	http_get "$2/metrics" "$TD_TMP/fmt.om" -S --header \
		"Accept: application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1" \
		2>"$TD_TMP/fmt.hdr" || fail "$1: OpenMetrics scrape failed"
	grep -q '^  Content-Type: application/openmetrics-text; version=1.0.0; charset=utf-8' "$TD_TMP/fmt.hdr" ||
		fail "$1: OpenMetrics asked for, got: $(cat "$TD_TMP/fmt.hdr")"
	expect_eq "$1: OpenMetrics ends" "$(tail -n 1 "$TD_TMP/fmt.om")" "# EOF"
	grep -qx '# TYPE topdown info' "$TD_TMP/fmt.om" || fail "$1: no info metric in OpenMetrics"
	for f in txt om; do
		grep "^topdown[a-z_]*{function=\"$3\"," "$TD_TMP/fmt.$f" | sed 's/ [^ ]*$//' | sort >"$TD_TMP/series.$f"
	done
	if [ ! -s "$TD_TMP/series.txt" ] || ! cmp -s "$TD_TMP/series.txt" "$TD_TMP/series.om"; then
		fail "$1: the series of $3 differ: $(diff "$TD_TMP/series.txt" "$TD_TMP/series.om")"
	fi
	echo "ok: $1: OpenMetrics when asked for, $(wc -l <"$TD_TMP/series.om") series of $3 as in the text format"
}

# expect_fail RC PATTERN ARGS...: topdown ARGS fails with exit status RC (2: the name or
# option given is wrong; 1: the system or the pin's state refuses) and one line matching
# PATTERN.
expect_fail() {
	want_rc=$1 pattern=$2
	shift 2
	topdown "$@" >"$TD_TMP/out" 2>"$TD_TMP/err"
	rc=$?
	echo "+ topdown $*: $(cat "$TD_TMP/err")"
	[ $rc = "$want_rc" ] || fail "topdown $*: exit status $rc, want $want_rc"
	expect_eq "stderr lines of topdown $*" "$(wc -l <"$TD_TMP/err")" 1
	grep -q -- "$pattern" "$TD_TMP/err" || fail "topdown $*: stderr does not match '$pattern'"
}

# brd_setup: for the cases whose callers are the RAM disk's (brd), a module: skips
# unless the guest has brd.ko and loadable modules; brd unloaded; F set to the page
# allocator function brd calls once per page of the disk first written
# (alloc_pages_noprof from 6.10, alloc_pages on 6.1, alloc_pages_current on 5.10).
brd_setup() {
	need_cmd insmod rmmod dd
	[ -f /lib/td-modules/brd.ko ] || skip "no RAM-disk module (brd) among $TD_KERNEL's packages"
	[ -r /proc/modules ] || skip "$TD_KERNEL has no loadable modules"
	rmmod brd 2>/dev/null
	F=
	for _f in alloc_pages_noprof alloc_pages_current alloc_pages; do
		if ktext $_f; then
			F=$_f
			break
		fi
	done
	[ -n "$F" ] || skip "no page allocator function known to this case in $TD_KERNEL"
}

# load_and_write PAGES: load brd (8 MiB, one disk), write PAGES distinct pages of it.
load_and_write() {
	insmod /lib/td-modules/brd.ko rd_nr=1 rd_size=8192 || fail "insmod brd.ko failed"
	[ -b /dev/ram0 ] || fail "brd loaded, but no /dev/ram0"
	dd if=/dev/zero of=/dev/ram0 bs=4096 count="$1" conv=fsync 2>"$TD_TMP/dd" ||
		fail "dd to /dev/ram0 failed: $(cat "$TD_TMP/dd")"
}
