# The benchmarks of tests/guest/bench that topdown's own changes can break (overhead,
# startup), each in its quick mode (TD_BENCH_QUICK=1: one short round of a few rows), so
# that a change of an option or of the output they read shows here rather than at the
# next benchmark run. Their figures are printed but mean nothing this short.
# They check options and output formats, not the kernel: once per run of several guests.
# kernels: trixie
. "$TD_LIB"
[ -d /bench ] || skip "no /bench in this guest (tests/guest/run puts the benchmarks there)"
for b in overhead startup; do
	echo "== bench/$b.sh, quick"
	TD_BENCH_QUICK=1 sh "/bench/$b.sh" >"$TD_TMP/$b.out" 2>&1
	rc=$?
	cat "$TD_TMP/$b.out"
	case $rc in
	0) grep -q '^bench: ' "$TD_TMP/$b.out" || fail "bench/$b.sh printed no figures" ;;
	77) echo "bench/$b.sh skipped itself" ;;
	*) fail "bench/$b.sh (quick) exited with $rc" ;;
	esac
done
