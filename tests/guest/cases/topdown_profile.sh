# Reason profiles: the built-in profile of deferred_split_folio gives exact named counts
# (FAULT_ALLOC = F+P+Q, ZAP = P+Q, MADV_COLLAPSE = C) in both modes; a user profile
# file and inline rules (with a deeper-frame rule) give their own exact tables, with
# unlisted callers on rows of their own; bad profiles are one-line errors. On 6.1 and
# 5.10 the function is deferred_split_huge_page, which page_remove_rmap calls for every
# PTE-mapped page of a THP it unmaps (256 at each half unmap, 256 more at exit, none
# at a THP fault): there the deeper frames tell the calls apart (munmap: under
# unmap_region; exit: under exit_mmap; MADV_DONTNEED: neither).
. "$TD_LIB"
need_cmd topdown thp
split_fn

# bad_profiles: bad profiles are one line naming the place, exit status 2 (a file the
# command line names is wrong).
bad_profiles() {
	printf 'version = 1\n[[reason]]\nname = "A"\ncallers = ["x"]\ncolour = 1\n' >"$TD_TMP/bad.toml"
	topdown $TD_SPLIT --reasons "$TD_TMP/bad.toml" >"$TD_TMP/out" 2>"$TD_TMP/err"
	expect_eq "bad file: exit status" $? 2
	expect_eq "bad file: lines" "$(wc -l <"$TD_TMP/err")" 1
	grep -q "bad.toml:5:" "$TD_TMP/err" || fail "bad file: no line number: $(cat "$TD_TMP/err")"
	topdown $TD_SPLIT --rules 'ZAP=a@b/99' >"$TD_TMP/out" 2>"$TD_TMP/err"
	expect_eq "bad rules: exit status" $? 2
	grep -q "depth 99" "$TD_TMP/err" || fail "bad rules: $(cat "$TD_TMP/err")"
}

if [ $TD_SPLIT = deferred_split_huge_page ]; then
	F=3 P=2 Q=2
	run_thp() { thp --faults $F --munmap-halves $P --dontneed-halves $Q || fail "thp failed"; }
	for mode in fentry kprobe; do
		td_start $TD_SPLIT --$mode
		run_thp
		td_stop INT
		expect_eq "$mode: exit status" "$TD_RC" 0
		expect_eq "$mode: ZAP" "$(reason_count ZAP)" $((512 * (P + Q)))
		expect_eq "$mode: rows" "$(reason_rows)" 1
		expect_eq "$mode: total" "$(summary_num total)" $((512 * (P + Q)))
		expect_eq "$mode: caller not found" "$(summary_num caller_not_found)" 0
		expect_eq "$mode: deep unwind failed" "$(summary_num deep_unwind_failed)" 0
	done

	# A user profile file: one named reason, by a deeper frame; the caller's other
	# calls keep a row of their own.
	cat >"$TD_TMP/p.toml" <<'TOML'
version = 1
function = "deferred_split_huge_page"

