# case-timeout: 240
# Spike capture: the trigger looks at the last second every 50 ms, whatever -i is,
# and switching capture on is a store to BPF-visible memory, so a short burst's stacks
# are caught while it lasts.
#   1. quiet, then a ~0.5 s burst of half unmaps (ZAP), with -i 1 and with -i 10: at
#      least half of the burst's calls made 150 ms or more after its first call have
#      stacks, and every stack is ZAP's;
#   2. two bursts of different reasons seconds apart, each ~0.5 s long: each captured,
#      in order (a burst over before the trigger's decision has only the sampler's
#      stacks; topdown_spike_battery covers those);
#   3. a steady 50/50 mix of two reasons: capture never starts;
#   4. --no-auto: a burst starts nothing;
#   5. capture on THP faults (FAULT_ALLOC), 3 s without a call, then a burst of half
#      unmaps (ZAP): the silent reason does not hold capture, which moves before half
#      of the burst's calls are made (the workload's CLOCK_MONOTONIC stamps against the
#      capture's start_ns, the same clock; the delay in ms is printed, not bounded: a
#      busy host stretches it, and the burst with it) and takes stacks.
# On 6.1 and 5.10 the function is deferred_split_huge_page, which THP faults never
# call, and page_remove_rmap calls it for every PTE-mapped page of a THP it unmaps:
# 256 at each half unmap, 256 more at exit. There the reasons come from rules: a half
# munmap's calls are MUNMAP, a half MADV_DONTNEED's DONTNEED, the exit's EXIT; the
# bursts' thp processes hold their exit until topdown has stopped, and DONTNEED takes
# FAULT_ALLOC's part.
# The sleeps below are the scenario's quiet spells and tails (what is tested is what
# topdown does in them), not waits for an event: every event there is awaited.
. "$TD_LIB"
need_cmd topdown thp
split_fn

N=100 GAP=4

# capture_field N KEY: KEY of the Nth (1-based) object in the summary's "captures".
capture_field() {
	echo "$TD_SUMMARY" | grep -o '"captures":\[.*\]' | grep -o '{"reason":[^}]*}' |
		sed -n "${1}p" | grep -o "\"$2\":[^,}]*" | sed 's/^[^:]*://; s/"//g'
}

# at_once A B: after a run in which reasons A and B each had about half of the calls,
# with --threshold 30, both were captured at once: the first two capture stretches are
# theirs and overlap, the later one's notice says the other's capture goes on beside
# it, and both reasons have stacks (the summary checks each one's capture calls).
at_once() {
	cat "$TD_ERR"
	got=$( (capture_field 1 reason; capture_field 2 reason) | sort | tr '\n' ' ')
	want=$(printf '%s\n' "$1" "$2" | sort | tr '\n' ' ')
	expect_eq "at once: the first two captures" "$got" "$want"
	end1=$(capture_field 1 end)
	start2=$(capture_field 2 start)
	echo "at once: $(capture_field 1 reason) captured from $(capture_field 1 start) s to $end1 s," \
		"$(capture_field 2 reason) from $start2 s"
	awk -v a="$start2" -v b="$end1" 'BEGIN { exit !(a < b) }' ||
		fail "at once: the second capture began at $start2 s, after the first ended ($end1 s)"
	grep -q "has .*: capturing its stacks, beside [A-Z_]*'s" "$TD_ERR" ||
		fail "at once: no notice of a capture beside another"
	for r in "$1" "$2"; do
		n=$(echo "$TD_SUMMARY" | grep -o '"stacks_by_reason":.*' |
			grep -o "{\"reason\":\"$r\",\"captured\":[0-9]*" | sed 's/.*://')
		echo "at once: $r: ${n:-0} stacks captured"
		[ "${n:-0}" -gt 0 ] || fail "at once: no stacks of $r"
	done
}

