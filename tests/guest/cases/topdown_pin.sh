# Always-on tier 1: topdown pin leaves the counting program in bpffs; show, serve and
# topdown FUNC read it; unpin removes everything. Exact counts throughout. The THP
# deferred-split function is deferred_split_folio with its built-in profile (6.12 on),
# or on 6.1 and 5.10 deferred_split_huge_page pinned with deeper-frame rules: its
# calls, 256 per PTE-mapped half of a THP unmapped, are MUNMAP (a half munmap),
# page_remove_rmap (a half MADV_DONTNEED) and EXIT (the other halves at exit); THP
# faults and collapses make none there.
. "$TD_LIB"
need_cmd topdown thp readloop bpftool wget asnobody
need_func vfs_read
split_fn
FN=$TD_SPLIT

F=3 P=2 Q=2 C=2
ROOT=/sys/fs/bpf/topdown
if [ $FN = deferred_split_huge_page ]; then
	PIN_ARGS="--rules $TD_RULES_61"
	# The workloads: the whole mix (no MADV_COLLAPSE: 5.10 has none, and it makes no
	# call here), the reader's (one half munmap), the killed reader's (the same, three
	# times): the stack-on reasons and what the pinned instance counts in the end.
	MIX="--faults $F --munmap-halves $P --dontneed-halves $Q"
	READ="--munmap-halves 1" READ_ON=MUNMAP KILLED_ON=EXIT
else
	PIN_ARGS=
	MIX="--faults $F --munmap-halves $P --dontneed-halves $Q --collapse $C"
	READ="--munmap-halves $P" READ_ON=ZAP KILLED_ON=FAULT_ALLOC
fi

# shown KEY: KEY's number in the last `topdown show --json` line of $SHOWN.
reason_shown() {
	_v=$(echo "$SHOWN" | grep -o "{\"reason\":\"$1\",\"count\":[0-9]*" | sed 's/.*://')
	echo "${_v:-0}"
}
show_json() {
	SHOWN=$(topdown show $FN --json) || fail "show failed"
	echo "show: $SHOWN" | cut -c1-600
}
# watch_bytes: the pinned program's watch key (td_watch, in .bss), "0,0,0,0" while no
# call is sent down its slow path.
watch_bytes() {
	bpftool map dump pinned $ROOT/$FN/bss | grep -A1 '"why"' | tr -d ' \n' |
		sed 's/.*\[//; s/\].*//'
}
# captured: how many reasons the pinned program captures stacks of (ctl.nr_captured in
# .data), 0 for none.
captured() {
	bpftool map dump pinned $ROOT/$FN/data | grep -m 1 '"nr_captured"' | tr -dc 0-9
}

