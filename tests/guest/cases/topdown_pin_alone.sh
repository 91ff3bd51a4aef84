# Tier 1 stands alone in the kernel: a pinned instance names the call sites first called
# after it was pinned by itself (Linux 5.17 on: bpf_loop, bpf_snprintf's %pS), with no
# topdown process alive, so `cat reasons` and `cat metrics` are exact before any reader
# has run, and show agrees. The callers are a module's, loaded after the pin: the RAM disk
# (brd) allocates one page the first time a page of the disk is written
# (brd_insert_page), so writing N distinct pages makes exactly N calls of the page
# allocator (alloc_pages_noprof from 6.10, alloc_pages on 6.1) from brd's functions. The
# module is then unloaded and loaded again, and written to again: its functions' calls
# add up. Before 5.17 (5.10) the pin says in one line that new sites are named when a
# topdown reads it, and show is exact.
. "$TD_LIB"
need_cmd topdown
brd_setup
ROOT=/sys/fs/bpf/topdown
trap 'rmmod brd 2>/dev/null; topdown unpin $F 2>/dev/null' EXIT

# brd_sum FILE: the calls of brd's functions in a `reasons` file.
brd_sum() {
	sed -n 's/^brd_[a-z_]*: \([0-9]*\)$/\1/p' "$1" | awk '{ s += $1 } END { print s + 0 }'
}

kmajor=$(uname -r | cut -d. -f1) kminor=$(uname -r | cut -d. -f2)
N=300 M=200
topdown pin $F --no-profile 2>"$TD_TMP/pin.err" || fail "pin failed: $(cat "$TD_TMP/pin.err")"
cat "$TD_TMP/pin.err"
[ -z "$(pidof topdown)" ] || fail "a topdown process is still running"
if [ "$kmajor" -lt 5 ] || { [ "$kmajor" = 5 ] && [ "$kminor" -lt 17 ]; }; then
	expect_eq "the pin's line on naming" "$(grep -c "^topdown: $F: calls from call sites first seen from now on are named when a topdown reads the pin (show, serve, a live run): the kernel names them itself from Linux 5.17 (bpf_loop), and this is $(uname -r)\$" "$TD_TMP/pin.err")" 1
	load_and_write $N
	json=$(topdown show $F --json) || fail "show failed"
	got=$(echo "$json" | grep -o '{"reason":"brd_[^"]*","count":[0-9]*' | sed 's/.*://' | awk '{ s += $1 } END { print s + 0 }')
	expect_eq "show: brd's calls, named by show" "$got" $N
	rmmod brd
	topdown unpin $F || fail "unpin failed"
	skip "new call sites are named in the kernel from Linux 5.17 (bpf_loop); show named them on $(uname -r)"
fi
grep -q "named when a topdown reads" "$TD_TMP/pin.err" && fail "pin: $(cat "$TD_TMP/pin.err")"

load_and_write $N
cat $ROOT/$F/reasons >"$TD_TMP/r1" || fail "cat reasons failed"
cat "$TD_TMP/r1"
grep -q "^unresolved" "$TD_TMP/r1" && fail "unresolved calls with no reader: $(grep "^unresolved" "$TD_TMP/r1")"
expect_eq "no reader: brd's calls" "$(brd_sum "$TD_TMP/r1")" $N
rmmod brd || fail "rmmod brd failed"
load_and_write $M
cat $ROOT/$F/reasons >"$TD_TMP/r2" || fail "cat reasons failed"
cat $ROOT/$F/metrics >"$TD_TMP/m2" || fail "cat metrics failed"
grep -q "^unresolved" "$TD_TMP/r2" && fail "unresolved calls with no reader after the reload"
expect_eq "no reader, brd loaded again: brd's calls" "$(brd_sum "$TD_TMP/r2")" $((N + M))
m=$(sed -n "s/^topdown_calls_total{function=\"$F\",reason=\"brd_[a-z_]*\"} \([0-9]*\)$/\1/p" "$TD_TMP/m2" |
	awk '{ s += $1 } END { print s + 0 }')
expect_eq "metrics: brd's calls" "$m" $((N + M))
# The files and show agree on every brd reason (nothing calls brd's functions now).
json=$(topdown show $F --json) || fail "show failed"
echo "$json" | grep -o '{"reason":"brd_[^"]*","count":[0-9]*' | sed 's/{"reason":"//; s/","count":/ /' |
	while read -r reason n; do
		grep -qx "$reason: $n" "$TD_TMP/r2" || fail "show has $reason $n, the file $(grep "^$reason:" "$TD_TMP/r2")"
		echo "ok: $reason: $n in show and the file"
	done || exit 1
rmmod brd
topdown unpin $F || fail "unpin failed"
exit 0
