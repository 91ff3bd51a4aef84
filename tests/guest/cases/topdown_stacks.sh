# Tier 2: stack capture switches on by itself when ZAP dominates, and its stacks show
# the zap path; --stack-on FAULT_ALLOC captures every fault's stack; the frame after
# the traced function's entry is the counted reason's caller; --folded writes
# flame-graph input; --stack-on not-found is taken. On 6.1 and 5.10 the function is
# deferred_split_huge_page, which THP faults never call: there the same is proven
# with deeper-frame rules that tell a half munmap's calls (MUNMAP, 256 each) from the
# exit's (EXIT, 256 more per half-unmapped region).
# Its sleeps are the scenario's tails and gaps (capture going on after a burst, a
# reason going quiet): stretches of time, not events; every event is awaited.
. "$TD_LIB"
need_cmd topdown thp
split_fn
thp_callers

# first_frames: the first frame of every stack in the summary, function names only.
first_frames() {
	echo "$TD_SUMMARY" | grep -o '"frames":\["[A-Za-z0-9_.]*' | sed 's/.*\["//' | sort -u
}

# not_found: --stack-on not-found: the calls whose caller was not found (which the BPF
# self-tests make up; here there should be none) are the ones captured, each of them.
not_found() {
	td_start vfs_read --no-profile --stack-on not-found
	cat /etc/hostname /etc/hostname >/dev/null
	td_stop INT
	expect_eq "not-found: stack reason" "$(summary_str stack_reason)" "[caller not found]"
	expect_eq "not-found: captured = not found" "$(summary_num stacks_captured)" "$(summary_num caller_not_found)"
	expect_eq "not-found: matched = not found" "$(summary_num stacks_matched)" "$(summary_num caller_not_found)"
}

