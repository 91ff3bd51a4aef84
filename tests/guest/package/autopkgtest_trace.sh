# The Debian package's autopkgtest trace-getpid (debian/tests/trace-getpid), which
# needs root on a machine of its own: run in the guest with the topdown given to
# tests/guest/run and the guest's pidloop. tests/run runs it with the system-libbpf
# build:
#   tests/guest/run --cases tests/guest/package \
#       --add debian/tests/trace-getpid:/usr/share/topdown-tests/trace-getpid
. "$TD_LIB"
need_cmd topdown pidloop
script=/usr/share/topdown-tests/trace-getpid
[ -r $script ] || skip "no $script in the guest (tests/guest/run --add debian/tests/trace-getpid:$script)"
echo "+ $(topdown --version)"
TOPDOWN=$(command -v topdown) PIDLOOP=$(command -v pidloop) AUTOPKGTEST_TMP=$TD_TMP sh $script ||
	fail "debian/tests/trace-getpid failed"
