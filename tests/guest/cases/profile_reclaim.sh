# The shrink_node profile: each kind of reclaim alone, with lazyfree memory (MADV_FREE)
# as what there is to reclaim, since the guest has no swap and no disk. Most of the
# guest's memory is first taken out as hugetlb pages, so that guest-wide pressure needs
# little memory written. Each reason must have >= 95% of the calls in its window, and
# the reasons of the other triggers none:
#   PROACTIVE     a write to a cgroup's memory.reclaim
#   MEMCG_LIMIT   a cgroup allocating past its memory.max
#   MEMCG_HIGH    a cgroup allocating past its memory.high
#   KSWAPD        a paced allocation into the gap between the low and min watermarks
#                 (widened with vm.watermark_scale_factor). Only kswapd0's calls are
#                 counted (-p): on a slow or busy host the allocation can outrun
#                 kswapd and reclaim directly, which is right but not this window's
#                 subject.
#   DIRECT        two threads allocating at full speed below the min watermark, with
#                 kswapd0 at SCHED_IDLE (memhog -k) until after the window. The
#                 allocator wakes kswapd before it reclaims itself, so kswapd reclaims
#                 too (4-12% of the calls in trial runs): only the allocating
#                 process's calls are counted (-p).
# (Keeping kswapd off the CPU entirely, pinned under a SCHED_FIFO spinner, stalled
# RCU on 6.1.)
#   NODE_RECLAIM  the same allocation on one thread with vm.zone_reclaim_mode=7: node
#                 reclaim in the allocator's fast path, kswapd woken when that leaves
#                 free memory below the low watermark, and the slow path's direct
#                 reclaim when node reclaim did not free enough. On x86 80-100%:
#                 >= 50% checked. On arm64 (one zone) the fallback is common (45
#                 NODE_RECLAIM beside 43 DIRECT; 4 beside 1 DIRECT and 2 KSWAPD):
#                 NODE_RECLAIM must have calls. KSWAPD and DIRECT are not checked;
#                 node reclaim's calls counted as anything else would leave
#                 NODE_RECLAIM at 0.
. "$TD_LIB"
need_cmd topdown memhog
need_func shrink_node

S=/proc/sys/vm
CG=/sys/fs/cgroup
[ -e $CG/cgroup.subtree_control ] || skip "no cgroup2"
cleanup() {
	[ -z "$HOG" ] || kill "$HOG" 2>/dev/null
	wait 2>/dev/null
	rmdir $CG/td 2>/dev/null
	echo 0 >$S/nr_hugepages
	echo 10 >$S/watermark_scale_factor
	echo 0 >$S/zone_reclaim_mode
}
trap cleanup EXIT
HOG=
ALL="KSWAPD PROACTIVE MEMCG_HIGH MEMCG_LIMIT DIRECT NODE_RECLAIM"
others() { echo " $ALL " | sed "s/ $1 / /"; }
free_mb() { awk '$1 == "MemFree:" { print int($2 / 1024) }' /proc/meminfo; }

# hog_start [CGROUP] MEMHOG ARGS...: memhog in the background (in CGROUP if not "-"),
# waiting for $TD_TMP/go; returns once it is ready.
hog_start() {
	_cg=$1
	shift
	# The previous memhog's "ready" and "done" must not be taken for this one's.
	rm -f "$TD_TMP/go" "$TD_TMP/hog.out"
	if [ "$_cg" = - ]; then
		memhog "$@" -g "$TD_TMP/go" >"$TD_TMP/hog.out" 2>&1 &
	else
		sh -c 'echo $$ >"$0/cgroup.procs" && exec memhog "$@"' "$_cg" "$@" -g "$TD_TMP/go" \
			>"$TD_TMP/hog.out" 2>&1 &
	fi
	HOG=$!
	wait_line "$TD_TMP/hog.out" "memhog: ready"
}

# window [TOPDOWN ARGS...]: topdown around the started memhog's work (TD_SUMMARY,
# TD_RC), memhog ended.
window() {
	td_start shrink_node "$@"
	: >"$TD_TMP/go"
	wait_line "$TD_TMP/hog.out" "memhog: done"
	td_stop INT
	cat "$TD_TMP/hog.out"
	kill "$HOG" 2>/dev/null
	wait "$HOG" 2>/dev/null
	HOG=
}

