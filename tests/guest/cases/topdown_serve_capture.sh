# topdown serve --capture: the trigger of a live run on a pinned function with no
# terminal. THP faults make FAULT_ALLOC take over, then half-unmaps move capture to ZAP;
# /metrics says which reason is captured and how many stacks; the pprof endpoint returns
# the window's ZAP stacks, checked with an independent decoder (protoc --decode_raw); a
# live topdown FUNC is refused while serve steers capture; unpin is not, and serve lets
# go of the instance, leaving nothing behind. Prints serve's CPU time and memory.
. "$TD_LIB"
need_cmd topdown thp wget protoc gunzip bpftool capbound
need_func deferred_split_folio
thp_callers

N=40
F=deferred_split_folio
URL=http://127.0.0.1:9477
scrape() {
	wget -q -O "$TD_TMP/metrics" $URL/metrics || fail "scrape failed"
}
metric() {
	grep "^$1 " "$TD_TMP/metrics" | sed 's/.* //'
}
# cpu_rss PID: CPU seconds (user + system) and resident KiB of PID.
cpu_rss() {
	awk -v hz="$(getconf CLK_TCK 2>/dev/null || echo 100)" '{ printf "%.2f", ($14 + $15) / hz }' "/proc/$1/stat"
	echo " $(awk '/^VmRSS/ { print $2 }' "/proc/$1/status")"
}

topdown pin $F 2>/dev/null || fail "pin failed"
# With the capabilities topdown-serve.service leaves it (capbound execs topdown).
capbound bpf,perfmon,syslog topdown serve --capture --listen 127.0.0.1:9477 --min-rate 5 --min-events 3 \
	2>"$TD_TMP/serve.err" &
serve_pid=$!
wait_line "$TD_TMP/serve.err" "^topdown: $F: watching for a reason to take over (threshold 80%)"
cost0=$(cpu_rss $serve_pid)

# 1. FAULT_ALLOC takes over; a pprof window opens; ZAP takes over.
thp_start --munmap-halves $N --wait-usr1 --unmap-gap-ms 50
wait_line "$TD_TMP/serve.err" "^topdown: $F: FAULT_ALLOC has 100.0% of calls (.*threshold 80%): capturing its stacks"
sleep 1.2
wget -q -O "$TD_TMP/prof.gz" "$URL/debug/pprof/topdown?seconds=5&function=$F" &
wget_pid=$!
sleep 0.5
kill -USR1 $thp_pid
wait $thp_pid || fail "thp failed: $(cat "$TD_TMP/thp.out")"
wait $wget_pid || fail "pprof request failed"
cat "$TD_TMP/serve.err"
grep -q "^topdown: $F: ZAP has 100.0% of calls (.*threshold 80%): moving stack capture from FAULT_ALLOC" \
	"$TD_TMP/serve.err" || fail "no switch line for ZAP"
scrape
expect_eq "capture_active ZAP" "$(metric "topdown_capture_active{function=\"$F\",reason=\"ZAP\"}")" 1
expect_eq "capture_active FAULT_ALLOC" "$(metric "topdown_capture_active{function=\"$F\",reason=\"FAULT_ALLOC\"}")" 0
zap=$(metric "topdown_stacks_total{function=\"$F\",reason=\"ZAP\"}")
faults=$(metric "topdown_stacks_total{function=\"$F\",reason=\"FAULT_ALLOC\"}")
echo "stacks: ZAP $zap, FAULT_ALLOC $faults"
[ "$zap" -gt 0 ] && [ "$zap" -lt $N ] || fail "ZAP stacks $zap, want 1..$((N - 1))"
[ "$faults" -gt 0 ] && [ "$faults" -le $N ] || fail "FAULT_ALLOC stacks $faults, want 1..$N"
expect_eq "calls ZAP" "$(metric "topdown_calls_total{function=\"$F\",reason=\"ZAP\"}")" $N

# 2. The profile, decoded by protoc: its string table and its samples, whose values add
# up to the ZAP stacks /metrics counts (the window held every unmap, and no fault).
gunzip -c "$TD_TMP/prof.gz" >"$TD_TMP/prof.pb" || fail "the profile is not gzip"
protoc --decode_raw <"$TD_TMP/prof.pb" >"$TD_TMP/prof.txt" || fail "protoc cannot decode the profile"
strings_of() { sed -n 's/^6: "\(.*\)"$/\1/p' "$TD_TMP/prof.txt"; }
for s in calls count function reason comm pid $F ZAP thp folio_remove_rmap_ptes "$TD_ZAP_WALK"; do
	strings_of | grep -qx "$s" || fail "string table lacks '$s'"
done
strings_of | grep -qx FAULT_ALLOC && fail "the window holds FAULT_ALLOC stacks"
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
expect_eq "profile total = ZAP stacks" "$total" "$zap"

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
i=0
while [ "$(td_progs)" != 0 ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
expect_eq "programs left" "$(td_progs)" 0
kill -INT $serve_pid
wait $serve_pid || fail "serve exited with $?"
expect_eq "pins left" "$(ls -A /sys/fs/bpf/topdown)" ""
exit 0
