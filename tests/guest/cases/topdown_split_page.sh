# The cases built on deferred_split_folio (tier1, profile, stacks, spike, pin,
# baseline) skip on kernels that predate it (6.1, 5.10): this one proves the same on
# their deferred_split_huge_page, which page_remove_rmap calls for every PTE-mapped
# page of a THP it unmaps: 256 at each half unmap and 256 more at exit (thp.c).
# Deeper-frame rules tell the two apart (MUNMAP: under unmap_region; EXIT: under
# exit_mmap; a half MADV_DONTNEED stays page_remove_rmap): exact counts in both modes,
# automatic, spike and --stack-on stacks, pin/show/serve/unpin, --baseline verdicts.
. "$TD_LIB"
need_cmd topdown thp bpftool wget
need_func deferred_split_huge_page
FN=deferred_split_huge_page
RULES="MUNMAP=page_remove_rmap@unmap_region/8;EXIT=page_remove_rmap@exit_mmap/8"
ROOT=/sys/fs/bpf/topdown

# 1. Exact counts by deeper frames, fentry and kprobe.
P=2 Q=2
for mode in fentry kprobe; do
	td_start $FN --$mode --rules "$RULES"
	thp --munmap-halves $P --dontneed-halves $Q || fail "thp failed"
	td_stop INT
	expect_eq "$mode: exit status" "$TD_RC" 0
	expect_eq "$mode: MUNMAP" "$(reason_count MUNMAP)" $((256 * P))
	expect_eq "$mode: page_remove_rmap" "$(reason_count page_remove_rmap)" $((256 * Q))
	expect_eq "$mode: EXIT" "$(reason_count EXIT)" $((256 * (P + Q)))
	expect_eq "$mode: rows" "$(reason_rows)" 3
	expect_eq "$mode: caller not found" "$(summary_num caller_not_found)" 0
	expect_eq "$mode: deep unwind failed" "$(summary_num deep_unwind_failed)" 0
done

# first_frames: the first frame of every stack in the summary, function names only.
first_frames() {
	echo "$TD_SUMMARY" | grep -o '"frames":\["[A-Za-z0-9_.]*' | sed 's/.*\["//' | sort -u
}

# 2. Automatic: the faults happen before topdown starts; then half munmaps 50 ms apart
# make MUNMAP the only reason, and its stacks are captured.
N=12
thp_start --munmap-halves $N --wait-usr1 --unmap-gap-ms 50
td_start $FN --rules "$RULES" -i 0.5 --min-rate 5 --min-events 3 --folded "$TD_TMP/folded"
kill -USR1 $thp_pid
wait $thp_pid || fail "thp failed: $(cat "$TD_TMP/thp.out")"
td_stop INT
cat "$TD_ERR"
expect_eq "auto: MUNMAP" "$(reason_count MUNMAP)" $((256 * N))
expect_eq "auto: EXIT" "$(reason_count EXIT)" $((256 * N))
grep -q "MUNMAP has 100.0% of calls (.*threshold 80%): capturing its stacks" "$TD_ERR" || fail "no switch notice"
sets=$(echo "$TD_SUMMARY" | grep -o '"stacks_by_reason":.*' | grep -o '{"reason":"[A-Z_]*","captured"' |
	sed 's/.*"reason":"//; s/",.*//' | head -n 1)
expect_eq "auto: first reason with stacks" "$sets" MUNMAP
expect_eq "auto: first frames" "$(first_frames)" page_remove_rmap
m=$(grep -c '^MUNMAP;' "$TD_TMP/folded")
[ "$m" -gt 0 ] || fail "auto: no folded MUNMAP stacks"
expect_eq "auto: MUNMAP stacks without unmap_region" \
	"$(grep '^MUNMAP;' "$TD_TMP/folded" | grep -vc ';unmap_region+0x[0-9a-f]*;\([a-z_]*+0x[0-9a-f]*;\)*page_remove_rmap+0x[0-9a-f]*;deferred_split_huge_page [0-9]*$')" 0

