# case-timeout: 240
# topdown serve --capture: the trigger of a live run on a pinned function with no
# terminal. THP faults make FAULT_ALLOC take over, then half-unmaps move capture to ZAP;
# /metrics says which reason is captured and how many stacks; the pprof endpoint returns
# the window's ZAP stacks, checked with an independent decoder (protoc --decode_raw); a
# live topdown FUNC is refused while serve steers capture; unpin is not, and serve lets
# go of the instance, leaving nothing behind. /metrics is the Prometheus text format,
# which promtool check metrics passes, unless OpenMetrics is asked for. Prints serve's
# CPU time and memory.
# On 6.1 and 5.10 the function is deferred_split_huge_page, which THP faults never
# call, and page_remove_rmap calls it for every PTE-mapped page of a THP it unmaps (256
# at each half unmap): there it is pinned with rules naming a half MADV_DONTNEED's
# calls DONTNEED and a half munmap's MUNMAP, and half MADV_DONTNEEDs take over first;
# every thp holds its exit (more calls) until the end.
. "$TD_LIB"
need_cmd topdown thp wget protoc gunzip bpftool capbound
split_fn
thp_callers

N=40
F=$TD_SPLIT
if [ $F = deferred_split_huge_page ]; then
	# The first reason to take over and the second, calls per half unmap, the rmap
	# call, the pin's arguments.
	R1=DONTNEED R2=MUNMAP PER=256 RMAP=page_remove_rmap
	PIN_ARGS="--rules $TD_RULES_61;DONTNEED=page_remove_rmap"
	HOLD="--hold-ms 600000"
else
	R1=FAULT_ALLOC R2=ZAP PER=1 RMAP=folio_remove_rmap_ptes PIN_ARGS= HOLD=
fi
URL=http://127.0.0.1:9477
scrape() {
	http_get $URL/metrics "$TD_TMP/metrics" || fail "scrape failed"
}
metric() {
	grep "^$1 " "$TD_TMP/metrics" | sed 's/.* //'
}
# cpu_rss PID: CPU seconds (user + system) and resident KiB of PID.
cpu_rss() {
	awk -v hz="$(getconf CLK_TCK 2>/dev/null || echo 100)" '{ printf "%.2f", ($14 + $15) / hz }' "/proc/$1/stat"
	echo " $(awk '/^VmRSS/ { print $2 }' "/proc/$1/status")"
}

# shellcheck disable=SC2086 # PIN_ARGS's words are separate arguments
topdown pin $F $PIN_ARGS 2>/dev/null || fail "pin failed"
# With the capabilities topdown-serve.service leaves it (capbound execs topdown).
capbound bpf,perfmon,syslog topdown serve --capture --listen 127.0.0.1:9477 --min-rate 5 --min-events 3 \
	2>"$TD_TMP/serve.err" &
serve_pid=$!
wait_line "$TD_TMP/serve.err" "^topdown: $F: watching for a reason to take over (threshold 80%)"
cost0=$(cpu_rss $serve_pid)

# 1. FAULT_ALLOC takes over (6.1, 5.10: DONTNEED); a pprof window opens; ZAP (MUNMAP)
# takes over.
# shellcheck disable=SC2086 # HOLD's words are separate arguments
# The faults 20 ms apart: a burst that outlasts the trigger's reaction (at full speed
# 40 faults were once over within the tick that switched capture on, on a busy host).
thp_start --munmap-halves $N --wait-usr1 --unmap-gap-ms 50 --fault-gap-ms 20 $HOLD
if [ $F = deferred_split_huge_page ]; then
	# 256 calls at a time: 8 of them, one after another, so that some come after the
	# capture has begun.
	D=8
	held_dontneeds $D
	first=$((PER * D))
else
	first=$N
fi
wait_line "$TD_TMP/serve.err" "^topdown: $F: $R1 has 100.0% of calls (.*threshold 80%): capturing its stacks"
sleep 1.2
timeout 90 wget -q -O "$TD_TMP/prof.gz" "$URL/debug/pprof/topdown?seconds=5&function=$F" &
wget_pid=$!
sleep 0.5
kill -USR1 $thp_pid
if [ $F = deferred_split_huge_page ]; then
	wait_line "$TD_TMP/thp.out" "^thp: faults=0 munmap_halves=$N "
else
	wait $thp_pid || fail "thp failed: $(cat "$TD_TMP/thp.out")"
fi
wait $wget_pid || fail "pprof request failed"
cat "$TD_TMP/serve.err"
grep -q "^topdown: $F: $R2 has 100.0% of calls (.*threshold 80%): moving stack capture from $R1" \
	"$TD_TMP/serve.err" || fail "no switch line for $R2"