# The cat-able files (BPF iterators): made on 5.19 and later, else the pin says so in
# one line and pins without them.
kmajor=$(uname -r | cut -d. -f1) kminor=$(uname -r | cut -d. -f2)
if [ "$kmajor" -gt 5 ] || { [ "$kmajor" = 5 ] && [ "$kminor" -ge 19 ]; }; then FILES=yes; else FILES=; fi
# check_files WHAT: the reasons and metrics files give show's counts, exactly (the
# last show_json's, which resolved every call site).
check_files() {
	cat $ROOT/$FN/reasons >"$TD_TMP/reasons" || fail "$1: cat reasons failed"
	cat $ROOT/$FN/metrics >"$TD_TMP/metrics.prom" || fail "$1: cat metrics failed"
	echo "--- $ROOT/$FN/reasons ($1)"
	cat "$TD_TMP/reasons"
	echo "--- $ROOT/$FN/metrics ($1)"
	cat "$TD_TMP/metrics.prom"
	echo "---"
	expect_eq "$1: reasons header" "$(head -n 1 "$TD_TMP/reasons")" "$FN: calls per reason since it was pinned"
	pairs=$(echo "$SHOWN" | grep -o '{"reason":"[^"]*","count":[0-9]*' | sed 's/{"reason":"//; s/","count":/ /')
	[ -n "$pairs" ] || fail "$1: no reasons in show's output"
	echo "$pairs" | while read -r reason n; do
		grep -qx "$reason: $n" "$TD_TMP/reasons" ||
			fail "$1: reasons has no '$reason: $n': $(grep "^$reason:" "$TD_TMP/reasons")"
		grep -qx "topdown_calls_total{function=\"$FN\",reason=\"$reason\"} $n" "$TD_TMP/metrics.prom" ||
			fail "$1: metrics has not $reason $n: $(grep "\"$reason\"" "$TD_TMP/metrics.prom")"
	done || exit 1
	expect_eq "$1: reason lines" "$(grep -vc -E '^(caller_not_found|sites_full|stacks_[a-z_]+|unresolved): ' "$TD_TMP/reasons")" \
		"$(($(echo "$pairs" | wc -l) + 1))"
	grep -qx "caller_not_found: 0" "$TD_TMP/reasons" || fail "$1: caller_not_found is not 0"
	grep -qx "sites_full: 0" "$TD_TMP/reasons" || fail "$1: sites_full is not 0"
	grep -q "^unresolved" "$TD_TMP/reasons" && fail "$1: unresolved calls after show"
	grep -qx "topdown_drops_total{function=\"$FN\",cause=\"caller_not_found\"} 0" "$TD_TMP/metrics.prom" ||
		fail "$1: no caller_not_found drops in metrics"
	# Stacks not captured, by cause: as show has them (a reader may have captured).
	for cause in stacks_sampled_out stacks_rate_capped stacks_ringbuf_full; do
		n=$(echo "$SHOWN" | grep -o "\"$cause\":[0-9]*" | head -n 1 | sed 's/.*://')
		[ -n "$n" ] || fail "$1: show has no $cause"
		grep -qx "$cause: $n" "$TD_TMP/reasons" || fail "$1: reasons has no '$cause: $n'"
		grep -qx "topdown_drops_total{function=\"$FN\",cause=\"$cause\"} $n" "$TD_TMP/metrics.prom" ||
			fail "$1: metrics has no $cause $n"
	done
	grep -qx "# TYPE topdown_calls_total counter" "$TD_TMP/metrics.prom" || fail "$1: no TYPE line"
	grep -qx "# HELP topdown_calls_total Calls of the pinned kernel function or tracepoint per reason since it was pinned." \
		"$TD_TMP/metrics.prom" || fail "$1: no HELP line"
	# Prometheus text 0.0.4: comments, or NAME{LABELS} VALUE; no OpenMetrics # EOF.
	bad=$(grep -v -E '^# (HELP|TYPE) [a-z_]+ |^[a-z_]+\{([a-z_]+="[^"]*",?)*\} [0-9]+$' "$TD_TMP/metrics.prom")
	[ -z "$bad" ] || fail "$1: not Prometheus text: $bad"
	# node_exporter's textfile collector reads *.prom files: a symlink gives the name.
	mkdir -p /tmp/textfile && ln -sf $ROOT/$FN/metrics /tmp/textfile/topdown_$FN.prom
	cmp -s /tmp/textfile/topdown_$FN.prom "$TD_TMP/metrics.prom" || fail "$1: the symlink reads otherwise"
	rm -r /tmp/textfile
}
# file_progs: the pinned files' iterator programs loaded.
file_progs() {
	bpftool prog show 2>/dev/null | grep -c -E ' name (reasons_file|metrics_file) '
}

expect_eq "nothing pinned" "$(topdown show)" \
	"nothing is pinned (pin a function with topdown pin FUNC; pins do not survive a reboot)"

# 1. Pinned, then the workload with no topdown process alive: exact per reason.
# shellcheck disable=SC2086 # PIN_ARGS's words are separate arguments
topdown pin $FN $PIN_ARGS 2>"$TD_TMP/pin.err" || fail "pin failed: $(cat "$TD_TMP/pin.err")"
cat "$TD_TMP/pin.err"
[ -z "$(pidof topdown)" ] || fail "a topdown process is still running"
expect_eq "pin dir mode" "$(stat -c %a $ROOT/$FN)" 700
expect_eq "pin modes" "$(stat -c %a $ROOT/$FN/* | sort -u)" 600
if [ "$FILES" ]; then
	[ -f $ROOT/$FN/reasons ] && [ -f $ROOT/$FN/metrics ] || fail "no reasons or metrics file: $(ls $ROOT/$FN)"
	expect_eq "file iterator programs" "$(file_progs)" 2
	grep -q "without its reasons" "$TD_TMP/pin.err" && fail "pin: $(cat "$TD_TMP/pin.err")"
else
	expect_eq "pin's line on the files" "$(grep -c "^topdown: $FN: pinned without its reasons and metrics files: they need Linux 5.19 or later (BPF iterators with bpf_loop), and this is $(uname -r)\$" "$TD_TMP/pin.err")" 1
	[ ! -e $ROOT/$FN/reasons ] && [ ! -e $ROOT/$FN/metrics ] || fail "files made on $(uname -r)"
