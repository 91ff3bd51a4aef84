# Overhead benchmark (prints figures; it checks only that every measurement was made).
# Software emulation distorts absolute times, so every figure is a ratio against a
# baseline of the same guest run, and configurations are measured in interleaved
# rounds (A B C ... A B C ...), keeping the best of each:
#   - readloop's time per read() of /dev/zero, untraced and with topdown on vfs_read;
#   - the counting program's own cost per call (kernel.bpf_stats_enabled=1:
#     run_time_ns / run_cnt), next to an empty fentry program's on the same function.
# Everything runs on CPU 0: under single-threaded TCG both vCPUs take turns on one host
# thread, so work on CPU 1 would count into CPU 0's BPF run times.
. "$TD_LIB"
need_cmd topdown readloop taskset
need_func vfs_read

N=${TD_BENCH_READS:-200000}
ROUNDS=${TD_BENCH_ROUNDS:-5}
echo 1 >/proc/sys/kernel/bpf_stats_enabled || skip "no kernel.bpf_stats_enabled"

# The configurations: a label, then topdown's arguments ("-" for none: untraced).
cat >"$TD_TMP/configs" <<EOC
untraced|-
fentry, counting only (--no-auto: capture code left out)|--fentry --no-auto
fentry, capture gate in, capture off|--fentry --min-events 1000000000
fentry, capturing, over the rate cap (1/s)|--fentry --stack-on ksys_read --max-rate 1
fentry, capturing 1000 stacks/s|--fentry --stack-on ksys_read
kprobe, counting only|--kprobe --no-auto
EOC

# one ARGS...: one round; prints "NS_PER_READ BPF_NS EMPTY_NS" (0 where not measured).
one() {
	if [ "$1" = - ]; then
		echo "$(taskset -c 0 readloop $N 2>&1 >/dev/null | sed -n 's/.*ns_per_read=//p') 0 0"
		return
	fi
	TD_OUT=$TD_TMP/td.out TD_ERR=$TD_TMP/td.err
	rm -f "$TD_OUT" "$TD_ERR"
	extra=
	case " $* " in *" --fentry "*) extra="--companion fentry" ;; esac
	# shellcheck disable=SC2086
	taskset -c 0 topdown vfs_read --no-profile -q "$@" $extra --json >"$TD_OUT" 2>"$TD_ERR" &
	TD_PID=$!
	wait_line "$TD_ERR" "Ctrl-C to end"
	sleep 1 # let the symbolizer warm up, after attaching
	v=$(taskset -c 0 readloop $N 2>&1 >/dev/null | sed -n 's/.*ns_per_read=//p')
	td_stop INT >/dev/null
	[ "$TD_RC" = 0 ] || fail "topdown $* exited with $TD_RC: $(cat "$TD_ERR")"
	b=$(echo "$TD_SUMMARY" | grep -o '"bpf":{"run_cnt":[0-9]*,"run_time_ns":[0-9]*' |
		sed -E 's/.*"run_cnt":([0-9]+),"run_time_ns":([0-9]+)/\1 \2/' | awk '{ printf "%d", $2 / $1 }')
	e=$(echo "$TD_SUMMARY" | grep -o '"stats":{"run_cnt":[0-9]*,"run_time_ns":[0-9]*' |
		sed -E 's/.*"run_cnt":([0-9]+),"run_time_ns":([0-9]+)/\1 \2/' | awk '{ printf "%d", $2 / $1 }')
	echo "$v ${b:-0} ${e:-0}"
}

: >"$TD_TMP/results"
for r in $(seq "$ROUNDS"); do
	i=0
	while IFS='|' read -r label args; do
		i=$((i + 1))
		# shellcheck disable=SC2086
		set -- $args
		res=$(one "$@") || exit 1
		echo "$i $res" >>"$TD_TMP/results"
	done <"$TD_TMP/configs"
done

# best I COLUMN: the smallest non-zero figure of config I in COLUMN (2 read, 3 bpf, 4 empty).
best() {
	awk -v i="$1" -v c="$2" '$1 == i && $c > 0 && (m == "" || $c < m) { m = $c } END { print m + 0 }' "$TD_TMP/results"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }

echo "bench: kernel $TD_KERNEL, $N reads of /dev/zero on CPU 0, best of $ROUNDS interleaved rounds, software emulation (ratios only)"
base=$(best 1 2) nogate=$(best 2 3)
i=0
while IFS='|' read -r label args; do
	i=$((i + 1))
	read_ns=$(best $i 2) bpf_ns=$(best $i 3) empty_ns=$(best $i 4)
	[ "$read_ns" -gt 0 ] || fail "no figure for $label"
	line="bench: $label: read $read_ns ns = $(ratio "$read_ns" "$base")x untraced"
	if [ "$bpf_ns" -gt 0 ]; then
		line="$line; BPF $bpf_ns ns/call = $(ratio "$bpf_ns" "$nogate")x counting only"
		[ "$empty_ns" -gt 0 ] && line="$line, $(ratio "$bpf_ns" "$empty_ns")x an empty fentry program ($empty_ns ns)"
	fi
	echo "$line"
done <"$TD_TMP/configs"
echo 0 >/proc/sys/kernel/bpf_stats_enabled
exit 0
