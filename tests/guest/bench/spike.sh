# Reaction benchmark (prints figures; it checks only that every spike was caught):
# topdown deferred_split_folio -i 10 waits over a quiet spell, then a burst of 100 half
# unmaps 4 ms apart (ZAP) starts. The delay from the burst's first call (the workload's
# CLOCK_MONOTONIC stamp) to capture switching on, and to the first captured stack (the
# BPF sample's bpf_ktime_get_ns, the same clock), per spike; then median and worst.
# Software emulation slows everything: read the figures as an upper bound.
. "$TD_LIB"
need_cmd topdown thp
need_func deferred_split_folio

SPIKES=${TD_BENCH_SPIKES:-5}
: >"$TD_TMP/decide" && : >"$TD_TMP/first"
for s in $(seq "$SPIKES"); do
	thp --munmap-halves 100 --wait-usr1 --unmap-gap-ms 4 --stamps "$TD_TMP/stamps" \
		>"$TD_TMP/thp.out" 2>&1 &
	thp_pid=$!
	wait_line "$TD_TMP/thp.out" "thp: ready"
	td_start deferred_split_folio -i 10 >/dev/null
	sleep 1
	kill -USR1 $thp_pid
	wait $thp_pid || fail "thp failed: $(cat "$TD_TMP/thp.out")"
	sleep 0.5
	td_stop INT >/dev/null
	first=$(awk '$1 == "munmap" { print $2; exit }' "$TD_TMP/stamps")
	cap=$(echo "$TD_SUMMARY" | grep -o '"captures":\[{[^}]*}' | head -1)
	start=$(echo "$cap" | grep -o '"start_ns":[0-9]*' | sed 's/.*://')
	fs=$(echo "$cap" | grep -o '"first_stack_ns":[0-9]*' | sed 's/.*://')
	[ -n "$start" ] && [ -n "$fs" ] || fail "spike $s: not captured: $cap"
	echo $(((start - first) / 1000)) >>"$TD_TMP/decide"
	echo $(((fs - first) / 1000)) >>"$TD_TMP/first"
	echo "bench: spike $s: capture on $(((start - first) / 1000)) us, first stack $(((fs - first) / 1000)) us after the burst's first call"
done

# stat FILE: "median MS, worst MS" of microsecond figures.
stat() {
	sort -n "$1" | awk '{ v[NR] = $1 } END {
		m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
		printf "median %.1f ms, worst %.1f ms", m / 1000, v[NR] / 1000 }'
}
echo "bench: kernel $TD_KERNEL, $SPIKES spikes of 100 half unmaps 4 ms apart after a quiet second, topdown -i 10, software emulation"
echo "bench: burst start -> capture switched on: $(stat "$TD_TMP/decide")"
echo "bench: burst start -> first captured stack: $(stat "$TD_TMP/first")"
exit 0
