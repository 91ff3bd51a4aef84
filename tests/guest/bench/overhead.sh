# Overhead benchmark (prints figures; it checks only that every measurement was made,
# and that the runs filtered on the readers' pids counted exactly their reads).
# Software emulation distorts absolute times, so every figure is a ratio against a
# baseline of the same guest run, and configurations are measured in interleaved
# rounds (A B C ... A B C ...):
#   - readloop's time per read() of /dev/zero, untraced and with topdown alone on
#     vfs_read, the best of the rounds; and over that whole run, the counting program's
#     cost per call (topdown's own figure, from the same statistics below), the best of
#     the rounds: with stacks captured at a set rate, what a call costs depends on the
#     call rate, and this run's is steady;
#   - the counting program's own cost per call (kernel.bpf_stats_enabled=1:
#     run_time_ns / run_cnt, read with bpftool), against the bare per-CPU counter that
#     topdown attaches beside it in the same mode (--companion bare), in a second run of
#     each row: both read over WINDOWS short windows of WINDOW_READS reads per round;
#     each program's figure is the median over all its windows;
#   - bpftrace's one-liners on the same function, if the guest has bpftrace
#     (tests/guest/run --bpftrace): their programs' cost per call over the same windows,
#     against the bare counter of the same mode beside topdown's counting-only row.
# Why windows: a host busy with other work stalls the guest now and then, and the
# guest's clock runs on, so a stall counts into whatever BPF program runs at the time;
# over a long run a few stalls make a program look several times dearer. Most short
# windows see no stall, and the median keeps to those.
# Everything runs on CPU 0: under single-threaded TCG both vCPUs take turns on one host
# thread, so work on CPU 1 would count into CPU 0's BPF run times.
# case-timeout: 1500
. "$TD_LIB"
. /bench/lib.sh
need_cmd topdown readloop taskset bpftool
need_func vfs_read

N=${TD_BENCH_READS:-200000}
# Under an instruction-counting clock (tests/guest/run --icount: TD_ICOUNT) every round
# and window gives the same figures: one round of a few windows is enough.
if [ -n "${TD_ICOUNT:-}" ]; then
	ROUNDS=${TD_BENCH_ROUNDS:-1}
	WINDOWS=${TD_BENCH_WINDOWS:-3}
else
	ROUNDS=${TD_BENCH_ROUNDS:-5}
	WINDOWS=${TD_BENCH_WINDOWS:-10}
fi
WINDOW_READS=${TD_BENCH_WINDOW_READS:-5000}
echo 1 >/proc/sys/kernel/bpf_stats_enabled || skip "no kernel.bpf_stats_enabled"

# The configurations: a label, then topdown's arguments ("-" for none: untraced).
cat >"$TD_TMP/configs" <<EOC
untraced|-
fentry, counting only (--no-auto: capture code left out)|--fentry --no-auto
fentry, capture gate in, capture off|--fentry --min-events 1000000000
fentry, capture gate in, capture off, no background sampler|--fentry --min-events 1000000000 --background-stacks 0
fentry, capturing, over the rate cap (1/s)|--fentry --stack-on ksys_read --max-rate 1
fentry, capturing 1000 stacks/s|--fentry --stack-on ksys_read
fentry, capturing 1000 stacks/s with user frames (-U)|--fentry --stack-on ksys_read -U
fentry, capturing another reason (ksys_pread64): these calls stay on the common path|--fentry --stack-on ksys_pread64
kprobe, counting only|--kprobe --no-auto
fentry, counting only, -C 0: every call passes the CPU filter|--fentry --no-auto -C 0
fentry, counting only, --cgroup of the root: every call passes|--fentry --no-auto --cgroup /sys/fs/cgroup
fentry, counting only, -p of the readers: every call passes the pid filter|--fentry --no-auto -p @readers
fentry, counting only, -p 1: every call filtered out by pid|--fentry --no-auto -p 1
fentry, counting only, -C 1: every call filtered out by CPU|--fentry --no-auto -C 1
EOC
# TD_BENCH_QUICK=1 (the default suite's bench_quick case): one short round of the first
# rows, the kprobe one and the pid filter's readers, to show that the script still
# works; no figure to keep.
if [ -n "${TD_BENCH_QUICK:-}" ]; then
	N=2000 ROUNDS=1 WINDOWS=2 WINDOW_READS=1000
	awk -F'|' 'NR <= 2 || $1 ~ /^kprobe/ || $2 ~ /@readers/' "$TD_TMP/configs" >"$TD_TMP/configs.quick"
	mv "$TD_TMP/configs.quick" "$TD_TMP/configs"
