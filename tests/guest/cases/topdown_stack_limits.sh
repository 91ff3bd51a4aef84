# Tier 2 under a hot workload: the rate cap holds and what it skipped is counted, so
# matched = sent + capped + sampled out + ring buffer full, exactly; --sample keeps
# about 1 in N; -U adds the workload's own user frames, by name; at --max-rate 100000
# with a read loop on every CPU, faster than the reader keeps up, every call is still a
# stack shown or a counted drop.
. "$TD_LIB"
need_cmd topdown readloop
need_func vfs_read ksys_read

# 1. Rate cap: at most --max-rate stacks a second (split over the CPUs).
RATE=20
td_start vfs_read --no-profile --stack-on ksys_read --max-rate $RATE
t0=$(date +%s)
readloop 20000 || fail "readloop failed"
# A refill of the budget with no reads to spend it on (the bound counts the run's whole
# length): a stretch of time, not an event.
sleep 1
td_stop INT
secs=$(($(date +%s) - t0 + 2))
matched=$(summary_num stacks_matched)
sent=$(summary_num stacks_sent)
capped=$(summary_num stacks_rate_capped)
full=$(summary_num stacks_ringbuf_full)
sampled=$(summary_num stacks_sampled_out)
echo "matched=$matched sent=$sent capped=$capped full=$full sampled=$sampled secs<=$secs"
[ "$(reason_count ksys_read)" -ge 20000 ] || fail "fewer than 20000 reads counted"
[ "$matched" -ge 20000 ] || fail "stack program saw $matched calls"
expect_eq "matched = sent + capped + full + sampled" "$matched" $((sent + capped + full + sampled))
[ "$capped" -gt 0 ] || fail "nothing was rate capped"
[ "$sent" -le $((RATE * secs)) ] || fail "sent $sent stacks in at most $secs s, cap $RATE/s"
expect_eq "captured = sent" "$(summary_num stacks_captured)" "$sent"

# 2. --sample 10: 1 in 10 per CPU.
td_start vfs_read --no-profile --stack-on ksys_read --sample 10 --max-rate 1000000
readloop 3000 || fail "readloop failed"
td_stop INT
matched=$(summary_num stacks_matched)
sent=$(summary_num stacks_sent)
sampled=$(summary_num stacks_sampled_out)
echo "matched=$matched sent=$sent sampled=$sampled"
expect_eq "sample: matched = sent + sampled" "$matched" $((sent + sampled))
lo=$((matched / 10)) hi=$((matched / 10 + $(nproc)))
[ "$sent" -ge $lo ] && [ "$sent" -le $hi ] || fail "sample: sent $sent, want $lo..$hi"

# 3. -U: user frames of the workload, by name (its libc read(), then main()); in the
# folded stacks and the flame graph a "--" frame separates them from the kernel's.
td_start vfs_read --no-profile --stack-on ksys_read -U --max-rate 1000 \
	--folded "$TD_TMP/u.folded" --flamegraph "$TD_TMP/u.svg"
readloop 200000 || fail "readloop failed"
td_stop INT
grep -q '^ksys_read;\([^;]*;\)*main+0x[0-9a-f]*;\([^;]*;\)*--;\([^;]*;\)*ksys_read+0x[0-9a-f]*;vfs_read [0-9]*$' "$TD_TMP/u.folded" ||
	{ cat "$TD_TMP/u.folded"; fail "-U: no user frames, then --, then kernel frames in the folded stacks"; }
grep -q '<title>-- ([0-9,]* stacks' "$TD_TMP/u.svg" || fail "-U: no -- frame in the flame graph"
# x86_64: libc's __read, then main (read() sets up no frame, so the frame pointer names
# read_one's caller); arm64: read, read_one (from the link register), main.
echo "$TD_SUMMARY" | grep -Eq '"--","(__)?read\+0x[0-9a-f]*",("read_one\+0x[0-9a-f]*",)?"main\+0x[0-9a-f]*"' ||
	fail "-U: no read <- main user frames"

# 3b. User frames outlive their process: topdown is stopped while readloop makes its
# reads and exits, so its maps are gone when the stacks are read. The kernel gave each
# frame as a build ID and an offset in the file; readloop, found by its name along PATH
# and checked by its build ID, names them (from its maps they would be bare addresses).
td_start vfs_read --no-profile --stack-on ksys_read -U --max-rate 1000 --folded "$TD_TMP/g.folded"
kill -STOP "$TD_PID"
readloop 2000 >/dev/null || fail "readloop failed"
kill -CONT "$TD_PID"
td_stop INT
grep -c '^ksys_read;' "$TD_TMP/g.folded" | sed 's/^/gone: folded stacks of ksys_read: /'
grep -q '^ksys_read;\([^;]*;\)*main+0x[0-9a-f]*;\([^;]*;\)*--;\([^;]*;\)*ksys_read+0x[0-9a-f]*;vfs_read [0-9]*$' "$TD_TMP/g.folded" ||
	{ cat "$TD_TMP/g.folded"; fail "gone: readloop's frames are not named after it exited"; }

# 4. Stacks faster than the reader takes them: --max-rate 100000 and a read loop on
# every CPU. Every call while captured is a stack shown or a drop counted by cause
# (td_stop's gates_hold), a full ring buffer among them, and nothing else; prints the
# figures and topdown's CPU time. Then the same at the default rate (1000 a second),
# where the ring buffer (4 MiB: about 3,800 kernel stacks) is printed not to fill.
for rate in 100000 default; do
	args="--max-rate $rate"
	[ $rate != default ] || args=
	# shellcheck disable=SC2086 # args's words are separate arguments
	td_start vfs_read --no-profile --stack-on ksys_read $args
	t0=$(cpu_ticks "$TD_PID") s0=$(uptime_cs)
	pids=
	for c in $(seq 0 $(($(nproc) - 1))); do
		taskset -c "$c" readloop 50000 >/dev/null 2>&1 &
		pids="$pids $!"
	done
	for p in $pids; do wait "$p" || fail "readloop on a CPU failed"; done
	t1=$(cpu_ticks "$TD_PID") s1=$(uptime_cs)
	td_stop INT
	calls=$(gate_num ksys_read calls) shown=$(gate_num ksys_read shown)
	[ "$calls" -ge $((50000 * $(nproc))) ] || fail "rate $rate: $calls calls while captured, fewer than the reads"
	[ "$shown" -gt 0 ] || fail "rate $rate: no stack shown"
	awk -v r=$rate -v c="$calls" -v s="$shown" -v f="$(gate_num ksys_read ringbuf_full)" \
		-v k="$(gate_num ksys_read rate_capped)" -v t=$((t1 - t0)) -v hz="$TD_HZ" \
		-v w=$((s1 - s0 + 1)) -v n="$(nproc)" 'BEGIN {
		printf "rate %s: %d calls while captured in %.2f s on %d CPUs: %d stacks shown (%.0f a second), %d ring buffer full (%.1f%%), %d over the rate cap; topdown took %.2f s of CPU (%.0f%% of one)\n",
			r, c, w / 100, n, s, s * 100 / w, f, f * 100 / c, k, t / hz, t * 100 / hz / (w / 100) }'
done
exit 0
