# Helpers the benchmarks share (sourced as /bench/lib.sh after $TD_LIB; every guest has
# the benchmarks in /bench, and the runner takes no case named lib).

# progs: "ID NAME RUN_TIME_NS RUN_CNT" of every loaded BPF program.
progs() {
	bpftool prog show 2>/dev/null |
		sed -nE 's/^([0-9]+): .* name ([^ ]+) .* run_time_ns ([0-9]+) run_cnt ([0-9]+).*/\1 \2 \3 \4/p'
}

# rounds_windows: sets ROUNDS and WINDOWS, the rounds of a benchmark and the workload
# passes measured in each (TD_BENCH_ROUNDS, TD_BENCH_WINDOWS if set): 3 and 5, or 1
# and 3 under an instruction-counting clock (tests/guest/run --icount: TD_ICOUNT),
# where every round and window gives the same figures.
rounds_windows() {
	if [ -n "${TD_ICOUNT:-}" ]; then
		ROUNDS=${TD_BENCH_ROUNDS:-1} WINDOWS=${TD_BENCH_WINDOWS:-3}
	else
		ROUNDS=${TD_BENCH_ROUNDS:-3} WINDOWS=${TD_BENCH_WINDOWS:-5}
	fi
}

# window_cost ID WHAT: appends "WHAT NS_PER_CALL CALLS" of program ID between the
# progs snapshots $TD_TMP/snap0 and $TD_TMP/snap1 to $TD_TMP/results; fails if the
# program ran fewer than 100 times between them.
window_cost() {
	awk -v id="$1" -v what="$2" '
		FILENAME != f { n++; f = FILENAME }
		$1 == id { t[n] = $3; c[n] = $4 }
		END {
			if (c[2] - c[1] < 100) {
				printf "program %s (%s) ran %d times in a pass\n", id, what, c[2] - c[1]
				exit 1
			}
			printf "%s %.1f %d\n", what, (t[2] - t[1]) / (c[2] - c[1]), c[2] - c[1]
		}' "$TD_TMP/snap0" "$TD_TMP/snap1" >"$TD_TMP/window" || fail "$(cat "$TD_TMP/window")"
	cat "$TD_TMP/window" >>"$TD_TMP/results"
}

# prog_id PATTERN: the newest loaded program whose name matches PATTERN (an ERE).
prog_id() { progs | awk -v p="$1" '$2 ~ p { id = $1 } END { print id }'; }

# bt_detect: whether the guest has bpftrace (tests/guest/run --bpftrace puts it there);
# if so sets bt_cmd: the newest the guest has (Debian 13's bpftrace-0.23 beside the
# host's bpftrace, the one a user of a current distribution runs), or TD_BPFTRACE
# (`TD_BPFTRACE=bpftrace tests/guest/run ...`: the host's), bt_version, bt_fentry (bpftrace before 0.20 spells fentry "kfunc"; kprobe
# where it cannot attach fentry), and
# bt_attached and bt_settle: with __BPFTRACE_NOTIFY_PROBES_ATTACHED set, bpftrace prints
# that line once its probes are attached (the hook its own runtime tests wait on); one
# without it says "Attaching" before that, so it is given longer to settle.
bt_detect() {
	bt_cmd=${TD_BPFTRACE:-$(ls /bin/bpftrace-* 2>/dev/null | sort -V | tail -n 1)}
	bt_cmd=${bt_cmd##*/}
	[ -n "$bt_cmd" ] || bt_cmd=bpftrace
	command -v "$bt_cmd" >/dev/null 2>&1 || return 1
	bt_version=$($bt_cmd --version 2>&1 | sed -n 's/.*v\([0-9][0-9.]*\).*/\1/p' | head -1)
	bt_fentry=kfunc
	case $bt_version in 0.1[0-9]* | 0.[0-9] | 0.[0-9].*) ;; *) bt_fentry=fentry ;; esac
	# Where this bpftrace cannot attach fentry here (0.17 on 5.10: "kfunc/kretfunc
	# not available for your kernel version"), its nearest program is a kprobe's; the
	# rows name the probe they used.
	$bt_cmd --info 2>&1 | grep -Eq '(^| )(kfunc|fentry): yes' || bt_fentry=kprobe
	bt_attached=__BPFTRACE_NOTIFY_PROBES_ATTACHED bt_settle=1
	# Debian 13's runs from /opt with its own libraries; the hook is in its binary.
	_bt_bin=$(command -v "$bt_cmd")
	[ ! -x "/opt/$bt_cmd/bpftrace" ] || _bt_bin=/opt/$bt_cmd/bpftrace
	grep -q "$bt_attached" "$_bt_bin" || bt_attached=Attaching bt_settle=3
}