fi

# The bpftrace rows, "bpftrace MODE PROGRAM" (MODE: the bare counter to compare with).
# bpftrace before 0.20 spells fentry "kfunc".
bt_version=
if bt_detect; then
	cat >>"$TD_TMP/configs" <<EOC
bpftrace $bt_version, $bt_fentry:vfs_read { @n = count(); }|bpftrace fentry $bt_fentry:vfs_read { @n = count(); }
bpftrace $bt_version, kprobe:vfs_read { @[kstack(2)] = count(); }|bpftrace kprobe kprobe:vfs_read { @[kstack(2)] = count(); }
EOC
else
	echo "bench: notice: no bpftrace (tests/guest/run --bpftrace puts it in the guest): its rows are skipped"
fi

# readers COUNT READS: starts COUNT readloops of READS reads each on CPU 0, waiting for
# their go files, so that topdown -p can name them (their pids are added to
# READER_PIDS), and queues them for `reads`, which then uses them in turn.
READER_SEQ=0
readers() {
	_n=0
	while [ $_n -lt "$1" ]; do
		_n=$((_n + 1)) READER_SEQ=$((READER_SEQ + 1))
		_f=$TD_TMP/reader.$READER_SEQ
		rm -f "$_f" "$_f.go"
		taskset -c 0 readloop "$2" "$_f.go" >"$_f" 2>&1 &
		READER_PIDS=$READER_PIDS${READER_PIDS:+,}$!
		echo "$READER_SEQ $2" >>"$TD_TMP/queue"
		wait_line "$_f" "readloop: ready"
	done
}

# reads COUNT: COUNT reads of /dev/zero on CPU 0, by the next queued reader if there is
# one (made for COUNT reads), else by a new readloop; prints readloop's report.
reads() {
	_q=$(head -n 1 "$TD_TMP/queue" 2>/dev/null)
	if [ -z "$_q" ]; then
		taskset -c 0 readloop "$1" 2>&1
		return
	fi
	sed -i 1d "$TD_TMP/queue"
	_f=$TD_TMP/reader.${_q% *}
	[ "${_q#* }" = "$1" ] || fail "reader ${_q% *} was made for ${_q#* } reads, not $1"
	touch "$_f.go"
	wait_line "$_f" "ns_per_read="
	cat "$_f"
}

# read_ns: N reads on CPU 0 (see reads), their ns per read.
read_ns() { reads "$N" | sed -n 's/.*ns_per_read=//p'; }

# windows I ROUND KIND:ID...: WINDOWS windows of WINDOW_READS reads on CPU 0; for each
# window and program ID, "I ROUND KIND NS_PER_CALL" in results.
windows() {
	_c=$1 _r=$2 # (not _i: wait_line, in reads, uses it)
	shift 2
	progs >"$TD_TMP/snap0"
	_w=0
	while [ $_w -lt "$WINDOWS" ]; do
		_w=$((_w + 1))
		reads "$WINDOW_READS" >/dev/null || fail "readloop failed"
		progs >"$TD_TMP/snap1"
		for _p in "$@"; do
			awk -v id="${_p#*:}" -v what="$_c $_r ${_p%%:*}" -v min="$WINDOW_READS" '
				FILENAME != f { n++; f = FILENAME }
				$1 == id { t[n] = $3; c[n] = $4 }
				END {
					if (c[2] - c[1] < min) {
						printf "program %s ran %d times in a window of %d reads\n", id, c[2] - c[1], min
						exit 1
					}
					printf "%s %.1f\n", what, (t[2] - t[1]) / (c[2] - c[1])
				}' "$TD_TMP/snap0" "$TD_TMP/snap1" >"$TD_TMP/window" || fail "$(cat "$TD_TMP/window")"
			cat "$TD_TMP/window" >>"$TD_TMP/results"
		done
		mv "$TD_TMP/snap1" "$TD_TMP/snap0"
	done
}

