# Bad input: one clear line on stderr, a non-zero exit status, nothing attached. Exit
# status 2 when the command line, or a name, value or file it gives, is wrong; 1 when
# the system refuses (privileges, hidden addresses, a kernel without BTF or kprobes, a
# function fentry and kprobes cannot reach); see EXIT STATUS in topdown(8).
. "$TD_LIB"
need_cmd topdown asnobody
need_func vfs_read

# without DIR[:DIR...] CMD ARGS...: CMD ARGS in a mount namespace of its own in which
# every DIR is hidden under an empty tmpfs: a kernel without BTF or kprobes, as topdown
# sees it.
without() {
	unshare -m sh -c 'IFS=:; for d in $1; do mount -t tmpfs none "$d" || exit 9; done
		shift; exec "$@"' sh "$@"
}

# expect_error RC PATTERN ARGS...: topdown ARGS exits RC, prints one line matching PATTERN.
# With asnobody_topdown as the first argument, topdown runs as nobody; with
# "without DIR[:DIR...]" first, with those directories hidden.
expect_error() {
	want_rc=$1 pattern=$2
	shift 2
	as=
	if [ "$1" = asnobody_topdown ]; then
		as=asnobody
		shift
	elif [ "$1" = without ]; then
		as="without $2"
		shift 2
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

expect_error 2 "no kernel function named 'no_such_function_xyz'" no_such_function_xyz
expect_error 2 "did you mean: vfs_read" vfs_rea
# The system call entry ($TD_ENTRY, lib.sh) is in neither BTF nor kprobe-able.
expect_error 1 "fentry: $TD_ENTRY is not in the kernel's BTF.*; kprobe: .*$TD_ENTRY" "$TD_ENTRY"
expect_error 1 "cannot trace $TD_ENTRY with fentry: .*not in the kernel's BTF" "$TD_ENTRY" --fentry
expect_error 2 "unknown reason 'NOPE' for --stack-on" vfs_read --stack-on NOPE
expect_error 2 "not a positive number of seconds" vfs_read -i 0
expect_error 2 "unexpected argument '--bogus'" vfs_read --bogus
expect_error 2 "no built-in profile named 'nope'" vfs_read --profile nope
# Filters that can never match, and files that cannot be written or read: refused
# before anything is loaded.
expect_error 2 "^topdown: --pid 99999999: no such process\$" vfs_read -p 99999999
expect_error 2 "^topdown: --cgroup /tmp: not a cgroup v2 directory\$" vfs_read --cgroup /tmp
expect_error 2 "^topdown: --cgroup /no/such: no such cgroup directory\$" vfs_read --cgroup /no/such
ncpu=$(awk -F- '{ print $NF + 1 }' /sys/devices/system/cpu/possible)
expect_error 2 "^topdown: --cpu $ncpu: no such CPU (this machine has CPUs 0-$((ncpu - 1)))\$" vfs_read -C 0,$ncpu
expect_error 2 "is not a CPU list" vfs_read -C 3-1
expect_error 2 "^topdown: --cpu $ncpu: no such CPU" pin vfs_read -C $ncpu
expect_error 2 "unexpected argument '-p'" pin vfs_read -p 1
for opt in --folded --flamegraph --save; do
	expect_error 2 "^topdown: $opt /no/such/dir/out: cannot write it: no directory /no/such/dir\$" vfs_read $opt /no/such/dir/out
done
expect_error 2 "^topdown: --flamegraph /tmp: cannot write it: it is a directory\$" vfs_read --flamegraph /tmp
expect_error 2 "^topdown: --vmlinux /no/such/vmlinux: cannot read it: " vfs_read --vmlinux /no/such/vmlinux
expect_error 2 "^topdown: --vmlinux /proc/version: not an ELF file (a debug vmlinux is)\$" vfs_read --vmlinux /proc/version
# kptr_restrict=2 hides kernel addresses even from root.
old=$(cat /proc/sys/kernel/kptr_restrict)
echo 2 >/proc/sys/kernel/kptr_restrict
expect_error 1 "kernel symbol addresses are hidden (kernel.kptr_restrict=2)" vfs_read
echo "$old" >/proc/sys/kernel/kptr_restrict
# Without privileges (nobody, no capabilities).
expect_error 1 "not enough privileges: run as root, or grant CAP_BPF and CAP_PERFMON" asnobody_topdown vfs_read
# A kernel without BTF, or without kprobes, named by its architecture: the BTF hidden
# (and with it fentry, and the kprobe program's CO-RE relocations), the kprobe PMU hidden.
if command -v unshare >/dev/null; then
	case $(uname -m) in
	aarch64) arch=arm64 ;;
	*) arch=$(uname -m) ;;
	esac
	btf=/sys/kernel/btf pmus=/sys/bus/event_source/devices
	no_btf="this $arch kernel has no BTF (/sys/kernel/btf/vmlinux is missing; Linux 5.4 and later export it, built with CONFIG_DEBUG_INFO_BTF)"
	no_kprobes="this $arch kernel has no kprobes (CONFIG_KPROBES is off; BPF kprobe programs: Linux 4.1)"
	expect_error 1 "cannot trace vfs_read with fentry: $no_btf" without $btf vfs_read --fentry
	expect_error 1 "cannot trace vfs_read with a kprobe: $no_kprobes" without $pmus vfs_read --kprobe
	expect_error 1 "cannot trace vfs_read: fentry: $no_btf; kprobe: $no_kprobes" without $btf:$pmus vfs_read
	expect_error 1 "cannot trace vfs_read: fentry: $no_btf; kprobe: the kprobe program needs the kernel's BTF as well, and this $arch kernel has none" \
		without $btf vfs_read
else
	echo "no unshare: kernels without BTF or kprobes not checked"
fi
expect_eq "programs left" "$(td_progs)" 0
exit 0