fi
# shellcheck disable=SC2086
thp $MIX >/dev/null || fail "thp failed"
if [ "$FILES" ]; then
	# Before any reader: the programs named every new call site themselves (5.17
	# on; every kernel with the files), so the file is exact and nothing is
	# unresolved, with busybox's cat and through node_exporter's collector.
	cat $ROOT/$FN/reasons | tee "$TD_TMP/alone"
	sum=$(sed -n 's/^[^ ]*: \([0-9]*\)$/\1/p; s/^unresolved: \([0-9]*\) .*/\1/p' $ROOT/$FN/reasons |
		awk '{s += $1} END {print s}')
	grep -q "^unresolved" "$TD_TMP/alone" && fail "calls unresolved with no reader: $(grep "^unresolved" "$TD_TMP/alone")"
	alone() { sed -n "s/^$1: //p" "$TD_TMP/alone"; }
	if [ $FN = deferred_split_huge_page ]; then
		expect_eq "no reader: MUNMAP" "$(alone MUNMAP)" $((256 * P))
		expect_eq "no reader: page_remove_rmap" "$(alone page_remove_rmap)" $((256 * Q))
		expect_eq "no reader: EXIT" "$(alone EXIT)" $((256 * (P + Q)))
	else
		expect_eq "no reader: FAULT_ALLOC" "$(alone FAULT_ALLOC)" $((F + P + Q))
		expect_eq "no reader: ZAP" "$(alone ZAP)" $((P + Q))
		expect_eq "no reader: MADV_COLLAPSE" "$(alone MADV_COLLAPSE)" $C
	fi
fi
show_json
if [ $FN = deferred_split_huge_page ]; then
	expect_eq "pinned: MUNMAP" "$(reason_shown MUNMAP)" $((256 * P))
	expect_eq "pinned: page_remove_rmap" "$(reason_shown page_remove_rmap)" $((256 * Q))
	expect_eq "pinned: EXIT" "$(reason_shown EXIT)" $((256 * (P + Q)))
	total=$((512 * (P + Q)))
	# EXIT has half of the calls: the top reason, below the 80% threshold, so not hot.
	top=EXIT share=50
else
	expect_eq "pinned: FAULT_ALLOC" "$(reason_shown FAULT_ALLOC)" $((F + P + Q))
	expect_eq "pinned: ZAP" "$(reason_shown ZAP)" $((P + Q))
	expect_eq "pinned: MADV_COLLAPSE" "$(reason_shown MADV_COLLAPSE)" $C
	total=$((F + 2 * P + 2 * Q + C))
	# FAULT_ALLOC has 7 of 13 calls: the top reason, below the 80% threshold, so not hot.
	top=FAULT_ALLOC share=53.846
fi
expect_eq "pinned: total" "$(echo "$SHOWN" | grep -o '"total":[0-9]*' | sed 's/.*://')" $total
expect_eq "pinned: top reason" "$(echo "$SHOWN" | grep -o '"top_reason":"[A-Z_a-z]*"' | sed 's/.*:"//; s/"//')" $top
echo "$SHOWN" | grep -q "\"hot_reason\":null,\"top_reason\":\"$top\",\"top_share\":$share,\"threshold\":80," ||
	fail "pinned: hot reason not null below the threshold"
topdown show | grep -q "^$FN: $total calls in .* since it was pinned" || fail "no text show: $(topdown show)"
if [ "$FILES" ]; then
	expect_eq "reasons before a reader: all calls" "$sum" $total
	check_files "pinned"
fi

# 2. Bad input: one line, nothing changed.
expect_fail 2 "$FN is already pinned" pin $FN
expect_fail 2 "vfs_read is not pinned" show vfs_read
expect_fail 2 "vfs_read is not pinned" unpin vfs_read
expect_fail 2 "$FN is pinned, with its mode, profile and stack settings fixed by topdown pin: leave out --kprobe" $FN --kprobe
mkdir $ROOT/bogus
expect_fail 1 "bogus's pinned instance cannot be read by this topdown .*: it has no counts; re-pin it: 'topdown pin --sync' if a declaration pins it (its counts restart), else 'topdown unpin bogus' and pin it again" show bogus
topdown unpin bogus 2>/dev/null || fail "unpin of a broken pin failed"
[ ! -e $ROOT/bogus ] || fail "bogus is still there"
out=$(asnobody topdown show 2>&1) && fail "show as nobody succeeded: $out"
echo "$out" | grep -q "not enough privileges" || fail "show as nobody: $out"