# bt_start PROGRAM: bpftrace -e PROGRAM on CPU 0 until bt_stop, attached and settled.
bt_start() {
	_bt_out=$TD_TMP/bt.out
	rm -f "$_bt_out"
	__BPFTRACE_NOTIFY_PROBES_ATTACHED=1 taskset -c 0 $bt_cmd -e "$1" >"$_bt_out" 2>&1 &
	BT_PID=$!
	_bt_k=0
	until grep -qs "$bt_attached" "$_bt_out"; do
		kill -0 $BT_PID 2>/dev/null || fail "bpftrace -e '$1' ended: $(cat "$_bt_out")"
		_bt_k=$((_bt_k + 1))
		[ $_bt_k -lt 1200 ] || fail "bpftrace -e '$1' did not attach within 120 s"
		sleep 0.1
	done
	sleep "$bt_settle"
}

# bt_prog: the id of bpftrace's program, once it has run: the program that ran most
# (bpftrace alone is tracing).
bt_prog() { progs | sort -k4 -n | tail -1 | cut -d' ' -f1; }

# bt_stop: ends the bpftrace bt_start started.
bt_stop() {
	kill -INT $BT_PID
	wait $BT_PID
}

# bt_rows: sets bt=1 if the guest has bpftrace (bt_detect), else bt= and says that the
# benchmark's bpftrace rows are skipped.
bt_rows() {
	bt=
	if bt_detect; then
		bt=1
	else
		echo "bench: notice: no bpftrace (tests/guest/run --bpftrace puts it in the guest): its rows are skipped"
	fi
}

# median_of [FORMAT]: the median of the numbers on stdin, printed with FORMAT (default
# %.1f); nothing if there are none.
median_of() {
	sort -n | awk -v fmt="${1:-%.1f}" '{ v[NR] = $1 } END {
		if (NR) printf fmt, (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
	}'
}

# mixed_tree: makes $tree, the tree the mixed workload walks and copies: the guest's own
# small files.
mixed_tree() {
	tree=$TD_TMP/tree
	mkdir -p "$tree"
	cp -r /etc /cases /bench "$tree/" 2>/dev/null
	cp "/boot/config-$TD_KERNEL" "$tree/" 2>/dev/null
	for _d in 1 2 3 4; do cp -r "$tree/cases" "$tree/copy$_d"; done
}

# mixed_script: one pass of the mixed kernel-heavy workload over the tree "$1": find,
# ls -lR, cat of /proc/*/stat, 20 forks of sh, md5sum and cp -r.
# shellcheck disable=SC2016 # expanded by the inner sh
mixed_script='
	find "$1" >/dev/null
	ls -lR "$1" >/dev/null
	cat /proc/[0-9]*/stat >/dev/null 2>&1
	i=0
	while [ $i -lt 20 ]; do sh -c : ; i=$((i + 1)); done
	find "$1" -type f | xargs md5sum >/dev/null
	rm -rf "$1.cp" && cp -r "$1" "$1.cp" && rm -rf "$1.cp"
'

# mixed: one pass of it over $tree, on CPU 0.
mixed() {
	taskset -c 0 sh -c "$mixed_script" mixed "$tree" || fail "the workload failed"
}

# mixed_ns: one pass of it over $tree, on CPU 0, timed: prints its ns (CLOCK_MONOTONIC).
mixed_ns() {
	taskset -c 0 elapsed sh -c "$mixed_script" mixed "$tree" 2>"$TD_TMP/elapsed" ||
		fail "the workload failed: $(cat "$TD_TMP/elapsed")"
	sed -n 's/^elapsed: ns=//p' "$TD_TMP/elapsed"
}
