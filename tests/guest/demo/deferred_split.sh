# The README's demo: topdown deferred_split_folio -i 1, live, while a THP workload
# moves through phases: THP faults and collapses, then a mix, then partial unmaps only.
. "$TD_LIB"
need_cmd topdown thp
need_func deferred_split_folio

echo "### topdown deferred_split_folio -i 1 -d 10"
# Both streams through one pipe keep notices next to the interval that caused them.
topdown deferred_split_folio -i 1 -d 10 2>&1 | tee "$TD_TMP/out" &
td=$!
wait_line "$TD_TMP/out" "Ctrl-C to end"
sleep 0.5
echo "### workload: 40 THP faults, 8 MADV_COLLAPSE collapses"
thp --faults 40 --collapse 8 >/dev/null
sleep 1.5
echo "### workload: 30 half munmaps and 30 half MADV_DONTNEEDs (each after its THP fault)"
thp --munmap-halves 30 --dontneed-halves 30 >/dev/null
sleep 1.5
echo "### workload: THPs faulted, then 60 half munmaps, 50 ms apart"
thp --munmap-halves 60 --wait-usr1 --unmap-gap-ms 50 >"$TD_TMP/thp.out" &
wait_line "$TD_TMP/thp.out" "thp: ready"
sleep 1.2
kill -USR1 $!
wait $td