# 2b. FUNC is a kernel symbol, never a path: refused as a usage error (exit 2, one
# line) before anything is made; nothing outside topdown's root is touched.
mkdir -p /tmp/rv/victim && echo keep >/tmp/rv/victim/file
bpffs_before=$(ls -A /sys/fs/bpf)
locks_before=$(ls -A /run/topdown 2>/dev/null)
for args in "unpin /tmp/rv/victim" "unpin .." "unpin ../topdown" "show /etc" "show ." \
	"pin /tmp/rv/victim" "/tmp/rv/victim -d 1" "trace .. -d 1" "unpin vfs_read/.." "show a:b"; do
	# shellcheck disable=SC2086
	topdown $args >"$TD_TMP/out" 2>"$TD_TMP/err"
	rc=$?
	echo "+ topdown $args: $(cat "$TD_TMP/err")"
	expect_eq "exit status of topdown $args" $rc 2
	expect_eq "stderr lines of topdown $args" "$(wc -l <"$TD_TMP/err")" 1
	grep -q "not a kernel function name: " "$TD_TMP/err" || fail "topdown $args: $(cat "$TD_TMP/err")"
done
expect_eq "the victim's file" "$(cat /tmp/rv/victim/file)" keep
expect_eq "beside the victim" "$(ls -A /tmp/rv)" victim
expect_eq "in /sys/fs/bpf" "$(ls -A /sys/fs/bpf)" "$bpffs_before"
# (Locks of functions read or unpinned before, here or by other cases, stay, as they do.)
expect_eq "locks made" "$(ls -A /run/topdown 2>/dev/null)" "$locks_before"
# A symlink under the root is no pin: not listed, not followed, not removed.
ln -s /tmp/rv/victim $ROOT/victim
expect_fail 2 "victim is not pinned" unpin victim
expect_fail 2 "victim is not pinned" show victim
topdown show | grep -q victim && fail "show lists a symlink: $(topdown show)"
# A pin directory with a symlink and a directory planted in it: topdown's pins are
# removed (the program is detached), the rest is left and named.
topdown pin vfs_read --no-profile 2>/dev/null || fail "pin vfs_read failed"
progs=$(td_progs)
ln -s /tmp/rv/victim $ROOT/vfs_read/evil
ln -s /tmp/rv/victim/file $ROOT/vfs_read/evil_file
mkdir $ROOT/vfs_read/foreign
expect_fail 1 "^topdown: left $ROOT/vfs_read in place: it holds evil, evil_file, foreign, which topdown did not make; topdown's own pins in it are removed\$" unpin vfs_read
expect_progs "programs after unpin with foreign entries" $((progs - 1))
expect_eq "left in the pin directory" "$(ls -A $ROOT/vfs_read | tr '\n' ' ')" "evil evil_file foreign "
expect_eq "the victim's file after unpin" "$(cat /tmp/rv/victim/file)" keep
expect_eq "beside the victim after unpin" "$(ls -A /tmp/rv)" victim
rm $ROOT/vfs_read/evil $ROOT/vfs_read/evil_file $ROOT/victim
rmdir $ROOT/vfs_read/foreign $ROOT/vfs_read

# 3. A reader: counts from its start, exact; a second reader is refused; SIGKILL
# leaves the pinned instance counting, exactly.
td_start $FN -i 1 --stack-on $READ_ON
grep -q "reading pinned $FN with fentry" "$TD_ERR" || fail "header: $(cat "$TD_ERR")"
expect_fail 1 "$FN's pinned instance is being read by topdown (pid $TD_PID)" $FN -d 1
# shellcheck disable=SC2086
thp $READ >/dev/null || fail "thp failed"
td_stop INT
if [ $FN = deferred_split_huge_page ]; then
	expect_eq "reader: MUNMAP" "$(reason_count MUNMAP)" 256
	expect_eq "reader: EXIT" "$(reason_count EXIT)" 256
	expect_eq "reader: stacks of MUNMAP" "$(summary_num stacks_captured)" 256
	expect_eq "reader: MUNMAP's calls at the stack gate" "$(gate_num MUNMAP calls)" 256
	KILLED="--munmap-halves 1"
