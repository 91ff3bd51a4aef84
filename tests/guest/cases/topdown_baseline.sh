# Fix verified: --save a baseline of a partial-unmap-heavy workload (ZAP hot); then
# --baseline with a fault-only workload (the "fix") is verified, exit 0; the same
# workload again is not verified, exit 3; a run too short to tell, or with too few
# calls, or whose -p process exited before it ended, is inconclusive, exit 4. Bad baseline files are one-line errors before anything is attached, a
# --save that fails at exit keeps the result, and show saves and compares a pinned
# function. The THP deferred-split function is deferred_split_folio (6.12 on), or on 6.1
# and 5.10 deferred_split_huge_page, which page_remove_rmap calls for every PTE-mapped
# page of a THP it unmaps (256 at each half munmap, 256 more at exit; ZAP in its
# built-in profile) and THP faults never call: there the "fix" makes no call at all,
# which is no evidence of a fix (inconclusive).
. "$TD_LIB"
need_cmd topdown thp
split_fn
FN=$TD_SPLIT

N=40 F=30
B=$TD_TMP/before.json
if [ $FN = deferred_split_huge_page ]; then
	# ZAP per baseline run; the profile's first reason; the ZAP stacks' first frame;
	# the rules of the pinned instance (part 7), that split ZAP into two halves.
	ZN=$((512 * N)) FIRST=ZAP RMAP=page_remove_rmap PIN_ARGS="--rules $TD_RULES_61"
else
	ZN=$N FIRST=FAULT_ALLOC RMAP=folio_remove_rmap_ptes PIN_ARGS=
fi

# field KEY FILE: the first string or number stored under "KEY" in FILE.
field() {
	grep -o "\"$1\":\(\"[^\"]*\"\|[0-9.e+-]*\)" "$2" | head -1 | sed 's/^[^:]*://; s/"//g'
}

# unmaps ARGS...: the baseline's workload, N half munmaps 25 ms apart with their THP
# faults made before USR1, while "$@" runs.
unmaps() {
	thp_start --munmap-halves $N --wait-usr1 --unmap-gap-ms 25
	"$@"
	kill -USR1 $thp_pid
	wait $thp_pid || fail "thp failed: $(cat "$TD_TMP/thp.out")"
}

# 1. The baseline: ZAP only, saved at exit with its stacks.
unmaps td_start $FN -i 1 --min-rate 5 --min-events 3 --save "$B"
td_stop INT
expect_eq "baseline: exit status" $TD_RC 0
expect_eq "baseline: ZAP" "$(reason_count ZAP)" $ZN
echo "saved: $(cut -c1-600 "$B")"
expect_eq "saved: format" "$(field format "$B")" topdown-result
expect_eq "saved: version" "$(field version "$B")" 2
expect_eq "saved: source" "$(field source "$B")" run
expect_eq "saved: func" "$(field func "$B")" $FN
expect_eq "saved: kernel" "$(field kernel "$B")" "$(uname -r)"
expect_eq "saved: profile" "$(field profile "$B")" "built-in profile $FN"
expect_eq "saved: hot reason" "$(field hot_reason "$B")" ZAP
grep -q "\"reasons\":\[{\"reason\":\"ZAP\",\"count\":$ZN," "$B" || fail "saved: no ZAP row of $ZN calls"
grep -q "\"reason_names\":\[\"$FIRST\"," "$B" || fail "saved: the profile's reasons are not named"
# (Captured, and the background sampler's: one or the other may be 0.)
grep -q "\"stacks\":\[{\"reason\":\"ZAP\",\"captured\":[0-9]*,\"background\":[0-9]*,\"stacks\":\[{\"count\":[1-9][0-9]*,\"frames\":\[\"$RMAP+0x" "$B" ||
	fail "saved: no ZAP stacks"
expect_eq "saved: one line" "$(wc -l <"$B")" 1
secs=$(field secs "$B")

# 2. The fix: THP faults only, for at least as long as the baseline ran, so that at
# its rate ZAP would have made its calls again.
td_start $FN -i 1 --baseline "$B"
thp --faults $F >/dev/null || fail "thp failed"
sleep "$secs"
td_stop INT
grep "warning" "$TD_ERR" && fail "warnings for a baseline of the same kernel and profile"
if [ $FN = deferred_split_huge_page ]; then
	# No call at all: nothing shows that the workload ran, so no verdict (a run
	# that lost its workload looks the same).
	expect_eq "fixed: total" "$(summary_num total)" 0
	expect_eq "no calls: exit status" $TD_RC 4
	expect_eq "no calls: phase" "$(summary_str phase)" inconclusive
	echo "$TD_SUMMARY" | grep -q '"message":"this run saw too few calls to tell: 0 calls in [0-9.]*s, at least 20 needed' ||
		fail "no calls: message"
else
	expect_eq "fixed: exit status" $TD_RC 0
	expect_eq "fixed: phase" "$(summary_str phase)" "fix verified"
	expect_eq "fixed: FAULT_ALLOC" "$(reason_count FAULT_ALLOC)" $F
