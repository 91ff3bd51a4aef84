# readloop N prints its count and makes N reads.
. "$TD_LIB"
need_cmd readloop

out=$(readloop 1000) || fail "readloop 1000 exited with $?"
expect_eq "readloop 1000 output" "$out" "readloop: reads=1000"
out=$(readloop 0) || fail "readloop 0 exited with $?"
expect_eq "readloop 0 output" "$out" "readloop: reads=0"
readloop x >/dev/null 2>&1
expect_eq "exit status for a bad count" $? 2
exit 0