scrape
expect_eq "capture_active $R2" "$(metric "topdown_capture_active{function=\"$F\",reason=\"$R2\"}")" 1
expect_eq "capture_active $R1" "$(metric "topdown_capture_active{function=\"$F\",reason=\"$R1\"}")" 0
zap=$(metric "topdown_stacks_total{function=\"$F\",reason=\"$R2\"}")
faults=$(metric "topdown_stacks_total{function=\"$F\",reason=\"$R1\"}")
echo "stacks: $R2 $zap, $R1 $faults"
# Captured, and the background sampler's: at most one a call.
[ "$zap" -gt 0 ] && [ "$zap" -le $((PER * N)) ] || fail "$R2 stacks $zap, want 1..$((PER * N))"
[ "$faults" -gt 0 ] && [ "$faults" -le $first ] || fail "$R1 stacks $faults, want 1..$first"
expect_eq "calls $R2" "$(metric "topdown_calls_total{function=\"$F\",reason=\"$R2\"}")" $((PER * N))
expect_eq "calls $R1" "$(metric "topdown_calls_total{function=\"$F\",reason=\"$R1\"}")" $first
# Each captured reason's calls at the stack gate add up to what became of them
# (read once a second: R1's, captured seconds ago, are there).
for r in $R1 $R2; do
	c=$(metric "topdown_capture_calls_total{function=\"$F\",reason=\"$r\"}")
	[ -n "$c" ] || [ $r = $R2 ] || fail "no topdown_capture_calls_total of $r"
	[ -n "$c" ] || continue
	sum=0
	for o in shown sampled_out rate_capped ringbuf_full not_kept; do
		n=$(metric "topdown_capture_outcomes_total{function=\"$F\",reason=\"$r\",outcome=\"$o\"}")
		[ -n "$n" ] || fail "no $o outcome of $r"
		sum=$((sum + n))
		echo "capture outcome of $r: $o $n"
	done
	expect_eq "capture calls of $r = the sum of their outcomes" "$sum" "$c"
done
# Calls are over (6.1, 5.10: held): the same series in both scrapes.
check_formats "serve --capture" $URL $F
if [ $F = deferred_split_huge_page ]; then
	expect_eq "calls EXIT" "$(metric "topdown_calls_total{function=\"$F\",reason=\"EXIT\"}")" 0
	# shellcheck disable=SC2086 # one pid a word
	kill $thp_pid $held_pids
	# shellcheck disable=SC2086
	wait $thp_pid $held_pids
fi

# 2. The profile, decoded by protoc: its string table and its samples, whose values add
# up to the ZAP stacks /metrics counts (the window held every unmap, and no fault;
# 6.1, 5.10: every half munmap, and no MADV_DONTNEED).
gunzip -c "$TD_TMP/prof.gz" >"$TD_TMP/prof.pb" || fail "the profile is not gzip"
protoc --decode_raw <"$TD_TMP/prof.pb" >"$TD_TMP/prof.txt" || fail "protoc cannot decode the profile"
strings_of() { sed -n 's/^6: "\(.*\)"$/\1/p' "$TD_TMP/prof.txt"; }
for s in calls count function reason comm pid $F $R2 thp $RMAP "$TD_ZAP_WALK"; do
	strings_of | grep -qx "$s" || fail "string table lacks '$s'"
done
strings_of | grep -qx $R1 && fail "the window holds $R1 stacks"
# The samples (field 2): their values, each a packed varint string (C escapes).
samples=$(grep -c '^2 {' "$TD_TMP/prof.txt")
total=$(awk '
	BEGIN { for (i = 32; i < 127; i++) ord[sprintf("%c", i)] = i
		esc["n"] = 10; esc["t"] = 9; esc["r"] = 13; esc["\""] = 34; esc["'\''"] = 39; esc["\\"] = 92 }
	/^2 \{/ { in_s = 1; depth = 1; next }
	in_s && /\{/ { depth++ }
	in_s && /\}/ { depth--; if (depth == 0) in_s = 0; next }
	in_s && depth == 1 && /^  2: / {
		v = $0; sub(/^  2: /, "", v)
		if (v ~ /^"/) {
			v = substr(v, 2, length(v) - 2); n = 0; m = 1; x = 0
			for (i = 1; i <= length(v); i++) {
				c = substr(v, i, 1)
				if (c == "\\") {
					d = substr(v, i + 1, 1)
					if (d ~ /[0-7]/) { b = (substr(v, i + 1, 1) * 64) + (substr(v, i + 2, 1) * 8) + substr(v, i + 3, 1); i += 3 }
					else { b = esc[d]; i++ }
				} else b = ord[c]
				x += (b % 128) * m; m *= 128
				if (b < 128) { sum += x; x = 0; m = 1 }
			}
		} else sum += v
	}
	END { print sum + 0 }' "$TD_TMP/prof.txt")
echo "profile: $samples samples, $total calls; decoded (string table, first sample):"
grep '^6: ' "$TD_TMP/prof.txt" | tr '\n' ' '
echo
sed -n '/^2 {/,/^}/p' "$TD_TMP/prof.txt" | sed -n '1,/^}/p'
echo "profile: $samples samples, $total calls"
[ "$samples" -ge 1 ] || fail "no samples"
expect_eq "profile total = $R2 stacks" "$total" "$zap"

# 3. One reader steers capture: a live run is refused while serve captures.
out=$(topdown $F -d 1 2>&1 >/dev/null)
rc=$?
expect_eq "live run: status" $rc 1
expect_eq "live run: message" "$out" \
	"topdown: $F's stack capture is steered by topdown serve --capture (pid $serve_pid); its stacks are at /debug/pprof/topdown?function=$F, and topdown show reads its counts alongside"

cost1=$(cpu_rss $serve_pid)
echo "serve cost: start (cpu s, rss KiB) $cost0; after the run $cost1"

# 4. Unpinned while serve captures: serve lets go within a second; nothing is left.
topdown unpin $F 2>/dev/null || fail "unpin refused while serve captures"
wait_line "$TD_TMP/serve.err" "^topdown: $F: unpinned: its stack capture stops"
expect_progs "programs left" 0
kill -INT $serve_pid
wait_exit $serve_pid "topdown serve" || fail "serve exited with $?"
expect_eq "pins left" "$(ls -A /sys/fs/bpf/topdown)" ""
exit 0