if [ $TD_SPLIT = deferred_split_huge_page ]; then
	# 1. Automatic: the faults happen before topdown starts (no call), then 40 half
	# munmaps 50 ms apart; thp holds its exit until topdown has stopped.
	N=40
	thp_start --munmap-halves $N --wait-usr1 --unmap-gap-ms 50 --hold-ms 600000
	td_start $TD_SPLIT --rules "$TD_RULES_61" -i 0.5 --min-rate 5 --min-events 3 --folded "$TD_TMP/folded"
	kill -USR1 $thp_pid
	wait_line "$TD_TMP/thp.out" "thp: faults=0 munmap_halves=$N "
	sleep 1
	td_stop INT
	kill $thp_pid
	wait $thp_pid
	cat "$TD_ERR"
	expect_eq "auto: MUNMAP" "$(reason_count MUNMAP)" $((256 * N))
	expect_eq "auto: EXIT" "$(reason_count EXIT)" 0
	expect_eq "auto: rows" "$(reason_rows)" 1
	expect_eq "auto: phase" "$(summary_str phase)" "stack capture"
	expect_eq "auto: stack reason" "$(summary_str stack_reason)" MUNMAP
	grep -q "MUNMAP has 100.0% of calls (.*threshold 80%): capturing its stacks" "$TD_ERR" || fail "no switch notice"
	captured=$(summary_num stacks_captured)
	[ "$captured" -gt 0 ] && [ "$captured" -lt $((256 * N)) ] ||
		fail "auto: captured $captured stacks, want 1..$((256 * N - 1))"
	expect_eq "auto: captured = sent" "$captured" "$(summary_num stacks_sent)"
	# 256 calls come at once: past --max-rate, the calls matched are captured or
	# dropped for the rate.
	expect_eq "auto: captured + dropped = matched" \
		$((captured + $(summary_num stacks_rate_capped) + $(summary_num stacks_ringbuf_full))) "$(summary_num stacks_matched)"
	# Its calls while captured: those the gate took, and those counted before the
	# switch reached its call sites (a munmap's, at most, under emulation).
	expect_eq "auto: MUNMAP's calls at the gate" $(($(gate_num MUNMAP calls) - $(gate_num MUNMAP unseen))) "$(summary_num stacks_matched)"
	expect_eq "auto: MUNMAP's rate capped" "$(gate_num MUNMAP rate_capped)" "$(summary_num stacks_rate_capped)"
	echo "$TD_SUMMARY" | grep -q "\"$TD_ZAP_WALK+0x" || fail "auto: no $TD_ZAP_WALK frame"
	expect_eq "auto: first frames" "$(first_frames)" page_remove_rmap
	expect_eq "folded lines not under MUNMAP" "$(grep -vc '^MUNMAP;' "$TD_TMP/folded")" 0
	expect_eq "folded MUNMAP lines without the munmap path" \
		"$(grep -vc ";unmap_region+0x[0-9a-f]*;\([a-z_]*+0x[0-9a-f]*;\)*$TD_ZAP_WALK"'+0x[0-9a-f]*;\([a-z_]*+0x[0-9a-f]*;\)*page_remove_rmap+0x[0-9a-f]*;deferred_split_huge_page [0-9]*$' "$TD_TMP/folded")" 0
	# Captured, and the background sampler's from before the trigger.
	expect_eq "folded total" "$(awk '{ s += $NF } END { print s }' "$TD_TMP/folded")" \
		$((captured + $(reason_background MUNMAP)))

	# 2. --stack-on from the start: every exit-time call's stack, and only those.
	td_start $TD_SPLIT --rules "$TD_RULES_61" --stack-on EXIT
	thp --munmap-halves 1 || fail "thp failed"
	td_stop INT
	expect_eq "stack-on: EXIT" "$(reason_count EXIT)" 256
	expect_eq "stack-on: MUNMAP" "$(reason_count MUNMAP)" 256
	expect_eq "stack-on: captured" "$(summary_num stacks_captured)" 256
	expect_eq "stack-on: matched" "$(summary_num stacks_matched)" 256
	echo "$TD_SUMMARY" | grep -q '"exit_mmap+0x' || fail "stack-on: no exit_mmap frame"
	expect_eq "stack-on: first frames" "$(first_frames)" page_remove_rmap
	expect_eq "stack-on: drops" "$(summary_num stacks_rate_capped)$(summary_num stacks_ringbuf_full)" 00

	# 3. Moving: the half munmaps while topdown runs, so MUNMAP dominates first and is
	# captured; 1.5 s later the exit alone, and capture moves to EXIT. The summary has
	# the stacks of both, in that order.
	td_start $TD_SPLIT --rules "$TD_RULES_61" -i 0.5 --min-rate 5 --min-events 3
	thp_start --munmap-halves $N --wait-usr1 --unmap-gap-ms 50 --hold-ms 1500
	sleep 1.5
	kill -USR1 $thp_pid
	wait $thp_pid || fail "thp failed: $(cat "$TD_TMP/thp.out")"
	sleep 1
	td_stop INT
	cat "$TD_ERR"
	expect_eq "move: MUNMAP" "$(reason_count MUNMAP)" $((256 * N))
	expect_eq "move: EXIT" "$(reason_count EXIT)" $((256 * N))
	grep -q "MUNMAP has 100.0% of calls (.*threshold 80%): capturing its stacks" "$TD_ERR" ||
		fail "move: no notice for MUNMAP"
	grep -q "EXIT has 100.0% of calls (.*threshold 80%): moving stack capture from MUNMAP" "$TD_ERR" ||
		fail "move: no notice for the move to EXIT"
	expect_eq "move: stack reason" "$(summary_str stack_reason)" EXIT
	sets=$(echo "$TD_SUMMARY" | grep -o '"stacks_by_reason":.*' | grep -o '{"reason":"[A-Z_]*","captured"' |
		sed 's/.*"reason":"//; s/",.*//' | tr '\n' ' ')
	expect_eq "move: reasons with stacks, in order" "$sets" "MUNMAP EXIT "

	not_found
	exit 0
fi