[[reason]]
name = "EXIT"
description = "rmap removal of THP pages at process exit"
callers = ["page_remove_rmap"]
within = ["exit_mmap"]
depth = 8
TOML
	td_start $TD_SPLIT --reasons "$TD_TMP/p.toml"
	run_thp
	td_stop INT
	expect_eq "file: EXIT" "$(reason_count EXIT)" $((256 * (P + Q)))
	expect_eq "file: page_remove_rmap" "$(reason_count page_remove_rmap)" $((256 * (P + Q)))
	expect_eq "file: rows" "$(reason_rows)" 2

	# Inline rules with deeper frames: munmap under unmap_region, exit under exit_mmap;
	# MADV_DONTNEED's calls keep the caller's own name (the rules have no default).
	td_start $TD_SPLIT --rules "$TD_RULES_61"
	run_thp
	td_stop INT
	expect_eq "inline: MUNMAP" "$(reason_count MUNMAP)" $((256 * P))
	expect_eq "inline: page_remove_rmap" "$(reason_count page_remove_rmap)" $((256 * Q))
	expect_eq "inline: EXIT" "$(reason_count EXIT)" $((256 * (P + Q)))
	expect_eq "inline: rows" "$(reason_rows)" 3
	expect_eq "inline: deep unwind failed" "$(summary_num deep_unwind_failed)" 0

	# Calls around attach (see below): one munmap half and one MADV_DONTNEED
	# half per process, 256 calls each, from before topdown starts: MUNMAP and
	# page_remove_rmap stay within one process's 256 of each other, where calls counted
	# by their caller alone would all have gone to page_remove_rmap.
	for mode in fentry kprobe; do
		rm -f "$TD_TMP/stop"
		(while [ ! -e "$TD_TMP/stop" ]; do thp --faults 0 --munmap-halves 1 --dontneed-halves 1 || exit 1; done) >"$TD_TMP/loop.out" 2>&1 &
		loop=$!
		# Calls from before topdown starts: the loop's first process is done.
		wait_line "$TD_TMP/loop.out" "^thp: faults=0 "
		td_start $TD_SPLIT --$mode --rules "$TD_RULES_61"
		sleep 2
		touch "$TD_TMP/stop"
		wait $loop || { cat "$TD_TMP/loop.out"; fail "the thp loop failed"; }
		td_stop INT
		m=$(reason_count MUNMAP)
		d=$(reason_count page_remove_rmap)
		[ "$m" -gt 512 ] || fail "early, $mode: only $m MUNMAP calls counted"
		[ $((m - d)) -ge -256 ] && [ $((m - d)) -le 256 ] || fail "early, $mode: MUNMAP $m against page_remove_rmap $d"
		echo "ok: early, $mode: MUNMAP $m, page_remove_rmap $d, EXIT $(reason_count EXIT)"
		expect_eq "early, $mode: deep unwind failed" "$(summary_num deep_unwind_failed)" 0
		expect_eq "early, $mode: caller not found" "$(summary_num caller_not_found)" 0
	done

	topdown $TD_SPLIT --list-reasons >"$TD_TMP/list" 2>&1
	expect_eq "--list-reasons: exit status" $? 0
	cat "$TD_TMP/list"
	for want in ZAP UNMAP page_remove_rmap unmap_page_range; do
		grep -q "$want" "$TD_TMP/list" || fail "--list-reasons does not show $want"
	done
	expect_eq "programs left after --list-reasons" "$(td_progs)" 0
	bad_profiles
	exit 0
fi

thp_callers

F=3 P=2 Q=2 C=2
run_thp() { thp --faults $F --munmap-halves $P --dontneed-halves $Q --collapse $C || fail "thp failed"; }

for mode in fentry kprobe; do
	td_start deferred_split_folio --$mode
	run_thp
	td_stop INT
	expect_eq "$mode: exit status" "$TD_RC" 0
	expect_eq "$mode: FAULT_ALLOC" "$(reason_count FAULT_ALLOC)" $((F + P + Q))
	expect_eq "$mode: ZAP" "$(reason_count ZAP)" $((P + Q))
	expect_eq "$mode: MADV_COLLAPSE" "$(reason_count MADV_COLLAPSE)" $C
	expect_eq "$mode: rows" "$(reason_rows)" 3
	expect_eq "$mode: total" "$(summary_num total)" $((F + 2 * P + 2 * Q + C))
	expect_eq "$mode: caller not found" "$(summary_num caller_not_found)" 0
	expect_eq "$mode: deep unwind failed" "$(summary_num deep_unwind_failed)" 0
done

# A user profile file: one named reason; the other callers keep rows of their own.
cat >"$TD_TMP/p.toml" <<'TOML'
version = 1
function = "deferred_split_folio"

[[reason]]
name = "HALF_UNMAP"
description = "rmap removal of part of a THP"
callers = ["folio_remove_rmap_ptes"]
TOML
td_start deferred_split_folio --reasons "$TD_TMP/p.toml"
run_thp
td_stop INT
expect_eq "file: HALF_UNMAP" "$(reason_count HALF_UNMAP)" $((P + Q))
fc=$((F + P + Q)) rows=3
[ -z "$TD_THP_MERGED" ] || fc=$((fc + C)) rows=2
expect_eq "file: $TD_THP_FAULT_REASON" "$(reason_count "$TD_THP_FAULT_REASON")" $fc
[ -n "$TD_THP_MERGED" ] || expect_eq "file: collapse_huge_page" "$(reason_count collapse_huge_page)" $C
expect_eq "file: rows" "$(reason_rows)" $rows

