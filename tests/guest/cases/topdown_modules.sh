# A module loaded, unloaded and loaded again during a run. topdown read the kernel's
# symbols before the module was there: its call sites are named only if topdown reads
# them again when a new site lies in no symbol it knows (else they count as [unknown]).
# Unloaded, the module's sites are forgotten, their counts kept; loaded again (often at
# the same address), its sites are resolved anew, and nothing is counted twice.
# The RAM disk (brd) allocates one page the first time a page of the disk is written
# (brd_insert_page): writing N distinct pages makes exactly N calls of the page
# allocator (alloc_pages_noprof from 6.10, alloc_pages on 6.1, alloc_pages_current on
# 5.10) from brd's functions.
. "$TD_LIB"
need_cmd topdown
brd_setup
trap 'rmmod brd 2>/dev/null' EXIT

# brd_calls: the calls counted under brd's functions in $TD_SUMMARY.
brd_calls() {
	echo "$TD_SUMMARY" | grep -o '{"reason":"brd_[^"]*","count":[0-9]*' | sed 's/.*://' |
		awk '{ s += $1 } END { print s + 0 }'
}

# loaded_notices N: wait until topdown has said N times that it read brd's symbols: by
# then the sites of its calls so far are resolved (a module unloaded before topdown's
# next poll, 50 ms, takes its names with it: its sites count as [unknown]).
loaded_notices() {
	_i=0
	until [ "$(grep -c "module brd loaded: kernel symbols read again" "$TD_ERR")" -ge "$1" ]; do
		_i=$((_i + 1))
		[ $_i -lt 100 ] || fail "no notice of brd's load ($1) after 10 s: $(cat "$TD_ERR")"
		sleep 0.1
	done
}

N=300 M=200
td_start "$F" --no-profile
load_and_write $N
loaded_notices 1
rmmod brd || fail "rmmod brd failed"
wait_line "$TD_ERR" "module brd unloaded" 10
load_and_write $M
loaded_notices 2
td_stop INT
cat "$TD_ERR"
expect_eq "exit status" "$TD_RC" 0
grep -q "module brd unloaded: [1-9][0-9]* call sites\{0,1\} in it forgotten" "$TD_ERR" ||
	fail "no notice of brd's sites forgotten: $(cat "$TD_ERR")"
expect_eq "calls from brd's functions" "$(brd_calls)" $((N + M))
exit 0