if [ $TD_SPLIT = deferred_split_huge_page ]; then
	N=40 GAP=10
	FN=$TD_SPLIT
	RULES="$TD_RULES_61;DONTNEED=page_remove_rmap"
	HOLD="--hold-ms 600000"
	# burst ARGS...: the same as below, N half munmaps of 256 calls each; thp exits
	# only once topdown has stopped.
	burst() {
		# shellcheck disable=SC2086 # HOLD's words are separate arguments
		thp_start --munmap-halves $N --wait-usr1 --unmap-gap-ms $GAP --stamps "$TD_TMP/stamps" $HOLD
		td_start $FN --rules "$RULES" "$@"
		sleep 1.5
		kill -USR1 $thp_pid
		wait_line "$TD_TMP/thp.out" "^thp: faults=0 munmap_halves=$N "
		sleep 1
		td_stop INT
		kill $thp_pid
		wait $thp_pid
		cat "$TD_ERR"
	}
	# DONTNEED's bursts: D half MADV_DONTNEEDs, one per thp, one thp after another,
	# 256 calls each (held_dontneeds); a single one would be over before capture began.
	D=8

	# 1. A burst with -i 1 and -i 10: capture covers at least half of the calls made
	# 150 ms or more after the burst's first (256 come at once, more than --max-rate
	# lets through, so the capture's calls are compared, not its stacks).
	for i in 1 10; do
		burst -i $i
		expect_eq "-i $i: MUNMAP" "$(reason_count MUNMAP)" $((256 * N))
		expect_eq "-i $i: EXIT" "$(reason_count EXIT)" 0
		expect_eq "-i $i: stack reason" "$(summary_str stack_reason)" MUNMAP
		expect_eq "-i $i: reasons with stacks" \
			"$(echo "$TD_SUMMARY" | grep -o '"stacks_by_reason":\[{"reason":"[A-Z_]*"' | sed 's/.*"reason":"//; s/"//')" MUNMAP
		expect_eq "-i $i: captures" "$(echo "$TD_SUMMARY" | grep -o '"captures":\[[^]]*\]' | grep -o '"reason"' | wc -l)" 1
		first=$(awk '$1 == "munmap" { print $2; exit }' "$TD_TMP/stamps")
		late=$(awk -v t=$((first + 150000000)) '$1 == "munmap" && $2 >= t { n++ } END { print n + 0 }' "$TD_TMP/stamps")
		calls=$(capture_field 1 calls)
		stacks=$(capture_field 1 stacks)
		fs=$(capture_field 1 first_stack_ns)
		echo "-i $i: burst of $N half munmaps over $(((($(awk '{ t = $2 } END { print t }' "$TD_TMP/stamps") - first) / 1000000))) ms;" \
			"$late of them 150 ms or more after its first; capture: $calls calls, $stacks stacks;" \
			"first stack $(((fs - first) / 1000000)) ms after the burst's first call"
		[ "$late" -gt 10 ] || fail "-i $i: the burst was too short to tell ($late late half munmaps)"
		[ $((calls * 2)) -ge $((256 * late)) ] || fail "-i $i: capture saw $calls calls of $((256 * late)) after 150 ms"
		[ "$stacks" -gt 0 ] || fail "-i $i: no stacks"
		expect_eq "-i $i: every stack sent is MUNMAP's" "$(summary_num stacks_sent)" "$(summary_num stacks_captured)"
	done

	# 2. MUNMAP's burst, then 3 s later a burst of half MADV_DONTNEEDs.
	# shellcheck disable=SC2086
	thp_start --munmap-halves $N --wait-usr1 --unmap-gap-ms $GAP $HOLD
	td_start $FN --rules "$RULES" -i 1
	sleep 1.5
	kill -USR1 $thp_pid
	wait_line "$TD_TMP/thp.out" "^thp: faults=0 munmap_halves=$N "
	sleep 3
	held_pids=
	held_dontneeds $D
	sleep 1
	td_stop INT
	# shellcheck disable=SC2086 # one pid a word
	kill $thp_pid $held_pids
	# shellcheck disable=SC2086
	wait $thp_pid $held_pids
	cat "$TD_ERR"
	expect_eq "two bursts: MUNMAP" "$(reason_count MUNMAP)" $((256 * N))
	expect_eq "two bursts: DONTNEED" "$(reason_count DONTNEED)" $((256 * D))
	expect_eq "two bursts: capture order" "$(capture_field 1 reason) $(capture_field 2 reason)" "MUNMAP DONTNEED"
	[ "$(capture_field 1 stacks)" -gt 0 ] && [ "$(capture_field 2 stacks)" -gt 0 ] ||
		fail "two bursts: a burst without stacks"
	grep -q "DONTNEED has .* moving stack capture from MUNMAP" "$TD_ERR" || fail "no notice of the move"
	sets=$(echo "$TD_SUMMARY" | grep -o '"stacks_by_reason":.*' | grep -o '{"reason":"[A-Z_]*","captured"' |
		sed 's/.*"reason":"//; s/",.*//' | tr '\n' ' ')
	expect_eq "two bursts: reasons with stacks, in order" "$sets" "MUNMAP DONTNEED "

	# 3. A steady mix: thp processes one after another, each a half munmap and its
	# exit, 256 calls each a few ms apart. A second that holds a single burst may be all
	# one reason's; --min-events 600 takes only seconds with three bursts of a reason
	# or more, and so two of the other between them: neither reaches 80%.
	M=10
	# munmap_mix WHAT ARGS...: topdown with ARGS over M such processes, counted exactly.
	munmap_mix() {
		_what=$1
		shift
		td_start $FN --rules "$RULES" -i 1 "$@"
		j=0
		while [ $j -lt $M ]; do
			thp --munmap-halves 1 >/dev/null || fail "thp failed"
			j=$((j + 1))
		done
		td_stop INT
		expect_eq "$_what: MUNMAP" "$(reason_count MUNMAP)" $((256 * M))
		expect_eq "$_what: EXIT" "$(reason_count EXIT)" $((256 * M))
	}
	munmap_mix mix --min-events 600
	expect_eq "mix: phase" "$(summary_str phase)" counting
	expect_eq "mix: captures" "$(echo "$TD_SUMMARY" | grep -o '"captures":\[\]')" '"captures":[]'

	# 3b. The same mix with --threshold 30: each reason qualifies, and both are
	# captured at once.
	munmap_mix "mix at once" --threshold 30
	at_once MUNMAP EXIT

	# 4. --no-auto: the burst is counted, nothing is captured.
	burst -i 1 --no-auto
	expect_eq "no-auto: MUNMAP" "$(reason_count MUNMAP)" $((256 * N))
	expect_eq "no-auto: phase" "$(summary_str phase)" counting

	# 5. Capture on DONTNEED, then 3 s of silence, then MUNMAP's burst.
	td_start $FN --rules "$RULES" -i 1
	# shellcheck disable=SC2086
	thp_start --munmap-halves $N --wait-usr1 --unmap-gap-ms $GAP --stamps "$TD_TMP/stamps" $HOLD
	held_pids=
	held_dontneeds $D
	sleep 3
	kill -USR1 $thp_pid
	wait_line "$TD_TMP/thp.out" "^thp: faults=0 munmap_halves=$N "
	sleep 1
	td_stop INT
	# shellcheck disable=SC2086
	kill $thp_pid $held_pids
	# shellcheck disable=SC2086
	wait $thp_pid $held_pids
	cat "$TD_ERR"
	expect_eq "quiet capture: DONTNEED" "$(reason_count DONTNEED)" $((256 * D))
	expect_eq "quiet capture: MUNMAP" "$(reason_count MUNMAP)" $((256 * N))
	expect_eq "quiet capture: capture order" "$(capture_field 1 reason) $(capture_field 2 reason)" "DONTNEED MUNMAP"
	first=$(awk '$1 == "munmap" { print $2; exit }' "$TD_TMP/stamps")
	start=$(capture_field 2 start_ns)
	stacks=$(capture_field 2 stacks)
	before=$(awk -v t="$start" '$1 == "munmap" && $2 < t { n++ } END { print n + 0 }' "$TD_TMP/stamps")
	echo "quiet capture: MUNMAP's capture began $(((start - first) / 1000000)) ms after the burst's first call," \
		"after $before of its $N half munmaps; $stacks stacks"
	# Counted in the burst's own calls, not in host time: a starved host stretches both.
	[ $((before * 2)) -le $N ] || fail "quiet capture: moved after $before of the burst's $N half munmaps"
	[ "$stacks" -gt 0 ] || fail "quiet capture: no stacks of MUNMAP"
	exit 0
