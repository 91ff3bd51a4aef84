# Ground truth for the workloads, without BPF: the ftrace function tracer counts the calls
# of the kernel functions the workloads are meant to hit, by caller.
. "$TD_LIB"
need_cmd thp readloop
need_madvise MADV_COLLAPSE

# readloop N: exactly N calls of vfs_read, all from ksys_read.
ftrace_calls vfs_read readloop 500 >out.txt
rc=$?
cat out.txt
[ $rc -eq 77 ] && skip "ftrace cannot trace vfs_read here"
[ $rc -eq 0 ] || fail "readloop exited with $rc"
expect_eq "vfs_read calls by readloop" "$(awk '$1 == "ftrace:" && $4 == "readloop" { s += $3 } END { print s + 0 }' out.txt)" 500

# thp: the deferred-split function, by caller.
args="--faults 3 --munmap-halves 2 --dontneed-halves 2 --collapse 2"
by() { awk -v c="$1" '$1 == "ftrace:" && $4 == "thp" && $5 == c { s += $3 } END { print s + 0 }' out.txt; }
total() { awk '$1 == "ftrace:" { s += $3 } END { print s + 0 }' out.txt; }
if grep -qx deferred_split_folio /sys/kernel/tracing/available_filter_functions; then
	# 6.12 and 7.x: once per THP fault, once per half unmap, once per collapse.
	ftrace_calls deferred_split_folio thp $args >out.txt
	rc=$?
	cat out.txt
	[ $rc -eq 0 ] || fail "thp exited with $rc"
	thp_callers
	expect_eq "calls from $TD_THP_FAULT" "$(by $TD_THP_FAULT)" 7
	expect_eq "calls from folio_remove_rmap_ptes" "$(by folio_remove_rmap_ptes)" 4
	expect_eq "calls from collapse_huge_page" "$(by collapse_huge_page)" 2
	expect_eq "calls in all" "$(total)" 13
elif grep -qx deferred_split_huge_page /sys/kernel/tracing/available_filter_functions; then
	# 6.1: page_remove_rmap calls it for every PTE-mapped subpage it unmaps: 256 at each
	# half unmap, 256 more when the other half goes away at exit.
	ftrace_calls deferred_split_huge_page thp $args >out.txt
	rc=$?
	cat out.txt
	[ $rc -eq 0 ] || fail "thp exited with $rc"
	expect_eq "calls from page_remove_rmap" "$(by page_remove_rmap)" 2048
	expect_eq "calls in all" "$(total)" 2048
else
	skip "neither deferred_split_folio nor deferred_split_huge_page is traceable"
fi
exit 0
