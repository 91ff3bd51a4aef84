# Bad input: one clear line on stderr, a non-zero exit status, nothing attached.
. "$TD_LIB"
need_cmd topdown
need_func deferred_split_folio

# expect_error RC PATTERN ARGS...: topdown ARGS exits RC, prints one line matching PATTERN.
expect_error() {
	want_rc=$1 pattern=$2
	shift 2
	topdown "$@" >"$TD_TMP/out" 2>"$TD_TMP/err"
	rc=$?
	echo "+ topdown $*: $(cat "$TD_TMP/err")"
	expect_eq "exit status of topdown $*" $rc "$want_rc"
	expect_eq "stderr lines of topdown $*" "$(wc -l <"$TD_TMP/err")" 1
	grep -q -- "$pattern" "$TD_TMP/err" || fail "topdown $*: stderr does not match '$pattern'"
	[ -s "$TD_TMP/out" ] && fail "topdown $*: printed to stdout"
	true
}

expect_error 1 "no kernel function named 'no_such_function_xyz'" no_such_function_xyz
expect_error 1 "did you mean: deferred_split_folio" deferred_split_foli
expect_error 1 "fentry: entry_SYSCALL_64 is not in the kernel's BTF.*; kprobe: .*entry_SYSCALL_64" entry_SYSCALL_64
expect_error 1 "cannot trace entry_SYSCALL_64 with fentry: .*not in the kernel's BTF" entry_SYSCALL_64 --fentry
expect_error 1 "unknown reason 'NOPE' for --stack-on" deferred_split_folio --stack-on NOPE
expect_error 2 "not a positive number of seconds" deferred_split_folio -i 0
expect_eq "programs left" "$(td_progs)" 0
exit 0
