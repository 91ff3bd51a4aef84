# The handle_mm_fault profile: each fault origin alone, from a workload that is already
# running and waiting when topdown attaches (so that neither its exec nor its setup is
# in the window). Exact counts where the kernel faults once per page: MADV_POPULATE_WRITE
# (GUP), FUTEX_WAKE_OP on fresh pages (FIXUP), process_vm_readv and /proc/PID/mem
# (REMOTE); execve's argument copy (EXEC) one per page of arguments, give or take the
# file name and environment; CPU faults (USER) at least one per page and >= 95% of the
# calls, since the shell around them faults too. The kernel-initiated reasons of the
# other workloads (GUP, REMOTE, FIXUP) stay at 0 in each window; EXEC is left out of
# that, as the shell runs commands (td_start's checks) after topdown has attached: the
# exec window counts only the workload's process (-p). Last, the automatic drill-down:
# repeated MADV_POPULATE_WRITE makes GUP dominate, and its captured stacks lead from
# __get_user_pages to madvise.
. "$TD_LIB"
need_cmd topdown faults
need_madvise MADV_POPULATE_WRITE
need_func handle_mm_fault

N=300

# The built-in profiles of this domain and the two others are listed.
for f in handle_mm_fault shrink_node compact_zone; do
	topdown --list-profiles | grep -q "^$f	$f	" || fail "--list-profiles does not list $f"
done
echo "ok: --list-profiles lists handle_mm_fault, shrink_node, compact_zone"

# run_faults MODE PAGES [REPEAT PAUSE_MS [TOPDOWN ARGS...]]: one topdown run around
# "faults MODE PAGES".
run_faults() {
	_m=$1 _p=$2 _r=${3:-1} _s=${4:-0}
	shift 2
	[ $# -eq 0 ] || shift 2
	rm -f "$TD_TMP/go" "$TD_TMP/w.out"
	faults "$_m" "$_p" "$TD_TMP/go" "$_r" "$_s" >"$TD_TMP/w.out" 2>&1 &
	_w=$!
	wait_line "$TD_TMP/w.out" "faults: ready"
	td_start handle_mm_fault ${ONLY_WORKLOAD:+-p $_w} "$@"
	: >"$TD_TMP/go"
	wait $_w || { cat "$TD_TMP/w.out"; fail "faults $_m failed"; }
	td_stop INT
	expect_eq "$_m: exit status" "$TD_RC" 0
	expect_eq "$_m: caller not found" "$(summary_num caller_not_found)" 0
	expect_eq "$_m: deep unwind failed" "$(summary_num deep_unwind_failed)" 0
}

run_faults populate $N
expect_eq "populate: GUP" "$(reason_count GUP)" $N
expect_none REMOTE FIXUP

run_faults futex $N
expect_eq "futex: FIXUP" "$(reason_count FIXUP)" $N
expect_none GUP REMOTE

run_faults readv $N
expect_eq "process_vm_readv: REMOTE" "$(reason_count REMOTE)" $N
expect_none GUP FIXUP

run_faults procmem $N
expect_eq "/proc/PID/mem: REMOTE" "$(reason_count REMOTE)" $N
expect_none GUP FIXUP

# execve with 64 pages of arguments: one fault per page of the new stack they fill,
# and a few for the file name and environment. Only the workload's calls: td_start's
# checks exec grep and sleep until topdown has its rules, after it attached.
ONLY_WORKLOAD=1
run_faults exec 64
ONLY_WORKLOAD=
e=$(reason_count EXEC)
[ "$e" -ge 64 ] && [ "$e" -le 72 ] || fail "exec: EXEC = $e, want 64 to 72"
echo "ok: exec: EXEC = $e"
expect_none GUP REMOTE FIXUP

run_faults touch 4000
u=$(reason_count USER)
[ "$u" -ge 4000 ] || fail "touch: USER = $u, want >= 4000"
expect_share USER 95
expect_none GUP REMOTE FIXUP

# Drill-down: 60 x 200 populated pages, 50 ms apart; GUP passes the threshold and its
# stacks are captured by themselves.
run_faults populate 200 60 50 -i 0.3 --min-events 100
expect_eq "drill-down: GUP" "$(reason_count GUP)" 12000
expect_eq "drill-down: phase" "$(summary_str phase)" "stack capture"
expect_eq "drill-down: stack reason" "$(summary_str stack_reason)" GUP
grep -qE "GUP has .* of calls \(.*threshold 80%\): (capturing its stacks|moving stack capture from)" "$TD_ERR" ||
	fail "no drill-down notice: $(cat "$TD_ERR")"
stacks=$(echo "$TD_SUMMARY" | grep -o '"stacks_by_reason":.*')
echo "$stacks" | grep -q '"frames":\["__get_user_pages+0x[0-9a-f]*","faultin_\(vma_\)\{0,1\}page_range+' ||
	fail "GUP stacks do not lead from __get_user_pages to faultin_(vma_)page_range: $stacks"
echo "$stacks" | grep -q '"do_madvise[^"]*"\|"__x64_sys_madvise+' || fail "no madvise frame in the GUP stacks: $stacks"
echo "ok: GUP stacks: __get_user_pages <- faultin_(vma_)page_range <- ... madvise"
exit 0
