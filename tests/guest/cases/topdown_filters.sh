# Who and where: --pid, --cgroup and --cpu count exactly the calls of what they name;
# stacks list the processes they were captured in; --flamegraph agrees with --folded;
# a pinned instance takes --cgroup and -C.
#
# Two (or three) readloops wait for a go file, then make A and B reads, i.e. exactly A
# and B calls of vfs_read from ksys_read; everything else in the guest (the shell, the
# runner) makes its own calls meanwhile, which the filters must leave out.
. "$TD_LIB"
need_cmd topdown readloop taskset
need_func vfs_read

A=300 B=500
CG=/sys/fs/cgroup
[ -f $CG/cgroup.controllers ] || skip "no cgroup v2 at $CG"

# readers TAG N...: one readloop per N, waiting for $TD_TMP/go.TAG; pids in $R1 $R2 ...
readers() {
	_tag=$1
	shift
	rm -f "$TD_TMP/go.$_tag"
	_k=0 # (wait_line uses _i)
	for _n in "$@"; do
		_k=$((_k + 1))
		readloop "$_n" "$TD_TMP/go.$_tag" >"$TD_TMP/r$_k.out" 2>&1 &
		eval "R$_k=$!"
		wait_line "$TD_TMP/r$_k.out" "readloop: ready"
	done
}

# go TAG: let the readers of TAG read, wait for them, and for topdown to see them exit
# (it notices at its next poll).
go() {
	touch "$TD_TMP/go.$1"
	wait $R1 || fail "readloop failed"
	[ -z "${R2:-}" ] || wait $R2 || fail "readloop failed"
}

# 1. -p: exactly the reads of the process named, none of the other's.
readers p $A $B
td_start vfs_read --no-profile --no-auto -p $R1
grep -q "counting only calls of pid $R1 (readloop)" "$TD_ERR" || fail "-p: no header: $(cat "$TD_ERR")"
go p
wait_line "$TD_ERR" "pid $R1 (readloop) exited; no process of --pid is left"
td_stop INT
expect_eq "-p: exit status" "$TD_RC" 0
expect_eq "-p: ksys_read" "$(reason_count ksys_read)" $A
expect_eq "-p: total" "$(summary_num total)" $A
echo "$TD_SUMMARY" | grep -q "\"filter\":{\"pids\":\[$R1\],\"cgroup\":null,\"cpus\":null," ||
	fail "-p: no filter in the summary"

# 2. --cgroup (relative to the cgroup v2 mount): the process moved into a child of the
# cgroup named counts, the other does not.
mkdir -p $CG/tdtest/inner || fail "cannot create a cgroup"
readers cg $A $B
echo $R2 >$CG/tdtest/inner/cgroup.procs || fail "cannot move $R2"
td_start vfs_read --no-profile --no-auto --cgroup tdtest
grep -q "counting only calls in cgroup $CG/tdtest or below" "$TD_ERR" || fail "--cgroup: no header: $(cat "$TD_ERR")"
go cg
td_stop INT
expect_eq "--cgroup: ksys_read" "$(reason_count ksys_read)" $B
expect_eq "--cgroup: total" "$(summary_num total)" $B

# 3. -C with two pids: each reader pinned to a CPU of its own; only CPU 1's reads count.
rm -f "$TD_TMP/go.cpu"
taskset -c 1 readloop $A "$TD_TMP/go.cpu" >"$TD_TMP/r1.out" 2>&1 &
R1=$!
taskset -c 0 readloop $B "$TD_TMP/go.cpu" >"$TD_TMP/r2.out" 2>&1 &
R2=$!
wait_line "$TD_TMP/r1.out" "readloop: ready"
wait_line "$TD_TMP/r2.out" "readloop: ready"
td_start vfs_read --no-profile --no-auto -p $R1,$R2 -C 1
grep -q "counting only calls of pids $R1 (readloop), $R2 (readloop), on CPU 1\$" "$TD_ERR" ||
	fail "-C: no header: $(cat "$TD_ERR")"
go cpu
td_stop INT
expect_eq "-C 1: ksys_read" "$(reason_count ksys_read)" $A
expect_eq "-C 1: total" "$(summary_num total)" $A

