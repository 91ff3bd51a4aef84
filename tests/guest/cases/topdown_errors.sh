# Bad input: one clear line on stderr, a non-zero exit status, nothing attached.
. "$TD_LIB"
need_cmd topdown asnobody
need_func vfs_read

# expect_error RC PATTERN ARGS...: topdown ARGS exits RC, prints one line matching PATTERN.
# With asnobody_topdown as the first argument, topdown runs as nobody.
expect_error() {
	want_rc=$1 pattern=$2
	shift 2
	as=
	if [ "$1" = asnobody_topdown ]; then
		as=asnobody
		shift
	fi
	$as topdown "$@" >"$TD_TMP/out" 2>"$TD_TMP/err"
	rc=$?
	echo "+ topdown $*: $(cat "$TD_TMP/err")"
	expect_eq "exit status of topdown $*" $rc "$want_rc"
	expect_eq "stderr lines of topdown $*" "$(wc -l <"$TD_TMP/err")" 1
	grep -q -- "$pattern" "$TD_TMP/err" || fail "topdown $*: stderr does not match '$pattern'"
	[ -s "$TD_TMP/out" ] && fail "topdown $*: printed to stdout"
	true
}

expect_error 1 "no kernel function named 'no_such_function_xyz'" no_such_function_xyz
expect_error 1 "did you mean: vfs_read" vfs_rea
expect_error 1 "fentry: entry_SYSCALL_64 is not in the kernel's BTF.*; kprobe: .*entry_SYSCALL_64" entry_SYSCALL_64
expect_error 1 "cannot trace entry_SYSCALL_64 with fentry: .*not in the kernel's BTF" entry_SYSCALL_64 --fentry
expect_error 1 "unknown reason 'NOPE' for --stack-on" vfs_read --stack-on NOPE
expect_error 2 "not a positive number of seconds" vfs_read -i 0
expect_error 2 "unexpected argument '--bogus'" vfs_read --bogus
expect_error 1 "no built-in profile named 'nope'" vfs_read --profile nope
# kptr_restrict=2 hides kernel addresses even from root.
old=$(cat /proc/sys/kernel/kptr_restrict)
echo 2 >/proc/sys/kernel/kptr_restrict
expect_error 1 "kernel symbol addresses are hidden (kernel.kptr_restrict=2)" vfs_read
echo "$old" >/proc/sys/kernel/kptr_restrict
# Without privileges (nobody, no capabilities).
expect_error 1 "not enough privileges: run as root, or grant CAP_BPF and CAP_PERFMON" asnobody_topdown vfs_read
expect_eq "programs left" "$(td_progs)" 0
exit 0
