# Spike capture: the trigger looks at the last second every 100 ms, whatever -i is,
# and switching capture on is a store to BPF-visible memory, so a short burst's stacks
# are caught while it lasts.
#   1. quiet, then a ~0.5 s burst of half unmaps (ZAP), with -i 1 and with -i 10: at
#      least half of the burst's calls made 150 ms or more after its first call have
#      stacks, and every stack is ZAP's;
#   2. two bursts of different reasons seconds apart: each captured, in order;
#   3. a steady 50/50 mix of two reasons: capture never starts;
#   4. --no-auto: a burst starts nothing;
#   5. capture on THP faults (FAULT_ALLOC), 3 s without a call, then a burst of half
#      unmaps (ZAP): the silent reason does not hold capture, which moves within 0.3 s of
#      the burst's first call (the workload's CLOCK_MONOTONIC stamp against the capture's
#      start_ns, the same clock) and takes stacks.
. "$TD_LIB"
need_cmd topdown thp
need_func deferred_split_folio

N=100 GAP=4

# burst ARGS...: THP faults first (before topdown starts: quiet), then topdown ARGS,
# then N half unmaps GAP ms apart, stamped; stops topdown 1 s after the burst.
burst() {
	thp_start --munmap-halves $N --wait-usr1 --unmap-gap-ms $GAP --stamps "$TD_TMP/stamps"
	td_start deferred_split_folio "$@"
	sleep 1.5
	kill -USR1 $thp_pid
	wait $thp_pid || fail "thp failed: $(cat "$TD_TMP/thp.out")"
	sleep 1
	td_stop INT
	cat "$TD_ERR"
}

# capture_field N KEY: KEY of the Nth (1-based) object in the summary's "captures".
capture_field() {
	echo "$TD_SUMMARY" | grep -o '"captures":\[.*\]' | grep -o '{"reason":[^}]*}' |
		sed -n "${1}p" | grep -o "\"$2\":[^,}]*" | sed 's/^[^:]*://; s/"//g'
}

for i in 1 10; do
	burst -i $i
	expect_eq "-i $i: ZAP" "$(reason_count ZAP)" $N
	expect_eq "-i $i: stack reason" "$(summary_str stack_reason)" ZAP
	expect_eq "-i $i: reasons with stacks" \
		"$(echo "$TD_SUMMARY" | grep -o '"stacks_by_reason":\[{"reason":"[A-Z_]*"' | sed 's/.*"reason":"//; s/"//')" ZAP
	expect_eq "-i $i: captures" "$(echo "$TD_SUMMARY" | grep -o '"captures":\[[^]]*\]' | grep -o '"reason"' | wc -l)" 1
	first=$(awk '$1 == "munmap" { print $2; exit }' "$TD_TMP/stamps")
	late=$(awk -v t=$((first + 150000000)) '$1 == "munmap" && $2 >= t { n++ } END { print n + 0 }' "$TD_TMP/stamps")
	stacks=$(capture_field 1 stacks)
	fs=$(capture_field 1 first_stack_ns)
	echo "-i $i: burst of $N over $(((($(awk '{ t = $2 } END { print t }' "$TD_TMP/stamps") - first) / 1000000))) ms;" \
		"$late calls 150 ms or more after its first; $stacks stacks;" \
		"first stack $(((fs - first) / 1000000)) ms after the burst's first call"
	[ "$late" -gt 10 ] || fail "-i $i: the burst was too short to tell ($late late calls)"
	[ $((stacks * 2)) -ge "$late" ] || fail "-i $i: $stacks stacks for $late calls after 150 ms"
	expect_eq "-i $i: every stack sent is ZAP's" "$(summary_num stacks_sent)" "$(summary_num stacks_captured)"
done

# 2. ZAP's burst, then 3 s later a burst of THP faults.
thp_start --munmap-halves $N --wait-usr1 --unmap-gap-ms $GAP
td_start deferred_split_folio -i 1
sleep 1.5
kill -USR1 $thp_pid
wait $thp_pid || fail "thp failed: $(cat "$TD_TMP/thp.out")"
sleep 3
thp --faults 60 >/dev/null || fail "thp --faults failed"
sleep 1
td_stop INT
cat "$TD_ERR"
expect_eq "two bursts: capture order" "$(capture_field 1 reason) $(capture_field 2 reason)" "ZAP FAULT_ALLOC"
[ "$(capture_field 1 stacks)" -gt 0 ] && [ "$(capture_field 2 stacks)" -gt 0 ] ||
	fail "two bursts: a burst without stacks"
grep -q "FAULT_ALLOC has .* moving stack capture from ZAP" "$TD_ERR" || fail "no notice of the move"
sets=$(echo "$TD_SUMMARY" | grep -o '"stacks_by_reason":.*' | grep -o '{"reason":"[A-Z_]*","captured"' |
	sed 's/.*"reason":"//; s/",.*//' | tr '\n' ' ')
expect_eq "two bursts: reasons with stacks, in order" "$sets" "ZAP FAULT_ALLOC "

# 3. A steady mix: every THP fault is followed by a half unmap, 50/50 at any scale.
td_start deferred_split_folio -i 1
thp --mix 150 >/dev/null || fail "thp --mix failed"
td_stop INT
expect_eq "mix: FAULT_ALLOC" "$(reason_count FAULT_ALLOC)" 150
expect_eq "mix: ZAP" "$(reason_count ZAP)" 150
expect_eq "mix: phase" "$(summary_str phase)" counting
expect_eq "mix: captures" "$(echo "$TD_SUMMARY" | grep -o '"captures":\[\]')" '"captures":[]'

# 4. --no-auto: the burst is counted, nothing is captured.
burst -i 1 --no-auto
expect_eq "no-auto: ZAP" "$(reason_count ZAP)" $N
expect_eq "no-auto: phase" "$(summary_str phase)" counting

# 5. Capture on FAULT_ALLOC, then 3 s of silence, then ZAP's burst.
td_start deferred_split_folio -i 1
thp_start --munmap-halves $N --wait-usr1 --unmap-gap-ms $GAP --stamps "$TD_TMP/stamps"
sleep 3
kill -USR1 $thp_pid
wait $thp_pid || fail "thp failed: $(cat "$TD_TMP/thp.out")"
sleep 1
td_stop INT
cat "$TD_ERR"
expect_eq "quiet capture: FAULT_ALLOC" "$(reason_count FAULT_ALLOC)" $N
expect_eq "quiet capture: ZAP" "$(reason_count ZAP)" $N
expect_eq "quiet capture: capture order" "$(capture_field 1 reason) $(capture_field 2 reason)" "FAULT_ALLOC ZAP"
first=$(awk '$1 == "munmap" { print $2; exit }' "$TD_TMP/stamps")
start=$(capture_field 2 start_ns)
stacks=$(capture_field 2 stacks)
echo "quiet capture: ZAP's capture began $(((start - first) / 1000000)) ms after the burst's first call; $stacks stacks"
[ $((start - first)) -le 300000000 ] || fail "quiet capture: moved $(((start - first) / 1000000)) ms after the burst began"
[ "$stacks" -gt 0 ] || fail "quiet capture: no stacks of ZAP"
exit 0