else
	expect_eq "reader: ZAP" "$(reason_count ZAP)" $P
	expect_eq "reader: FAULT_ALLOC" "$(reason_count FAULT_ALLOC)" $P
	expect_eq "reader: stacks of ZAP" "$(summary_num stacks_captured)" $P
	expect_eq "reader: ZAP's calls at the stack gate" "$(gate_num ZAP calls)" $P
	KILLED="--faults $F"
fi
td_start $FN -i 1 --stack-on $KILLED_ON
# shellcheck disable=SC2086
thp $KILLED >/dev/null || fail "thp failed"
killed_at=$(uptime_cs)
td_stop KILL
# The killed reader left capture on (its reason's cached sites flagged, so their calls
# reach the stack gate; no byte of the watch key set), exact still.
[ "$(captured)" = 1 ] || fail "after SIGKILL: no stack reason left set"
# (The own byte is the reader's while it was awake: killed then, it stays set.)
expect_eq "after SIGKILL: the watch key's stacks byte" "$(watch_bytes | cut -d, -f2)" 0
# shellcheck disable=SC2086
thp $KILLED >/dev/null || fail "thp failed"
# Within the lease (3 s from the reader's last wake-up, at most 1 s before the kill)
# the key stays. A host that stalls the guest for seconds can end the lease first:
# then the check says so instead of failing.
since_kill=$(($(uptime_cs) - killed_at))
if [ $since_kill -lt 150 ]; then
	[ "$(captured)" = 1 ] || fail "after SIGKILL, within the lease: no stack reason"
else
	echo "note: the within-lease check is left out: the kill was $since_kill cs ago"
fi
echo "kill to the within-lease check: $since_kill cs"
# Past the reader's lease (3 s), the first captured call puts its state back: no
# topdown process runs, and the program is back on its common path (the flags are
# cleared as their sites' calls come).
sleep 4
# shellcheck disable=SC2086
thp $KILLED >/dev/null || fail "thp failed"
expect_eq "after SIGKILL, past the lease: reasons captured" "$(captured)" 0
expect_eq "after SIGKILL, past the lease: watch key" "$(watch_bytes)" "0,0,0,0"
show_json
if [ $FN = deferred_split_huge_page ]; then
	# The mix, the reader's half munmap and the killed reader's three.
	expect_eq "after SIGKILL: MUNMAP" "$(reason_shown MUNMAP)" $((256 * (P + 4)))
	expect_eq "after SIGKILL: EXIT" "$(reason_shown EXIT)" $((256 * (P + Q + 4)))
	expect_eq "after SIGKILL: page_remove_rmap" "$(reason_shown page_remove_rmap)" $((256 * Q))
	M_ZAP=MUNMAP M_ZAP_N=$((256 * (P + 4))) M_2=EXIT M_2_N=$((256 * (P + Q + 4)))
else
	expect_eq "after SIGKILL: FAULT_ALLOC" "$(reason_shown FAULT_ALLOC)" $((F + P + Q + P + 3 * F))
	expect_eq "after SIGKILL: ZAP" "$(reason_shown ZAP)" $((P + Q + P))
	M_ZAP=ZAP M_ZAP_N=$((P + Q + P)) M_2=MADV_COLLAPSE M_2_N=$C
fi
expect_eq "after show: watch key" "$(watch_bytes)" "0,0,0,0"
[ "$FILES" ] && check_files "after the readers"
# The killed reader's lock is gone: a new reader starts.
td_start $FN -d 1
td_stop INT

# 4. serve: the same counters over HTTP, OpenMetrics text; a port in use is refused.
topdown serve --listen 127.0.0.1:9476 2>"$TD_TMP/serve.err" &
serve_pid=$!
wait_line "$TD_TMP/serve.err" "serving http://127.0.0.1:9476/metrics"
# A pinned function that cannot be read (a broken pin directory) fails its own series,
# not the scrape.
mkdir $ROOT/bogus
# Asked for OpenMetrics, as Prometheus asks (the text format is checked by topdown_sync).
http_get http://127.0.0.1:9476/metrics "$TD_TMP/metrics" --header "Accept: application/openmetrics-text;version=1.0.0" ||
	fail "scrape failed"
rmdir $ROOT/bogus
head -5 "$TD_TMP/metrics"
grep -qx 'topdown_read_error{function="bogus"} 1' "$TD_TMP/metrics" || fail "no read error for bogus"
grep -q "topdown: scrape: cannot read pinned bogus: bogus's pinned instance cannot be read" "$TD_TMP/serve.err" ||
	fail "no log line for bogus: $(cat "$TD_TMP/serve.err")"