# check REASON [PCT [UNCHECKED]]: REASON has PCT% (95) of the window's calls, the other
# reasons except UNCHECKED none.
check() {
	expect_eq "$1: exit status" "$TD_RC" 0
	expect_share "$1" "${2:-95}"
	_o=" $(others "$1") "
	for _x in ${3:-}; do _o=$(echo "$_o" | sed "s/ $_x / /"); done
	expect_none $_o
}

# run REASON [PCT [UNCHECKED]]: a window, checked.
run() {
	window
	check "$@"
}

echo +memory >$CG/cgroup.subtree_control
mkdir $CG/td || fail "mkdir $CG/td"
[ -e $CG/td/memory.reclaim ] || { rmdir $CG/td; skip "no memory.reclaim in $TD_KERNEL (cgroup v2 proactive reclaim, Linux 5.19)"; }

# PROACTIVE: 32 MB lazyfree in the cgroup, 16 MB asked back through memory.reclaim.
hog_start $CG/td -l 32 -w
td_start shrink_node
echo 16M >$CG/td/memory.reclaim || fail "memory.reclaim"
td_stop INT
expect_eq "PROACTIVE: exit status" "$TD_RC" 0
expect_share PROACTIVE 95
expect_none $(others PROACTIVE)
kill "$HOG"
wait "$HOG" 2>/dev/null

# MEMCG_LIMIT: 48 MB lazyfree, then 48 MB more under memory.max=64M.
echo 64M >$CG/td/memory.max
hog_start $CG/td -l 48 -a 48
run MEMCG_LIMIT
echo max >$CG/td/memory.max

# MEMCG_HIGH: the same under memory.high=64M.
echo 64M >$CG/td/memory.high
hog_start $CG/td -l 48 -a 48
run MEMCG_HIGH
echo max >$CG/td/memory.high

# Guest-wide: leave ~400 MB to the page allocator.
echo $((($(free_mb) - 400) / 2)) >$S/nr_hugepages
F=$(free_mb)
echo "hugetlb pages: $(cat $S/nr_hugepages), free: $F MB"
grep -E "^Node|  (min|low|high) " /proc/zoneinfo | head -12

# KSWAPD: watermarks 2% of memory apart; lazyfree 60% of the free memory, then 50% of
# it allocated 1 MB at a time, 20 ms apart.
echo 200 >$S/watermark_scale_factor
ks=$(pidof kswapd0) || fail "no kswapd0 thread"
hog_start - -l $((F * 6 / 10)) -a $((F / 2)) -s 20000
window -p "$ks"
check KSWAPD
echo 10 >$S/watermark_scale_factor

# DIRECT: the same at full speed on two threads, kswapd0 at SCHED_IDLE. Whether the
# allocator reclaims for itself depends on kswapd not keeping up: a window where kswapd
# did all the reclaim (no DIRECT call: 7 KSWAPD calls once, in CI) is repeated, after
# the memory is given back. What is checked is the attribution of the calls that come.
# Each window sizes its memory from what is free when it starts: reclaim in the windows
# before may have freed caches beyond what was free at first (on 7.3 the node reclaim
# window once saw no reclaim at all, all of its lazyfree memory left).
for try in 1 2 3; do
	F=$(free_mb)
	hog_start - -l $((F * 6 / 10)) -a $((F / 2)) -T 2 -k -w
	window -p "$HOG"
	[ "$(reason_count DIRECT)" -eq 0 ] || break
	echo "DIRECT: no direct reclaim in try $try: kswapd kept up"
	# kswapd going back to sleep: nothing marks it.
	sleep 2
done
check DIRECT

# NODE_RECLAIM: zone_reclaim_mode 7 (reclaim, write, unmap); node_reclaim needs more
# unmapped file pages than min_unmapped_ratio: a 64 MB tmpfs file.
dd if=/dev/zero of="$TD_TMP/file" bs=1M count=64 2>/dev/null
echo 7 >$S/zone_reclaim_mode
F=$(free_mb)
hog_start - -l $((F * 6 / 10)) -a $((F / 2)) -k -w
case $(uname -m) in
aarch64) share=0 ;;
*) share=50 ;;
esac
run NODE_RECLAIM $share "KSWAPD DIRECT"
expect_calls NODE_RECLAIM
echo 0 >$S/zone_reclaim_mode
exit 0
