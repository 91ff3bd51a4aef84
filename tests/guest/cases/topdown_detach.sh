# No topdown BPF program stays loaded after topdown ends: by SIGINT, SIGTERM, SIGHUP,
# -d, SIGKILL, or an error while attaching; in fentry and kprobe mode.
. "$TD_LIB"
need_cmd topdown bpftool
need_func vfs_read

expect_eq "programs before" "$(td_progs)" 0
for mode in fentry kprobe; do
	for sig in INT TERM HUP KILL; do
		td_start vfs_read --$mode --stack-on ksys_read
		[ "$(td_progs)" -ge 1 ] || fail "$mode: no td_ program loaded while running"
		td_stop $sig
		case $sig in
		KILL) expect_eq "$mode $sig: exit status" "$TD_RC" 137 ;;
		*) expect_eq "$mode $sig: exit status" "$TD_RC" 0 ;;
		esac
		expect_eq "$mode $sig: programs left" "$(td_progs)" 0
	done
	topdown vfs_read --$mode -d 1 --json >"$TD_TMP/d.out" 2>&1
	expect_eq "$mode -d: exit status" $? 0
	grep -q '"type":"summary"' "$TD_TMP/d.out" || fail "$mode -d: no summary"
	expect_eq "$mode -d: programs left" "$(td_progs)" 0
done
# An error while attaching: neither fentry nor kprobe can hook the syscall entry
# ($TD_ENTRY, lib.sh).
topdown "$TD_ENTRY" >"$TD_TMP/e.out" 2>&1
expect_eq "attach error: exit status" $? 1
expect_eq "attach error: programs left" "$(td_progs)" 0
exit 0