grep -qx "topdown_calls_total{function=\"$FN\",reason=\"$M_ZAP\"} $M_ZAP_N" "$TD_TMP/metrics" ||
	fail "no exact $M_ZAP counter: $(grep "$M_ZAP" "$TD_TMP/metrics")"
grep -qx "topdown_calls_total{function=\"$FN\",reason=\"$M_2\"} $M_2_N" "$TD_TMP/metrics" ||
	fail "no exact $M_2 counter"
grep -q "^topdown_info{function=\"$FN\",mode=\"fentry\"" "$TD_TMP/metrics" || fail "no info metric"
grep -q "^topdown_pinned_timestamp_seconds{function=\"$FN\"} [0-9]" "$TD_TMP/metrics" || fail "no timestamp"
expect_eq "metrics end" "$(tail -n 1 "$TD_TMP/metrics")" "# EOF"
# Every line: a comment (# HELP, # TYPE, # EOF) or NAME{LABELS} VALUE.
bad=$(grep -v -E '^# (HELP|TYPE) [a-z_]+ |^# EOF$|^[a-z_]+\{([a-z_]+="[^"]*",?)*\} [0-9.e+-]+$' "$TD_TMP/metrics")
[ -z "$bad" ] || fail "not OpenMetrics text: $bad"
expect_fail 1 "cannot listen on 127.0.0.1:9476: .*pick another address with --listen ADDR:PORT" serve --listen 127.0.0.1:9476
kill -INT $serve_pid
wait_exit $serve_pid "topdown serve" || fail "serve exited with $?"

# 5. unpin: no topdown program, link, map or pin remains (maps are freed by a kernel
# workqueue: give them a moment).
topdown unpin $FN || fail "unpin failed"
[ ! -e $ROOT/$FN ] || fail "the pin directory is still there"
expect_progs "programs left" 0
expect_settled "file iterator programs left" 0 file_progs
expect_eq "links left" "$(bpftool link show 2>/dev/null | grep -c ' prog ')" 0
expect_maps "maps left" 0

# 6. A kprobe pin of vfs_read, and unpin --all. A kernel without kprobe links
# (BPF_LINK_TYPE_PERF_EVENT, Linux 5.15; 5.10 has none) refuses it in one line,
# leaving nothing: there the fentry pin is the one unpin --all removes.
if kprobe_links; then
	pin_mode=kprobe
	topdown pin vfs_read --kprobe --no-profile 2>/dev/null || fail "kprobe pin failed"
else
	expect_fail 1 "kprobe links need kernel 5.15 or later" pin vfs_read --kprobe --no-profile
	expect_progs "programs left after a refused kprobe pin" 0
	expect_eq "pins left after a refused kprobe pin" "$(ls -A $ROOT)" ""
	pin_mode=fentry
	topdown pin vfs_read --no-profile 2>/dev/null || fail "fentry pin failed"
fi
readloop 1000 >/dev/null || fail "readloop failed"
SHOWN=$(topdown show vfs_read --json)
[ "$(reason_shown ksys_read)" -ge 1000 ] || fail "$pin_mode pin: ksys_read $(reason_shown ksys_read) < 1000"
echo "$SHOWN" | grep -q "\"mode\":\"$pin_mode\"" || fail "$pin_mode pin: $SHOWN"
# A symlink named like a pin killed halfway is not followed by unpin --all.
ln -s /tmp/rv $ROOT/pinning-victim-1
topdown unpin --all 2>/dev/null || fail "unpin --all failed"
expect_progs "programs left after unpin --all" 0
expect_eq "the victim's file after unpin --all" "$(cat /tmp/rv/victim/file)" keep
rm $ROOT/pinning-victim-1

# 7. bpffs: mounted by pin if it is not; a read-only one is a clear error, leaving nothing.
umount /sys/fs/bpf
topdown pin vfs_read --no-profile 2>/dev/null || fail "pin without bpffs mounted failed"
topdown unpin vfs_read 2>/dev/null || fail "unpin failed"
mount -o remount,ro /sys/fs/bpf
expect_fail 1 "cannot" pin vfs_read --no-profile
mount -o remount,rw /sys/fs/bpf
expect_progs "programs left after a failed pin" 0
expect_eq "pins left after a failed pin" "$(ls -A $ROOT)" ""
exit 0