# 4. Stacks: every read of one reader captured, its process named with each stack and
# for the reason; the flame graph's frames and totals are the folded stacks'.
R2=
readers st $A
td_start vfs_read --no-profile -p $R1 --stack-on ksys_read \
	--folded "$TD_TMP/st.folded" --flamegraph "$TD_TMP/st.svg"
go st
td_stop INT
expect_eq "stacks: ksys_read" "$(reason_count ksys_read)" $A
expect_eq "stacks: captured" "$(summary_num stacks_captured)" $A
procs=$(echo "$TD_SUMMARY" | grep -o '"stacks_by_reason":.*' | grep -o '"processes":\[[^]]*\]' | sort -u)
expect_eq "stacks: processes" "$procs" "\"processes\":[{\"comm\":\"readloop\",\"pid\":$R1,\"count\":$A}]"
# The folded lines: all ksys_read's, vfs_read the leaf; their counts add up to A.
expect_eq "folded: other roots" "$(grep -vc '^ksys_read;.*;vfs_read [0-9]*$' "$TD_TMP/st.folded")" 0
expect_eq "folded: total" "$(awk '{ s += $NF } END { print s }' "$TD_TMP/st.folded")" $A
# The SVG: one box per frame titled "NAME (N stacks, P%)"; per name the counts add up
# to the folded lines' (each frame of a line counted once per line), "all" to A.
grep -q '^<?xml' "$TD_TMP/st.svg" && grep -q '</svg>' "$TD_TMP/st.svg" || fail "not an SVG"
grep -o '<title>[^<]*</title>' "$TD_TMP/st.svg" | sed 's/<title>//; s/<\/title>//' |
	awk '{ i = match($0, / \([0-9,]+ stacks?, /); if (!i) next
		split(substr($0, i + 2), a, " "); gsub(",", "", a[1]); n[substr($0, 1, i - 1)] += a[1] }
		END { for (k in n) print k "\t" n[k] }' | sort >"$TD_TMP/svg.frames"
awk '{ c = $NF; sub(/ [0-9]+$/, ""); k = split($0, f, ";"); for (i = 1; i <= k; i++) n[f[i]] += c; t += c }
	END { for (x in n) print x "\t" n[x]; print "all\t" t }' "$TD_TMP/st.folded" | sort >"$TD_TMP/folded.frames"
if ! cmp -s "$TD_TMP/svg.frames" "$TD_TMP/folded.frames"; then
	diff "$TD_TMP/svg.frames" "$TD_TMP/folded.frames"
	fail "the flame graph's frames are not the folded stacks'"
fi
expect_eq "flame graph: all" "$(awk -F'\t' '$1 == "all" { print $2 }' "$TD_TMP/svg.frames")" $A
echo "ok: flame graph: $(wc -l <"$TD_TMP/svg.frames") frame names, counts as in the folded stacks"

# 5. A pinned instance with --cgroup: counts only the cgroup's reads; show says so.
readers pin $A $B
echo $R1 >$CG/tdtest/cgroup.procs || fail "cannot move $R1"
topdown pin vfs_read --no-profile --cgroup $CG/tdtest 2>"$TD_TMP/pin.err" || fail "pin: $(cat "$TD_TMP/pin.err")"
go pin
shown=$(topdown show vfs_read --json) || fail "show failed"
expect_eq "pinned --cgroup: total" "$(echo "$shown" | grep -o '"total":[0-9]*' | sed 's/.*://')" $A
echo "$shown" | grep -q "\"filter\":\"in cgroup $CG/tdtest or below\"" || fail "show: no filter: $shown"
topdown show vfs_read | grep -q "^  counting only calls in cgroup $CG/tdtest or below\$" || fail "show: no filter line"
topdown vfs_read -p 1 -d 1 >"$TD_TMP/out" 2>"$TD_TMP/err" && fail "a reader took -p"
grep -q "leave out --pid" "$TD_TMP/err" || fail "reader with -p: $(cat "$TD_TMP/err")"
topdown unpin vfs_read 2>/dev/null || fail "unpin failed"
rmdir $CG/tdtest/inner $CG/tdtest 2>/dev/null
expect_progs "programs left" 0
exit 0
