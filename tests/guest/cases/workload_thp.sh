# The thp workload does exactly what it says: /proc/vmstat THP counters move by exactly
# the expected amounts (nothing else in the guest uses THPs).
. "$TD_LIB"
need_cmd thp
need_madvise MADV_COLLAPSE

run_thp() {
	# run_thp FAULT_ALLOC COLLAPSE_ALLOC SPLIT_PMD ARGS...
	_want_fa=$1 _want_ca=$2 _want_sp=$3
	shift 3
	fa0=$(vmstat thp_fault_alloc) || fail "no thp_fault_alloc in /proc/vmstat"
	ff0=$(vmstat thp_fault_fallback)
	ca0=$(vmstat thp_collapse_alloc)
	cf0=$(vmstat thp_collapse_alloc_failed)
	sp0=$(vmstat thp_split_pmd)
	ds0=$(vmstat thp_deferred_split_page)
	echo "+ thp $*"
	out=$(thp "$@" 2>&1)
	rc=$?
	echo "$out"
	[ $rc -eq 0 ] || fail "thp $* exited with $rc"
	expect_eq thp_fault_alloc "$(($(vmstat thp_fault_alloc) - fa0))" "$_want_fa"
	expect_eq thp_fault_fallback "$(($(vmstat thp_fault_fallback) - ff0))" 0
	# A MADV_COLLAPSE that failed with EAGAIN or ENOMEM (transient, retried by thp) may
	# have allocated (or failed to allocate) a huge page first: the kernel does not
	# promise that a failed attempt leaves these counters alone, so each retry may add
	# one to either of them, never more.
	_retries=$(echo "$out" | sed -n 's/^thp: collapse_retries=\([0-9]*\) .*/\1/p')
	[ -n "$_retries" ] || fail "no collapse_retries line from thp"
	[ "$_retries" = 0 ] || echo "note: thp retried MADV_COLLAPSE $_retries time(s)"
	_ca=$(($(vmstat thp_collapse_alloc) - ca0)) _cf=$(($(vmstat thp_collapse_alloc_failed) - cf0))
	if [ "$_ca" -ge "$_want_ca" ] && [ $((_ca + _cf)) -le $((_want_ca + _retries)) ]; then
		echo "ok: thp_collapse_alloc = $_ca, thp_collapse_alloc_failed = $_cf ($_want_ca collapses, $_retries retries)"
	else
		fail "thp_collapse_alloc = $_ca, thp_collapse_alloc_failed = $_cf: want $_want_ca collapses, plus at most one of either per retry ($_retries)"
	fi
	expect_eq thp_split_pmd "$(($(vmstat thp_split_pmd) - sp0))" "$_want_sp"
	# Counted once per folio when it first becomes partially mapped.
	expect_eq thp_deferred_split_page "$(($(vmstat thp_deferred_split_page) - ds0))" "$_want_sp"
}

run_thp 7 2 4 --faults 3 --munmap-halves 2 --dontneed-halves 2 --collapse 2
echo "$out" | grep -qx 'thp: faults=3 munmap_halves=2 dontneed_halves=2 collapses=2' ||
	fail "unexpected summary line"

run_thp 6 2 4 --faults 1 --munmap-halves 1 --dontneed-halves 1 --collapse 1 --repeat 2
echo "$out" | grep -qx 'thp: faults=2 munmap_halves=2 dontneed_halves=2 collapses=2' ||
	fail "unexpected summary line"

# A THP fault that falls back to small pages is an error (the 2 MiB size is switched off
# here; its knob exists since 6.8).
knob=/sys/kernel/mm/transparent_hugepage/hugepages-2048kB/enabled
if [ -w $knob ]; then
	old=$(sed 's/.*\[\(.*\)\].*/\1/' $knob)
	echo never >$knob
	out=$(thp --faults 1 2>&1)
	rc=$?
	echo "$old" >$knob
	echo "$out"
	expect_eq "exit status when THP faults fall back" $rc 1
	echo "$out" | grep -q "thp: error: faults: region 0 .*not a THP" || fail "no clear error message"
fi

# Usage errors exit 2.
thp --bogus >/dev/null 2>&1
expect_eq "exit status for a bad option" $? 2
exit 0