fi

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

# 2. ZAP's burst, then 3 s later a burst of THP faults, paced like ZAP's to outlast
# the decision: unpaced, 60 faults can be over within one tick.
thp_start --munmap-halves $N --wait-usr1 --unmap-gap-ms $GAP
td_start deferred_split_folio -i 1
sleep 1.5
kill -USR1 $thp_pid
wait $thp_pid || fail "thp failed: $(cat "$TD_TMP/thp.out")"
sleep 3
thp --faults 60 --fault-gap-ms 8 >/dev/null || fail "thp --faults failed"
sleep 1
td_stop INT
cat "$TD_ERR"
expect_eq "two bursts: capture order" "$(capture_field 1 reason) $(capture_field 2 reason)" "ZAP FAULT_ALLOC"
echo "two bursts: ZAP's capture $(capture_field 1 stacks) stacks of $(capture_field 1 calls) calls," \
	"FAULT_ALLOC's $(capture_field 2 stacks) of $(capture_field 2 calls)"
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

# 3b. The same mix with --threshold 30: each reason qualifies, and both are captured
# at once.
td_start deferred_split_folio -i 1 --threshold 30
thp --mix 150 >/dev/null || fail "thp --mix failed"
td_stop INT
expect_eq "mix at once: FAULT_ALLOC" "$(reason_count FAULT_ALLOC)" 150
expect_eq "mix at once: ZAP" "$(reason_count ZAP)" 150
at_once FAULT_ALLOC ZAP

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
before=$(awk -v t="$start" '$1 == "munmap" && $2 < t { n++ } END { print n + 0 }' "$TD_TMP/stamps")
echo "quiet capture: ZAP's capture began $(((start - first) / 1000000)) ms after the burst's first call," \
	"after $before of its $N half munmaps; $stacks stacks"
# Counted in the burst's own calls, not in host time: a starved host stretches both.
[ $((before * 2)) -le $N ] || fail "quiet capture: moved after $before of the burst's $N half munmaps"
[ "$stacks" -gt 0 ] || fail "quiet capture: no stacks of ZAP"
exit 0