fi
expect_eq "fixed: ZAP" "$(reason_count ZAP)" 0
echo "$TD_SUMMARY" | grep -q "\"compare\":\[{\"reason\":\"ZAP\",\"count_before\":$ZN,[^}]*\"count\":0,\"rate\":0,\"share\":0,\"rate_change\":0,\"share_change\":-100}" ||
	fail "fixed: no ZAP row before/after"
if [ $FN != deferred_split_huge_page ]; then
	echo "$TD_SUMMARY" | grep -q '"verdict":{"outcome":"fix verified","reason":"ZAP","share_before":100,"share":0,"threshold":80,' ||
		fail "fixed: verdict"
	echo "$TD_SUMMARY" | grep -q '"drop":100,"verify_drop":50,"share_below_threshold":true,"rate_dropped":true,' ||
		fail "fixed: verdict conditions"
fi
# Every interval carries the comparison.
expect_eq "fixed: intervals without compare" "$(grep '"type":"interval"' "$TD_OUT" | grep -vc '"compare":\[{"reason":"ZAP"')" 0

# 3. The same workload again: not verified, exit 3; the text summary in the seed's
# order, the verdict saying which condition failed.
run_text() {
	topdown $FN -q "$@" >"$TD_TMP/text.out" 2>"$TD_TMP/text.err" &
	text_pid=$!
	wait_line "$TD_TMP/text.err" "Ctrl-C to end"
}
unmaps run_text --baseline "$B"
kill -INT $text_pid
wait_exit $text_pid "topdown (pid $text_pid)"
rc=$?
cat "$TD_TMP/text.out"
expect_eq "same: exit status" $rc 3
grep -q "^Summary: $ZN calls of $FN in .* phase reached: not verified$" "$TD_TMP/text.out" ||
	fail "same: summary line"
grep -q "^  not verified: ZAP (the baseline's hot reason): share 100.0% (was 100.0%), not below the 80% threshold; rate .*(a fall of 50% needed)$" \
	"$TD_TMP/text.out" || fail "same: verdict line"
order=$(grep -n -e '^  REASON' -e '^  hot reason:' -e '^  before/after, baseline' -e '^  not verified:' -e '^  drops:' \
	"$TD_TMP/text.out" | sed 's/:.*//' | tr '\n' ' ')
expect_eq "same: sections in order" "$order" "$(echo "$order" | tr ' ' '\n' | grep . | sort -n | tr '\n' ' ')"
expect_eq "same: sections" "$(echo "$order" | wc -w)" 5
grep -q "^    ZAP  *[0-9.]*  *[0-9.]*  *[0-9.]*x  *100.0%  *100.0%  *+0.0pp$" "$TD_TMP/text.out" || fail "same: no ZAP row"

# 4. Too short to tell: inconclusive, exit 4. The baseline is slow, so that a short run
# stays too short with seconds to spare on a loaded guest: 24 half munmaps (24 calls
# of ZAP; on 6.1 and 5.10 one, 256 calls, 256 at a time) over 20 s, 1.2/s or 12.8/s;
# at that rate 20 calls take 17 s or 1.6 s, and this run lasts 0.1 s.
S=$TD_TMP/slow.json
if [ $FN = deferred_split_huge_page ]; then
	SN=1 SZ=256
else
	SN=24 SZ=24
fi
# (Faulted in before, and held after: on 6.12 on THP faults and the exit call it too.)
thp_start --munmap-halves $SN --wait-usr1 --hold-ms 600000
td_start $FN -d 20 --save "$S"
kill -USR1 $thp_pid
wait_exit $TD_PID "topdown (pid $TD_PID)"
expect_eq "slow baseline: exit status" $? 0
kill $thp_pid
wait $thp_pid
grep -q "\"reasons\":\[{\"reason\":\"ZAP\",\"count\":$SZ," "$S" ||
	fail "slow baseline: no ZAP row of $SZ calls: $(cut -c1-400 "$S")"
td_start $FN -d 0.1 --baseline "$S"
wait_exit $TD_PID "topdown (pid $TD_PID)"
TD_RC=$?
TD_SUMMARY=$(grep '"type":"summary"' "$TD_OUT")
expect_eq "short: exit status" $TD_RC 4
expect_eq "short: phase" "$(summary_str phase)" inconclusive
echo "$TD_SUMMARY" | grep -q '"message":"this run is too short: at the baseline' || fail "short: message"

# 4b. A run whose -p process exits before it ends: its rates would read low, so no
# verdict, however it looks.
sleep 0.5 &
gone=$!
td_start $FN -p $gone -d 3 --baseline "$B"
wait_exit $TD_PID "topdown (pid $TD_PID)"
TD_RC=$?
TD_SUMMARY=$(grep '"type":"summary"' "$TD_OUT")
expect_eq "gone: exit status" $TD_RC 4
expect_eq "gone: phase" "$(summary_str phase)" inconclusive
echo "$TD_SUMMARY" | grep -q "\"message\":\"pid $gone (sleep) exited [0-9.]*s into the run: this run did not watch" ||
	fail "gone: message"