# 2b. A spike: the same burst with -i 10, shorter than one report: its stacks
# are caught while it lasts (the trigger looks at the last second every 100 ms).
thp_start --munmap-halves $N --wait-usr1 --unmap-gap-ms 50
td_start $FN --rules "$RULES" -i 10
kill -USR1 $thp_pid
wait $thp_pid || fail "thp failed: $(cat "$TD_TMP/thp.out")"
td_stop INT
expect_eq "spike: MUNMAP" "$(reason_count MUNMAP)" $((256 * N))
expect_eq "spike: first capture" "$(echo "$TD_SUMMARY" | grep -o '"captures":\[{"reason":"[A-Z]*"' | sed 's/.*:"//; s/"$//')" MUNMAP
[ "$(summary_num stacks_captured)" -gt 0 ] || fail "spike: no stacks captured"

# 3. --stack-on EXIT from the start: every exit-time call's stack, and only those.
td_start $FN --rules "$RULES" --stack-on EXIT --folded "$TD_TMP/folded"
thp --munmap-halves 1 || fail "thp failed"
td_stop INT
expect_eq "stack-on: EXIT" "$(reason_count EXIT)" 256
expect_eq "stack-on: MUNMAP" "$(reason_count MUNMAP)" 256
expect_eq "stack-on: captured" "$(summary_num stacks_captured)" 256
expect_eq "stack-on: matched" "$(summary_num stacks_matched)" 256
expect_eq "stack-on: stacks without exit_mmap" "$(grep -vc ';exit_mmap+0x' "$TD_TMP/folded")" 0

# 4. pin, show, serve, unpin: the built-in profile (ZAP) counts with no topdown running.
expect_eq "nothing pinned" "$(topdown show)" \
	"nothing is pinned (pin a function with topdown pin FUNC; pins do not survive a reboot)"
topdown pin $FN 2>"$TD_TMP/pin.err" || fail "pin failed: $(cat "$TD_TMP/pin.err")"
thp --munmap-halves $P --dontneed-halves $Q || fail "thp failed"
SHOWN=$(topdown show $FN --json) || fail "show failed"
echo "show: $SHOWN" | cut -c1-600
zap=$(echo "$SHOWN" | grep -o '{"reason":"ZAP","count":[0-9]*' | sed 's/.*://')
expect_eq "pinned: ZAP" "$zap" $((512 * (P + Q)))
topdown show | grep -q "^$FN: $((512 * (P + Q))) calls in .* since it was pinned" || fail "no text show: $(topdown show)"
topdown serve --listen 127.0.0.1:9477 2>"$TD_TMP/serve.err" &
serve_pid=$!
wait_line "$TD_TMP/serve.err" "serving http://127.0.0.1:9477/metrics"
wget -q -O "$TD_TMP/metrics" http://127.0.0.1:9477/metrics || fail "scrape failed"
grep -qx "topdown_calls_total{function=\"$FN\",reason=\"ZAP\"} $((512 * (P + Q)))" "$TD_TMP/metrics" ||
	fail "no exact ZAP counter: $(grep ZAP "$TD_TMP/metrics")"
kill -INT $serve_pid
wait $serve_pid || fail "serve exited with $?"
topdown unpin $FN || fail "unpin failed"
[ ! -e $ROOT/$FN ] || fail "the pin directory is still there"
# (freed by RCU callbacks: give them a moment)
i=0
while [ "$(td_progs)" != 0 ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
expect_eq "programs left after unpin" "$(td_progs)" 0

# 5. --baseline: a ZAP-heavy baseline; THP faults alone (no call at all on these
# kernels) verify the fix, exit 0; the same workload again does not, exit 3.
B=$TD_TMP/before.json
td_start $FN -i 1 --save "$B"
thp --munmap-halves 4 || fail "thp failed"
sleep 1
td_stop INT
expect_eq "baseline: ZAP" "$(reason_count ZAP)" 2048
grep -q '"hot_reason":"ZAP"' "$B" || fail "saved: hot reason is not ZAP"
td_start $FN -i 1 --baseline "$B"
thp --faults 4 >/dev/null || fail "thp failed"
sleep 2
td_stop INT
expect_eq "fixed: exit status" $TD_RC 0
expect_eq "fixed: phase" "$(summary_str phase)" "fix verified"
td_start $FN -i 1 --baseline "$B"
thp --munmap-halves 4 >/dev/null || fail "thp failed"
sleep 1
td_stop INT
expect_eq "same: exit status" $TD_RC 3
expect_eq "same: phase" "$(summary_str phase)" "not verified"
expect_eq "programs left" "$(td_progs)" 0
exit 0
