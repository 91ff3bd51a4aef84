# deferred_split_folio's KHUGEPAGED reason, with khugepaged itself doing the collapses:
# khugepaged set to scan fast, then 8 regions of 512 small pages handed to it with
# MADV_HUGEPAGE while topdown runs. Every collapse queues its new THP once, so
# KHUGEPAGED must equal the thp_collapse_alloc delta in /proc/vmstat (and the regions
# collapsed), and MADV_COLLAPSE must stay 0.
. "$TD_LIB"
need_cmd topdown memhog
# Before 6.12 no new THP is queued for deferred split: 6.1's and 5.10's
# deferred_split_huge_page is called only when pages of a THP lose their mappings,
# never by a collapse of small pages.
grep -q " [tT] deferred_split_folio\$" /proc/kallsyms ||
	skip "no THP queued for deferred split at collapse in $TD_KERNEL (deferred_split_folio's KHUGEPAGED reason: Linux 6.12)"
K=/sys/kernel/mm/transparent_hugepage/khugepaged
[ -w $K/scan_sleep_millisecs ] || skip "no khugepaged settings"
N=8
for f in scan_sleep_millisecs alloc_sleep_millisecs pages_to_scan max_ptes_none; do
	eval "old_$f=\$(cat $K/$f)"
done
cleanup() {
	[ -z "$HOG" ] || kill "$HOG" 2>/dev/null
	wait 2>/dev/null
	for f in scan_sleep_millisecs alloc_sleep_millisecs pages_to_scan max_ptes_none; do
		eval "echo \$old_$f" >$K/$f
	done
}
trap cleanup EXIT
echo 10 >$K/scan_sleep_millisecs
echo 10 >$K/alloc_sleep_millisecs
echo 4096 >$K/pages_to_scan
echo 511 >$K/max_ptes_none

memhog -K $N -g "$TD_TMP/go" -w >"$TD_TMP/hog.out" 2>&1 &
HOG=$!
wait_line "$TD_TMP/hog.out" "memhog: ready"
# The collapses are counted from attach to stop: the vmstat delta is read inside that
# window, so that a collapse of other memory before attach (khugepaged scans fast now)
# is in neither.
td_start deferred_split_folio
before=$(vmstat thp_collapse_alloc)
: >"$TD_TMP/go"
i=0
until grep -q "memhog: done" "$TD_TMP/hog.out"; do
	i=$((i + 1))
	[ $i -lt 650 ] || fail "memhog -K did not finish"
	sleep 0.1
done
after=$(vmstat thp_collapse_alloc)
td_stop INT
cat "$TD_TMP/hog.out"
expect_eq "exit status" "$TD_RC" 0
expect_eq "THPs made by khugepaged" "$(sed -n 's/.*thp=//p' "$TD_TMP/hog.out")" $N
expect_eq "KHUGEPAGED (= thp_collapse_alloc delta $((after - before)))" "$(reason_count KHUGEPAGED)" $((after - before))
expect_eq "KHUGEPAGED (= regions)" "$(reason_count KHUGEPAGED)" $N
expect_eq "MADV_COLLAPSE" "$(reason_count MADV_COLLAPSE)" 0
expect_eq "deep unwind failed" "$(summary_num deep_unwind_failed)" 0
exit 0