# 5. Bad files: one line naming the file and the problem, exit 2 (what the command
# line gives is wrong), nothing attached.
bad() {
	want=$1
	shift
	topdown $FN -d 1 "$@" >"$TD_TMP/out" 2>"$TD_TMP/err"
	rc=$?
	echo "+ topdown ... $*: $(cat "$TD_TMP/err")"
	expect_eq "exit status of $*" $rc 2
	expect_eq "stderr lines of $*" "$(wc -l <"$TD_TMP/err")" 1
	grep -q -- "$want" "$TD_TMP/err" || fail "$*: stderr does not match '$want'"
	grep -q "tracing" "$TD_TMP/err" && fail "$*: it attached"
	[ ! -s "$TD_TMP/out" ] || fail "$*: output $(cat "$TD_TMP/out")"
}
echo 'not json' >"$TD_TMP/bad.json"
sed 's/"version":2,/"version":3,/' "$B" >"$TD_TMP/v3.json"
sed "s/\"func\":\"$FN\"/\"func\":\"vfs_read\"/" "$B" >"$TD_TMP/other.json"
bad "^topdown: baseline $TD_TMP/none.json: cannot read it: No such file or directory" --baseline "$TD_TMP/none.json"
bad "^topdown: baseline $TD_TMP/bad.json: not JSON (" --baseline "$TD_TMP/bad.json"
bad "^topdown: baseline $TD_TMP/v3.json: format version 3 is newer than this topdown reads (2)" --baseline "$TD_TMP/v3.json"
bad "^topdown: baseline $TD_TMP/other.json: it is a result for function vfs_read, not $FN\$" --baseline "$TD_TMP/other.json"
bad "^topdown: --save $TD_TMP/no/such.json: cannot write it: no directory $TD_TMP/no\$" --save "$TD_TMP/no/such.json"
if command -v bpftool >/dev/null; then expect_progs "programs left" 0; fi

# 6. --save that fails at exit (its file system turned read-only meanwhile): the result
# goes to a file in /tmp, named on stderr; exit 1.
mkdir "$TD_TMP/ro"
mount -t tmpfs tmpfs "$TD_TMP/ro" || fail "cannot mount a tmpfs"
td_start $FN -d 30 --save "$TD_TMP/ro/r.json"
mount -o remount,ro "$TD_TMP/ro" || fail "cannot remount read-only"
td_stop INT
tail -n 1 "$TD_ERR"
expect_eq "rescued: exit status" $TD_RC 1
rescue=$(tail -n 1 "$TD_ERR" | sed -n "s|^topdown: --save $TD_TMP/ro/r.json: cannot write it: Read-only file system (os error 30); the result is in \(.*\) instead$|\1|p")
[ -n "$rescue" ] || fail "rescued: no message naming the file"
expect_eq "rescued: format" "$(field format "$rescue")" topdown-result
umount "$TD_TMP/ro"
rm -f "$rescue"

# 7. show of a pinned function: --save writes its counts since it was pinned;
# --baseline compares: FAULT_ALLOC and ZAP (on 6.1 and 5.10, by the rules: MUNMAP and
# EXIT) have half the calls each, so the baseline has no hot reason (none reaches the
# 80% threshold): inconclusive, exit 4.
P=20
# shellcheck disable=SC2086 # PIN_ARGS's words are separate arguments
topdown pin $FN $PIN_ARGS 2>/dev/null || fail "pin failed"
thp --munmap-halves $P >/dev/null || fail "thp failed"
topdown show --save "$TD_TMP/pinned.json" >/dev/null || fail "show --save failed"
echo "saved: $(cut -c1-300 "$TD_TMP/pinned.json")"
expect_eq "pinned: source" "$(field source "$TD_TMP/pinned.json")" pinned
if [ $FN = deferred_split_huge_page ]; then
	grep -q "{\"reason\":\"MUNMAP\",\"count\":$((256 * P))," "$TD_TMP/pinned.json" || fail "pinned: no MUNMAP row"
	grep -q "{\"reason\":\"EXIT\",\"count\":$((256 * P))," "$TD_TMP/pinned.json" || fail "pinned: no EXIT row"
else
	grep -q "{\"reason\":\"ZAP\",\"count\":$P," "$TD_TMP/pinned.json" || fail "pinned: no ZAP row"
fi
SHOWN=$(topdown show --baseline "$TD_TMP/pinned.json" --json)
rc=$?
echo "show: $SHOWN" | cut -c1-1500
topdown unpin $FN 2>/dev/null || fail "unpin failed"
expect_eq "pinned: exit status" $rc 4
echo "$SHOWN" | grep -q '"verdict":{"outcome":"inconclusive","reason":null,.*"message":"the baseline has no hot reason: its top reason, [A-Z_]*, has 50.0% of the calls, below the 80% threshold"' ||
	fail "pinned: verdict"
exit 0
