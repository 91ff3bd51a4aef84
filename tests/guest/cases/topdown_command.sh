# -c CMD and -- CMD ARGS, as bpftrace -c and perf record -- CMD: the command runs once
# the program counts, its calls and its children's are counted (a cgroup of its own)
# from its first instruction, and the run ends when it exits. Exact counts:
# - "-- readloop 500": a static program that makes exactly 500 reads from its first
#   instruction (no loader), so vfs_read counts 500 from ksys_read, and nothing else;
# - "-c 'sleeps 30 5; sleeps 20 5'": the shell's two children, 50 clock_nanosleep calls;
# then -d ending a command that still runs, a command not found, -c with -p; after each,
# nothing of topdown's left: no program, no cgroup, no process.
. "$TD_LIB"
need_cmd topdown readloop sleeps
[ -f /sys/fs/cgroup/cgroup.controllers ] || skip "no cgroup v2 at /sys/fs/cgroup"

left_behind() {
	expect_progs "$1: programs" 0
	expect_eq "$1: cgroups left" "$(ls -d /sys/fs/cgroup/topdown-c-* 2>/dev/null | wc -l)" 0
}

if ktext vfs_read; then
	topdown vfs_read --no-profile --json -- readloop 500 >"$TD_TMP/r.out" 2>"$TD_TMP/r.err"
	expect_eq "-- readloop 500: exit status" $? 0
	TD_SUMMARY=$(grep '"type":"summary"' "$TD_TMP/r.out")
	expect_eq "-- readloop 500: calls" "$(summary_num total)" 500
	expect_eq "-- readloop 500: ksys_read" "$(reason_count ksys_read)" 500
	grep -q "^readloop: reads=500" "$TD_TMP/r.out" || fail "readloop's output: $(cat "$TD_TMP/r.out")"
	grep -q "the command (pid [0-9]*) exited with status 0" "$TD_TMP/r.err" || fail "no exit line: $(cat "$TD_TMP/r.err")"
	left_behind "-- readloop"
fi

topdown t:syscalls:sys_enter_clock_nanosleep --json -c "sleeps 30 5; sleeps 20 5" >"$TD_TMP/s.out" 2>"$TD_TMP/s.err"
expect_eq "-c 'sleeps; sleeps': exit status" $? 0
TD_SUMMARY=$(grep '"type":"summary"' "$TD_TMP/s.out")
expect_eq "-c 'sleeps; sleeps': calls of its two children" "$(summary_num total)" 50
grep -q "counting only calls in cgroup /sys/fs/cgroup/topdown-c-" "$TD_TMP/s.err" || fail "no cgroup line: $(cat "$TD_TMP/s.err")"
left_behind "-c 'sleeps; sleeps'"

# -d ends the run first: the command is told to end, and nothing stays.
topdown t:syscalls:sys_enter_clock_nanosleep -q -d 1 -- sleeps 1000 5 >"$TD_TMP/d.out" 2>"$TD_TMP/d.err"
expect_eq "-d 1 -- sleeps 1000: exit status" $? 0
grep -q "still runs as the run ends: sent SIGTERM" "$TD_TMP/d.err" || fail "no SIGTERM line: $(cat "$TD_TMP/d.err")"
sleep 0.2
expect_eq "-d 1: sleeps still running" "$(grep -lx sleeps /proc/[0-9]*/comm 2>/dev/null | wc -l)" 0
left_behind "-d 1"

# Bad input: one line, exit status 2, nothing loaded.
for bad in "-- nosuchprog" "-c true -p 1"; do
	# shellcheck disable=SC2086
	topdown t:syscalls:sys_enter_clock_nanosleep $bad >"$TD_TMP/bad.out" 2>"$TD_TMP/bad.err"
	expect_eq "$bad: exit status" $? 2
	expect_eq "$bad: lines" "$(wc -l <"$TD_TMP/bad.err")" 1
	echo "ok: $bad: $(cat "$TD_TMP/bad.err")"
	left_behind "$bad"
done
exit 0
