# case-timeout: 900
# The spike battery: a burst of half unmaps (ZAP) over before the trigger's first look
# still has stacks, from the background sampler, shown under ZAP. Bursts of 20, 80 and
# 150 calls, each after a quiet spell and right after THP faults (FAULT_ALLOC), each
# with -i 1, with -i 5 and under serve --capture (/metrics' topdown_stacks_total, the
# count the pprof window serves); every run must show at least min(calls, 10) ZAP
# stacks. Prints one table row a run: burst, mode, calls, stacks shown, of them from
# the background sampler. --background-stacks 0 (the sampler off) is run once too, its
# figures printed, not bounded.
# On 6.1 and 5.10 the function is deferred_split_huge_page: a half munmap is 256 calls
# (MUNMAP, by rules) and THP faults make none, so the bursts are 1 and 2 half munmaps
# (256 and 512 calls), and the other reason's phase is half MADV_DONTNEEDs (DONTNEED).
# Every thp holds its exit (more calls) until topdown has stopped.
. "$TD_LIB"
need_cmd topdown thp wget
split_fn

F=$TD_SPLIT
if [ $F = deferred_split_huge_page ]; then
	RULES="--rules $TD_RULES_61;DONTNEED=page_remove_rmap"
	R=MUNMAP PER=256 BURSTS="1 2" HOLD="--hold-ms 600000"
else
	RULES= R=ZAP PER=1 BURSTS="20 80 150" HOLD=
fi
URL=http://127.0.0.1:9478
rows=

# stacks_of REASON: "SHOWN BACKGROUND" of REASON in $TD_SUMMARY's stacks_by_reason
# (shown: captured, and the background sampler's).
stacks_of() {
	_s=$(echo "$TD_SUMMARY" | grep -o "{\"reason\":\"$1\",\"captured\":[0-9]*,\"background\":[0-9]*" |
		sed 's/.*"captured":\([0-9]*\),"background":\([0-9]*\)/\1 \2/')
	set -- ${_s:-0 0}
	echo $(($1 + $2)) "$2"
}

# served REASON: topdown_stacks_total of REASON (serve's /metrics).
served() {
	http_get $URL/metrics "$TD_TMP/metrics" || fail "scrape failed"
	_v=$(grep "^topdown_stacks_total{function=\"$F\",reason=\"$1\"} " "$TD_TMP/metrics" | sed 's/.* //')
	echo "${_v:-0}"
}

# workload P AFTER: P half unmaps in one burst; AFTER=quiet: THPs faulted first, then
# 1.5 s without a call, then the burst; AFTER=phase: the other reason's calls, then at
# once the burst. Sets held_pids (thps holding their exit) and thp_pid.
workload() {
	held_pids=
	# The last run's line must not be taken for this one's (the background shell
	# may not have truncated the file yet when the wait begins).
	rm -f "$TD_TMP/thp.out"
	if [ "$2" = quiet ]; then
		# shellcheck disable=SC2086 # HOLD's words are separate arguments
		thp_start --munmap-halves "$1" --wait-usr1 $HOLD
		sleep 1.5
		kill -USR1 $thp_pid
	elif [ $F = deferred_split_huge_page ]; then
		held_dontneeds 2
		# shellcheck disable=SC2086
		thp --munmap-halves "$1" $HOLD >"$TD_TMP/thp.out" 2>&1 &
		thp_pid=$!
	else
		thp --faults 80 --munmap-halves "$1" >"$TD_TMP/thp.out" 2>&1 &
		thp_pid=$!
	fi
	wait_line "$TD_TMP/thp.out" "^thp: faults=[0-9]* munmap_halves=$1 "
	# The trigger's next looks: the burst is over by now.
	sleep 1.5
}

# end_workload: lets the held thps exit.
end_workload() {
	# shellcheck disable=SC2086 # one pid a word
	kill $thp_pid $held_pids 2>/dev/null
	# shellcheck disable=SC2086
	wait $thp_pid $held_pids 2>/dev/null
	return 0
}

# check P AFTER MODE SHOWN BACKGROUND: a table row; fails below the bound.
check() {
	_calls=$(($1 * PER))
	_need=$((_calls < 10 ? _calls : 10))
	rows="$rows
$(printf '%6s  %-6s %-8s %6s  %6s  %6s' "$_calls" "$2" "$3" "$_calls" "$4" "$5")"
	[ "$4" -ge $_need ] || fail "burst of $_calls after $2, $3: $4 $R stacks shown, fewer than $_need"
}

for P in $BURSTS; do
	for after in quiet phase; do
		for i in 1 5; do
			# shellcheck disable=SC2086 # RULES's words are separate arguments
			td_start $F $RULES -i $i
			td_ready
			workload "$P" $after
			td_stop INT
			end_workload
			expect_eq "-i $i, $P after $after: $R" "$(reason_count $R)" $((P * PER))
			# shellcheck disable=SC2046 # two numbers
			check "$P" $after "-i $i" $(stacks_of $R)
		done
	done
done

# The sampler off, once: what the trigger alone gets of the largest burst after faults.
P=${BURSTS##* }
# shellcheck disable=SC2086
td_start $F $RULES -i 1 --background-stacks 0
td_ready
workload "$P" phase
td_stop INT
end_workload
# shellcheck disable=SC2046
set -- $(stacks_of $R)
expect_eq "sampler off: background stacks" "$2" 0
off="$(printf '%6s  %-6s %-8s %6s  %6s  %6s' $((P * PER)) phase "-i 1, off" $((P * PER)) "$1" "$2")"

# Under serve --capture, on a pinned instance.
# shellcheck disable=SC2086
topdown pin $F $RULES 2>/dev/null || fail "pin failed"
topdown serve --capture --listen 127.0.0.1:9478 2>"$TD_TMP/serve.err" &
serve_pid=$!
wait_line "$TD_TMP/serve.err" "^topdown: $F: watching for a reason to take over"
for P in $BURSTS; do
	for after in quiet phase; do
		# One program for every burst here: its buckets refill (16 in 4 s) only
		# while the reason is quiet, as between bursts of a live system.
		sleep 4
		before=$(served $R)
		workload "$P" $after
		got=$(($(served $R) - before))
		end_workload
		check "$P" $after serve "$got" "-"
	done
done
kill -TERM $serve_pid
wait_exit $serve_pid "topdown serve"
topdown unpin $F || fail "unpin failed"
cat "$TD_TMP/serve.err"

echo "spike battery on $TD_KERNEL ($R; stacks shown, of them from the background sampler):"
printf '%6s  %-6s %-8s %6s  %6s  %6s\n' burst after mode calls shown backgr
echo "$rows" | sed '/^$/d'
echo "$off"
exit 0
