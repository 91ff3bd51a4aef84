# case-timeout: 1500
# The allocator stress run (opt-in: TOPDOWN_TEST_STRESS=1 tests/run, on every kernel of the
# matrix; not in CI's time): topdown traces the allocator itself, where the programs'
# first calls of new sites name them in the kernel (bpf_snprintf's symbol lookup) on
# the hottest paths there are: kfree, kmem_cache_free, kmem_cache_alloc (its _noprof
# name from 6.10) and dput, each in turn in every mode: a live run with fentry and
# automatic capture, one with a kprobe (--kprobe), and a pin of each with no reader
# while the workload runs. All under a busy mixed workload (the busybox pass of the
# benchmarks on CPU 0, a reader loop on CPU 1) for TD_STRESS_MINUTES minutes (10 unless
# the case file is edited) split evenly over the runs. Fails on any oops, BUG, warning
# or lockdep report in the kernel's log, or a run that fails; prints a line per run
# with the calls it counted and what its stats say.
. "$TD_LIB"
. /bench/lib.sh
need_cmd topdown readloop taskset
MINUTES=${TD_STRESS_MINUTES:-10}

FUNCS=
for f in kfree kmem_cache_free kmem_cache_alloc_noprof kmem_cache_alloc dput; do
	case " $FUNCS " in *" kmem_cache_alloc_noprof "*) [ $f = kmem_cache_alloc ] && continue ;; esac
	ktext $f && FUNCS="$FUNCS $f"
done
[ -n "$FUNCS" ] || skip "no allocator function of this case in $TD_KERNEL"
set -- $FUNCS
runs=$(($# * 4))
SECS=$((MINUTES * 60 / runs))
[ $SECS -ge 5 ] || SECS=5
echo "stress: $TD_KERNEL: $FUNCS, 4 modes each, $SECS s a run"

dmesg -c >/dev/null 2>&1
mixed_tree
touch "$TD_TMP/go"
(while [ -e "$TD_TMP/go" ]; do taskset -c 1 readloop 20000 >/dev/null 2>&1 || exit 1; done) &
reader=$!
(while [ -e "$TD_TMP/go" ]; do mixed; done) &
mixer=$!
trap 'rm -f "$TD_TMP/go"; kill $reader $mixer 2>/dev/null' EXIT

# kernel_ok WHEN: fails on anything the kernel reported going wrong since the last check.
kernel_ok() {
	dmesg -c 2>/dev/null >"$TD_TMP/dmesg"
	if grep -E -i "BUG:|WARNING:|Oops|general protection|Call Trace|lockdep|RCU stall|soft lockup|hard lockup|refcount_t" \
		"$TD_TMP/dmesg" >"$TD_TMP/bad"; then
		cat "$TD_TMP/dmesg"
		fail "the kernel reported trouble $1: $(head -3 "$TD_TMP/bad")"
	fi
}

for f in $FUNCS; do
	for mode in fentry kprobe; do
		args=
		[ $mode = kprobe ] && args=--kprobe
		# A live run, automatic capture armed (the default).
		# shellcheck disable=SC2086
		timeout -s INT $((SECS + 60)) topdown $f --no-profile $args -d $SECS --json \
			>"$TD_TMP/live.json" 2>"$TD_TMP/live.err" ||
			fail "live $f ($mode) failed: $(tail -3 "$TD_TMP/live.err")"
		total=$(tail -n 1 "$TD_TMP/live.json" | grep -o '"total":[0-9]*' | head -1 | sed 's/.*://')
		reasons=$(tail -n 1 "$TD_TMP/live.json" | grep -o '{"reason":' | wc -l)
		echo "stress: live $f ($mode): $total calls, $reasons reasons"
		kernel_ok "after live $f ($mode)"
		# Pinned, no reader while the workload runs.
		# shellcheck disable=SC2086
		if ! topdown pin $f --no-profile $args 2>"$TD_TMP/pin.err"; then
			# 5.10 cannot pin a kprobe's link: said so, and nothing left behind.
			if grep -q "kprobe links need kernel 5.15" "$TD_TMP/pin.err"; then
				echo "stress: pinned $f ($mode): not on $TD_KERNEL: $(cat "$TD_TMP/pin.err")"
				sleep $SECS
				kernel_ok "without a pin of $f ($mode)"
				continue
			fi
			fail "pin $f ($mode) failed: $(cat "$TD_TMP/pin.err")"
		fi
		sleep $SECS
		kernel_ok "under pinned $f ($mode)"
		un=0
		if [ -f /sys/fs/bpf/topdown/$f/reasons ]; then
			un=$(sed -n 's/^unresolved: \([0-9]*\) .*/\1/p' /sys/fs/bpf/topdown/$f/reasons)
		fi
		shown=$(topdown show $f --json) || fail "show $f failed"
		total=$(echo "$shown" | grep -o '"total":[0-9]*' | head -1 | sed 's/.*://')
		echo "stress: pinned $f ($mode), no reader: $total calls, unresolved in the file: ${un:-0}"
		topdown unpin $f || fail "unpin $f failed"
		kernel_ok "after pinned $f ($mode)"
	done
done
exit 0