# Inline rules with a deeper frame: munmap goes through vms_complete_munmap_vmas (4
# frames above the caller on 6.12 through vms_clear_ptes, on 7.3 through unmap_region),
# MADV_DONTNEED does not, so only the munmap halves are MUNMAP; the rest of the caller's
# calls keep the caller's own name (the rule has no default).
td_start deferred_split_folio --rules "MUNMAP=folio_remove_rmap_ptes@vms_complete_munmap_vmas/8;FAULT=$TD_THP_FAULT"
run_thp
td_stop INT
expect_eq "inline: MUNMAP" "$(reason_count MUNMAP)" $P
expect_eq "inline: folio_remove_rmap_ptes" "$(reason_count folio_remove_rmap_ptes)" $Q
expect_eq "inline: FAULT" "$(reason_count FAULT)" $((F + P + Q))
expect_eq "inline: $TD_THP_COLLAPSE_REASON" "$(reason_count "$TD_THP_COLLAPSE_REASON")" $C
expect_eq "inline: deep unwind failed" "$(summary_num deep_unwind_failed)" 0

# Calls around attach: topdown fills in its deeper-frame rules right after attaching
# (it read /proc/kallsyms while loading), and counts the calls it sees in between with
# the frames above their callers, to be given their reasons from those. A loop of one munmap half
# and one MADV_DONTNEED half per round runs from before topdown starts, so calls come
# in that time: MUNMAP and folio_remove_rmap_ptes stay within one call of each other
# (a round cut by the start or the end), where calls counted by their caller alone
# would all have gone to folio_remove_rmap_ptes.
for mode in fentry kprobe; do
	rm -f "$TD_TMP/stop"
	(while [ ! -e "$TD_TMP/stop" ]; do thp --faults 0 --munmap-halves 1 --dontneed-halves 1 || exit 1; done) >"$TD_TMP/loop.out" 2>&1 &
	loop=$!
	# Calls from before topdown starts: the loop's first process is done.
	wait_line "$TD_TMP/loop.out" "^thp: faults=0 "
	td_start deferred_split_folio --$mode --rules "MUNMAP=folio_remove_rmap_ptes@vms_complete_munmap_vmas/8;FAULT=$TD_THP_FAULT"
	sleep 2
	touch "$TD_TMP/stop"
	wait $loop || { cat "$TD_TMP/loop.out"; fail "the thp loop failed"; }
	td_stop INT
	m=$(reason_count MUNMAP)
	d=$(reason_count folio_remove_rmap_ptes)
	[ "$m" -gt 2 ] || fail "early, $mode: only $m MUNMAP calls counted"
	[ $((m - d)) -ge -1 ] && [ $((m - d)) -le 1 ] || fail "early, $mode: MUNMAP $m against folio_remove_rmap_ptes $d"
	echo "ok: early, $mode: MUNMAP $m, folio_remove_rmap_ptes $d"
	expect_eq "early, $mode: deep unwind failed" "$(summary_num deep_unwind_failed)" 0
	expect_eq "early, $mode: caller not found" "$(summary_num caller_not_found)" 0
done

# --list-reasons shows the profile as resolved on this kernel, and exits.
topdown deferred_split_folio --list-reasons >"$TD_TMP/list" 2>&1
expect_eq "--list-reasons: exit status" $? 0
for want in FAULT_ALLOC ZAP MADV_COLLAPSE do_huge_pmd_anonymous_page folio_remove_rmap_ptes madvise_collapse missing; do
	grep -q "$want" "$TD_TMP/list" || { cat "$TD_TMP/list"; fail "--list-reasons does not show $want"; }
done
expect_eq "programs left after --list-reasons" "$(td_progs)" 0

# Bad profiles.
bad_profiles
exit 0