# 1. Automatic: the faults happen before topdown starts; then 40 half-unmaps, 50 ms apart.
N=40
thp_start --munmap-halves $N --wait-usr1 --unmap-gap-ms 50
td_start deferred_split_folio -i 0.5 --min-rate 5 --min-events 3 --folded "$TD_TMP/folded"
kill -USR1 $thp_pid
wait $thp_pid || fail "thp failed: $(cat "$TD_TMP/thp.out")"
td_stop INT
cat "$TD_ERR"
expect_eq "auto: ZAP" "$(reason_count ZAP)" $N
expect_eq "auto: FAULT_ALLOC" "$(reason_count FAULT_ALLOC)" 0
expect_eq "auto: phase" "$(summary_str phase)" "stack capture"
expect_eq "auto: stack reason" "$(summary_str stack_reason)" ZAP
grep -q "ZAP has 100.0% of calls (.*threshold 80%): capturing its stacks" "$TD_ERR" || fail "no switch notice"
captured=$(summary_num stacks_captured)
[ "$captured" -gt 0 ] && [ "$captured" -lt $N ] || fail "auto: captured $captured stacks, want 1..$((N - 1))"
expect_eq "auto: captured = sent" "$captured" "$(summary_num stacks_sent)"
expect_eq "auto: captured = matched" "$captured" "$(summary_num stacks_matched)"
# The one reason captured: its own gate counts are the run's.
expect_eq "auto: ZAP's calls at the gate" $(($(gate_num ZAP calls) - $(gate_num ZAP unseen))) "$(summary_num stacks_matched)"
expect_eq "auto: ZAP's stacks shown" "$(gate_num ZAP shown)" "$captured"
echo "$TD_SUMMARY" | grep -q "\"$TD_ZAP_WALK+0x" || fail "auto: no $TD_ZAP_WALK frame"
expect_eq "auto: first frames" "$(first_frames)" folio_remove_rmap_ptes
# Folded: the reason, then the frames root first, the traced function as the leaf,
# counts adding up.
expect_eq "folded lines not under ZAP" "$(grep -vc '^ZAP;' "$TD_TMP/folded")" 0
# (zap_pte_range and the like, when not inlined, sit between the walk and the rmap call.)
grep -q ";$TD_ZAP_WALK"'+0x[0-9a-f]*;\([a-z_]*+0x[0-9a-f]*;\)*folio_remove_rmap_ptes+0x[0-9a-f]*;deferred_split_folio [0-9]*$' "$TD_TMP/folded" ||
	{ cat "$TD_TMP/folded"; fail "folded output lacks the zap path"; }
# Captured, and the background sampler's from before the trigger.
expect_eq "folded total" "$(awk '{ s += $NF } END { print s }' "$TD_TMP/folded")" \
	$((captured + $(reason_background ZAP)))

# 2. --stack-on from the start: every THP fault's stack.
F=10
td_start deferred_split_folio --stack-on FAULT_ALLOC
thp --faults $F || fail "thp failed"
td_stop INT
expect_eq "stack-on: FAULT_ALLOC" "$(reason_count FAULT_ALLOC)" $F
expect_eq "stack-on: captured" "$(summary_num stacks_captured)" $F
expect_eq "stack-on: matched" "$(summary_num stacks_matched)" $F
expect_eq "stack-on: FAULT_ALLOC's calls at the gate" "$(gate_num FAULT_ALLOC calls)" $F
echo "$TD_SUMMARY" | grep -q '"handle_mm_fault+0x' || fail "stack-on: no handle_mm_fault frame"
expect_eq "stack-on: first frames" "$(first_frames)" $TD_THP_FAULT
expect_eq "stack-on: drops" "$(summary_num stacks_rate_capped)$(summary_num stacks_ringbuf_full)" 00

# 3. Moving: the faults now happen while topdown runs, so FAULT_ALLOC dominates first and
# is captured; then the half-unmaps alone, and capture moves to ZAP. The summary has the
# stacks of both, in that order.
td_start deferred_split_folio -i 0.5 --min-rate 5 --min-events 3
# The faults 20 ms apart: a burst that lasts beyond the trigger's reaction (40 faults
# at full speed can be over before the first decision on a busy host).
thp_start --munmap-halves $N --wait-usr1 --unmap-gap-ms 50 --fault-gap-ms 20
sleep 1.5
kill -USR1 $thp_pid
wait $thp_pid || fail "thp failed: $(cat "$TD_TMP/thp.out")"
td_stop INT
cat "$TD_ERR"
expect_eq "move: FAULT_ALLOC" "$(reason_count FAULT_ALLOC)" $N
expect_eq "move: ZAP" "$(reason_count ZAP)" $N
grep -q "FAULT_ALLOC has 100.0% of calls (.*threshold 80%): capturing its stacks" "$TD_ERR" ||
	fail "move: no notice for FAULT_ALLOC"
grep -q "ZAP has 100.0% of calls (.*threshold 80%): moving stack capture from FAULT_ALLOC" "$TD_ERR" ||
	fail "move: no notice for the move to ZAP"
expect_eq "move: stack reason" "$(summary_str stack_reason)" ZAP
sets=$(echo "$TD_SUMMARY" | grep -o '"stacks_by_reason":.*' | grep -o '{"reason":"[A-Z_]*","captured"' |
	sed 's/.*"reason":"//; s/",.*//' | tr '\n' ' ')
expect_eq "move: reasons with stacks, in order" "$sets" "FAULT_ALLOC ZAP "

# 4. --stack-on not-found.
not_found
exit 0