# td_run ARGS [COUNT READS]: topdown ARGS on vfs_read until td_stop, attached and
# settled. "@readers" in ARGS stands for the pids of COUNT readers of READS reads,
# started first (see readers), and of a warm-up reader (see below).
td_run() {
	TD_OUT=$TD_TMP/td.out TD_ERR=$TD_TMP/td.err
	rm -f "$TD_OUT" "$TD_ERR"
	_args=$1 _readers=
	: >"$TD_TMP/queue"
	case " $1 " in *" @readers "*)
		_readers=1 READER_PIDS=
		readers 1 100
		readers "$2" "$3"
		_args=$(echo "$1" | sed "s/@readers/$READER_PIDS/")
		;;
	esac
	# shellcheck disable=SC2086
	taskset -c 0 topdown vfs_read --no-profile -q $_args --json >"$TD_OUT" 2>"$TD_ERR" &
	TD_PID=$!
	wait_line "$TD_ERR" "Ctrl-C to end"
	# A warm-up of 100 reads on CPU 0, whose call site the next interval resolves: else
	# a run whose filter passes only CPU 0's calls (-C 0) may first see the site in the
	# reads measured, and they would take the path of calls from a site not resolved yet
	# (pending: two hash lookups), not the common one.
	if [ -n "$_readers" ]; then
		reads 100 >/dev/null
	else
		taskset -c 0 readloop 100 >/dev/null 2>&1 || fail "readloop (warm-up) failed"
	fi
	sleep 1.5 # an interval, and the symbolizer warmed up
}

# td_counted ARGS READS: with "@readers" in ARGS, the run must have counted the READS
# reads of the readers measured and the warm-up reader's 100, no more, no less.
td_counted() {
	case " $1 " in *" @readers "*)
		[ "$(summary_num total)" = $(($2 + 100)) ] ||
			fail "topdown $1: $(summary_num total) calls counted, not the readers' $2 + 100"
		;;
	esac
}

