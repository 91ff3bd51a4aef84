# Caller for caller, against the kernel's own tracer: kfree (dozens of callers) with
# --no-profile, a reason per caller function, counted by topdown -p for one process that
# goes through many kernel paths (tests/workloads/syscalls.c: files, pipes, sockets,
# epoll, signalfd, inotify, memfd, SysV IPC ...; no fork, no thread), and at the same
# time by ftrace's function tracer limited to that pid. Both filter on the task that
# runs (interrupts included), and the process makes no call while either is being set
# up, so every caller's count is the same in both; clone suffixes (.isra.0, .cold) are
# folded as topdown folds them. A call topdown's program skipped (the kernel's
# recursion check: an interrupt's kfree while the program ran) is counted as a
# recursion miss: those are the only calls it may lack. The kernel counts a miss
# before the program's pid filter, so other tasks' skipped calls are misses too
# (16 on 7.3 in a run that lacked none): the misses bound what it lacks.
# ftrace names the function its return address lies in. topdown names a tail call
# after the function that jumped (its "(tail call)" and "-> indirect" rows, checked
# against the code in topdown_tailcall): /proc/kcore is masked here, so that it names
# every call as ftrace does, by the return address alone.
. "$TD_LIB"
need_cmd topdown syscalls
need_func kfree
T=/sys/kernel/tracing
if [ ! -w $T/set_ftrace_filter ] || ! grep -qx kfree $T/available_filter_functions; then
	skip "ftrace cannot trace kfree here"
fi

# Without kernel text to read, topdown names callers by the return address (and says so).
mount --bind /dev/null /proc/kcore || fail "cannot mask /proc/kcore"
trap 'umount /proc/kcore 2>/dev/null; kill -USR1 $sc 2>/dev/null; ftrace_reset' EXIT
# Loopback, for the TCP and UDP paths (left out, and named, if it cannot be had).
ip link set lo up 2>/dev/null
syscalls 3 "$TD_TMP/sc" >"$TD_TMP/sc.out" 2>"$TD_TMP/sc.err" &
sc=$!
wait_line "$TD_TMP/sc.out" "syscalls: ready"
td_start kfree --no-profile --no-auto --max-reasons 253 -p $sc
wait_line "$TD_ERR" "^topdown: notice: /proc/kcore: .*counted under the caller's caller"
ftrace_on kfree $sc || fail "cannot trace kfree for pid $sc with ftrace"
kill -USR1 $sc
wait_line "$TD_TMP/sc.out" "syscalls: done"
ftrace_off kfree >"$TD_TMP/ftrace.out"
td_stop
kill -USR1 $sc
wait_exit $sc syscalls || fail "syscalls exited with $?"
cat "$TD_TMP/sc.err"
lost=$(sed -n 's/^ftrace: lost \([0-9]*\) events.*/\1/p' "$TD_TMP/ftrace.out")
expect_eq "ftrace's lost events" "${lost:-0}" 0
# Per caller, its clone suffixes folded.
awk '$1 == "ftrace:" && $2 == "kfree" { c = $5; sub(/\..*/, "", c); n[c] += $3 }
	END { for (c in n) print c, n[c] }' "$TD_TMP/ftrace.out" | sort >"$TD_TMP/ftrace"

[ "$TD_RC" = 0 ] || fail "topdown exited with $TD_RC"
echo "$TD_SUMMARY" | grep -o '"reasons":\[[^]]*\]' | head -n 1 |
	grep -o '{"reason":"[^"]*","count":[0-9]*' |
	sed 's/{"reason":"\([^"]*\)","count":\([0-9]*\)/\1 \2/' | sort >"$TD_TMP/topdown"
callers=$(wc -l <"$TD_TMP/ftrace")
calls=$(awk '{ s += $2 } END { print s + 0 }' "$TD_TMP/ftrace")
echo "oracle: $calls calls of kfree from $callers callers (ftrace)"
[ "$callers" -ge 40 ] || fail "only $callers callers of kfree: the workload is too narrow to tell"
expect_eq "topdown's callers not found" "$(summary_num caller_not_found)" 0
expect_eq "topdown's calls in OTHER" "$(grep -c '^OTHER ' "$TD_TMP/topdown")" 0
misses=$(summary_num recursion_misses)
# Per caller: ftrace's count, topdown's, and what topdown lacks.
awk 'NR == FNR { f[$1] = $2; next } { t[$1] = $2 }
	END {
		for (c in f) print c, f[c], t[c] + 0
		for (c in t) if (!(c in f)) print c, 0, t[c]
	}' "$TD_TMP/ftrace" "$TD_TMP/topdown" | sort >"$TD_TMP/both"
awk '$2 != $3 { print "oracle: " $1 ": ftrace " $2 ", topdown " $3 }' "$TD_TMP/both"
over=$(awk '$3 > $2 { n++ } END { print n + 0 }' "$TD_TMP/both")
short=$(awk '$3 < $2 { s += $2 - $3 } END { print s + 0 }' "$TD_TMP/both")
expect_eq "callers topdown counted more often than ftrace" "$over" 0
[ "$short" -le "${misses:-0}" ] ||
	fail "topdown lacks $short calls, more than its ${misses:-0} recursion misses"
echo "ok: topdown lacks $short calls, against ${misses:-0} recursion misses"
exit 0