# one I ROUND ARGS: one round of configuration I; adds its figures to results:
# "I ROUND read NS_PER_READ", "I ROUND mode MODE", and per window "I ROUND prog NS" (and
# "I ROUND bare NS" and "I ROUND whole NS", over the whole first run, for topdown's rows).
one() {
	case $3 in
	-)
		echo "$1 $2 read $(read_ns)" >>"$TD_TMP/results"
		;;
	"bpftrace "*)
		prog=${3#bpftrace }
		mode=${prog%% *}
		prog=${prog#* }
		bt_start "$prog"
		echo "$1 $2 read $(read_ns)" >>"$TD_TMP/results"
		windows "$1" "$2" "prog:$(bt_prog)"
		echo "$1 $2 mode $mode" >>"$TD_TMP/results"
		bt_stop
		;;
	*)
		# Two runs: readloop's wall time with topdown alone, then the program's cost
		# over windows next to the bare counter's.
		td_run "$3" 1 "$N"
		v=$(read_ns)
		[ -n "$v" ] || fail "topdown $3: no figure from readloop"
		echo "$1 $2 read $v" >>"$TD_TMP/results"
		td_stop INT >/dev/null
		[ "$TD_RC" = 0 ] || fail "topdown $3 exited with $TD_RC: $(cat "$TD_ERR")"
		td_counted "$3" "$N"
		echo "$TD_SUMMARY" | grep -o '"bpf":{[^}]*' |
			sed -nE 's/.*"run_cnt":([0-9]+),"run_time_ns":([0-9]+).*/\1 \2/p' |
			awk -v what="$1 $2 whole" '$1 > 0 { printf "%s %.1f\n", what, $2 / $1 }' >>"$TD_TMP/results"
		td_run "$3 --companion bare" "$WINDOWS" "$WINDOW_READS"
		# The counting program: td_MODE, or td_MODE_any with a filter; their _nl twins
		# (no bpf_loop) before 5.17, a name the kernel may cut to 15 characters;
		# td_fentry_known from 6.2.
		prog=$(progs | awk '$2 ~ /^td_(fentry|kprobe)(_any|_known)?(_nl?)?$/ { m = $2 } END { print m }')
		mode=${prog#td_}
		mode=${mode%_known}
		mode=${mode%_n}
		mode=${mode%_nl}
		mode=${mode%_any}
		[ -n "$mode" ] || fail "topdown $3: no td_fentry(_any) or td_kprobe(_any) program loaded: $(progs)"
		windows "$1" "$2" "prog:$(prog_id "^$prog\$")" "bare:$(prog_id "^td_bare_$mode\$")"
		echo "$1 $2 mode $mode" >>"$TD_TMP/results"
		td_stop INT >/dev/null
		[ "$TD_RC" = 0 ] || fail "topdown $3 --companion bare exited with $TD_RC: $(cat "$TD_ERR")"
		td_counted "$3" $((WINDOWS * WINDOW_READS))
		;;
	esac
}

# TD_BENCH_ROWS=ERE: only the rows whose label matches (the untraced one is kept), for a
# quicker look at a few of them; bpftrace's rows are matched the same way.
if [ -n "${TD_BENCH_ROWS:-}" ]; then
	awk -F'|' -v re="$TD_BENCH_ROWS" 'NR == 1 || $1 ~ re' "$TD_TMP/configs" >"$TD_TMP/configs.rows"
	mv "$TD_TMP/configs.rows" "$TD_TMP/configs"
fi

set -f # bpftrace's programs hold [ and *
: >"$TD_TMP/results"
for r in $(seq "$ROUNDS"); do
	i=0
	while IFS='|' read -r label args; do
		i=$((i + 1))
		(one $i "$r" "$args") || exit 1
	done <"$TD_TMP/configs"
done

# stats: "MEDIAN MIN MAX" of the numbers on stdin, one a line (nothing if none).
stats() {
	sort -n | awk '{ v[NR] = $1 } END { if (NR) printf "%.3f %.3f %.3f", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2, v[1], v[NR] }'
}
ns() { awk -v v="$1" 'BEGIN { printf "%.1f", v }'; }
# fig I KIND [ROUND]: the figures of config I of KIND (of ROUND, or all), one a line.
fig() { awk -v i="$1" -v k="$2" -v r="${3:-}" '$1 == i && $3 == k && (r == "" || $2 == r) { print $4 }' "$TD_TMP/results"; }
median() { fig "$@" | stats | cut -d' ' -f1; }
best() { fig "$1" "$2" | stats | cut -d' ' -f2; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }
# round_ratios I: "MIN-MAX" over the rounds of config I's median program cost over its
# bare counter's median.
round_ratios() {
	for r in $(seq "$ROUNDS"); do
		ratio "$(median "$1" prog "$r")" "$(median "$1" bare "$r")"
		echo
	done | stats | awk '{ printf "%.2f-%.2f", $2, $3 }'
}

clock="software emulation (ratios only)"
[ -z "${TD_ICOUNT:-}" ] || clock="software emulation, the guest's clock counting instructions (-icount $TD_ICOUNT: ratios only, repeatable)"
echo "bench: kernel $TD_KERNEL, CPU 0, $ROUNDS interleaved rounds, $clock; read and whole run: the best round's run of $N reads of /dev/zero; BPF: the median over $WINDOWS windows of $WINDOW_READS reads a round (rounds: the range of each round's own ratio)"
base=$(best 1 read)
i=0
counting_fentry= counting_kprobe= bare_fentry= bare_kprobe= whole_fentry= whole_kprobe=
while IFS='|' read -r label args; do
	i=$((i + 1))
	read=$(best $i read)
	[ -n "$read" ] || fail "no figure for $label"
	mode=$(fig $i mode | head -1)
	prog=$(median $i prog) bare=$(median $i bare) whole=$(best $i whole)
	line="bench: $label: read $(ns "$read") ns = $(ratio "$read" "$base")x untraced"
	if [ -n "$bare" ]; then
		# The first row of a mode is its counting-only one: the reference for the rest.
		eval "c=\$counting_$mode w=\$whole_$mode"
		if [ -z "$c" ]; then
			eval "counting_$mode=$prog bare_$mode=$bare whole_$mode=$whole"
			c=$prog w=$whole
		fi
		line="$line; BPF $(ns "$prog") ns/call = $(ratio "$prog" "$bare")x the bare $mode counter beside it ($(ns "$bare") ns; rounds $(round_ratios $i)x), $(ratio "$prog" "$c")x counting only; whole run $(ns "$whole") ns/call = $(ratio "$whole" "$w")x counting only"
	elif [ -n "$prog" ]; then
		eval "b=\$bare_$mode"
		line="$line; BPF $(ns "$prog") ns/call = $(ratio "$prog" "$b")x the bare $mode counter beside topdown's counting-only row ($(ns "$b") ns)"
	fi
	echo "$line"
done <"$TD_TMP/configs"
echo 0 >/proc/sys/kernel/bpf_stats_enabled
exit 0
