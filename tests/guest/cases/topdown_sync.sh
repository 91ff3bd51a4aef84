# Declared pins: topdown pin --sync makes the pinned set match a pins.d directory
# (pins what is missing, re-pins what changed new-before-old, unpins what sync pinned
# and is declared no more, leaves hand-made pins alone), bad files are one line each
# while the others apply, and the counts of a synced pin are exact in show and on
# /metrics (the Prometheus text format, which promtool check metrics passes, unless
# OpenMetrics is asked for). Sync, unpin --synced and serve run with the capabilities
# their units leave them, as root: CAP_BPF, CAP_PERFMON and CAP_SYSLOG, and for pin
# (kprobe mode) CAP_SYS_ADMIN. The THP deferred-split function is deferred_split_folio (6.12 on), or
# on 6.1 and 5.10 deferred_split_huge_page, which page_remove_rmap calls for every
# PTE-mapped page of a THP it unmaps (256 at each half unmap, 256 more at exit; all
# ZAP in its built-in profile) and THP faults and collapses never call.
. "$TD_LIB"
need_cmd topdown thp bpftool wget capbound
need_func vfs_read vfs_write vfs_open
split_fn
FN=$TD_SPLIT

F=3 P=2 Q=2 C=2
ROOT=/sys/fs/bpf/topdown
D=$TD_TMP/pins.d
CAPS=bpf,perfmon,syslog
PIN_CAPS=$CAPS,sys_admin
mkdir -p "$D"

# decl FILE TEXT: writes a declaration, root's and not writable by others.
decl() {
	printf '%s\n' "$2" >"$D/$1"
	chmod 644 "$D/$1"
}
# sync [EXPECTED-STATUS]: topdown pin --sync on $D; stderr in $TD_TMP/sync.err.
# With topdown-pin.service's LimitMEMLOCK=infinity too: before 5.11 the BPF maps'
# memory counts against RLIMIT_MEMLOCK.
do_sync() {
	(ulimit -l unlimited && exec capbound $PIN_CAPS topdown pin --sync --config-dir "$D") 2>"$TD_TMP/sync.err"
	rc=$?
	sed 's/^/  sync: /' "$TD_TMP/sync.err"
	[ $rc = "${1:-0}" ] || fail "pin --sync: exit status $rc, want ${1:-0}"
}
synced_line() {
	grep -qx "$1" "$TD_TMP/sync.err" || fail "pin --sync: no line '$1'"
	echo "ok: line '$1'"
}
pinned_at() {
	topdown show "$1" --json | grep -o '"pinned_at":[0-9.]*' | sed 's/.*://'
}
reason_shown() {
	_v=$(echo "$SHOWN" | grep -o "{\"reason\":\"$1\",\"count\":[0-9]*" | sed 's/.*://')
	echo "${_v:-0}"
}
scrape() {
	http_get http://127.0.0.1:9476/metrics "$TD_TMP/metrics" || fail "scrape failed"
}
metric() {
	grep "^$1 " "$TD_TMP/metrics" | sed 's/.* //'
}


# vfs_read is declared in kprobe mode where the kernel has kprobe links (5.15; 5.10
# has none, and refuses a kprobe pin), else in fentry mode.
if kprobe_links; then
	VR_MODE=kprobe VR_KPROBE='
kprobe = true'
else
	VR_MODE=fentry VR_KPROBE=
fi

# 1. Two functions declared, synced; a second run changes nothing.
decl $FN.toml "function = \"$FN\""
decl vfs_read.toml "function = \"vfs_read\"
no-profile = true$VR_KPROBE"
do_sync
synced_line "topdown: pinned $FN with fentry as $FN.toml declares"
synced_line "topdown: pinned vfs_read with $VR_MODE as vfs_read.toml declares"
expect_eq "pinned" "$(ls $ROOT | tr '\n' ' ')" "$FN vfs_read "
expect_progs "programs" 2
t1=$(pinned_at $FN)
do_sync
expect_eq "second sync" "$(cat "$TD_TMP/sync.err")" \
	"topdown: nothing to change: 2 declared in $D and pinned"
expect_eq "second sync: pinned_at" "$(pinned_at $FN)" "$t1"
expect_progs "second sync: programs" 2

# The pinned files (BPF iterators) are made on 5.19 and later.
kmajor=$(uname -r | cut -d. -f1) kminor=$(uname -r | cut -d. -f2)
if [ "$kmajor" -gt 5 ] || { [ "$kmajor" = 5 ] && [ "$kminor" -ge 19 ]; }; then FILES=yes; else FILES=; fi
# file_calls FN REASON: REASON's calls of FN in its pinned metrics file.
file_calls() {
	grep "^topdown_calls_total{function=\"$1\",reason=\"$2\"} " $ROOT/$1/metrics | sed 's/.* //'
}
file_progs() {
	bpftool prog show 2>/dev/null | grep -c -E ' name (reasons_file|metrics_file) '
}
if [ "$FILES" ]; then
	expect_eq "files of the synced pins" "$(ls $ROOT/$FN/reasons $ROOT/vfs_read/metrics | wc -l)" 2
fi

# calls FN REASON: the metric of REASON's calls of pinned FN.
calls() {
	metric "topdown_calls_total{function=\"$1\",reason=\"$2\"}"
}

# 2. Exact counts of a workload with known effects, in show and on /metrics.
if [ $FN = deferred_split_huge_page ]; then
	thp --faults $F --munmap-halves $P --dontneed-halves $Q >/dev/null || fail "thp failed"
	SHOWN=$(topdown show $FN --json) || fail "show failed"
	expect_eq "show: ZAP" "$(reason_shown ZAP)" $((512 * (P + Q)))
	expect_eq "show: UNMAP" "$(reason_shown UNMAP)" 0
else
	thp --faults $F --munmap-halves $P --dontneed-halves $Q --collapse $C >/dev/null || fail "thp failed"
	SHOWN=$(topdown show $FN --json) || fail "show failed"
	expect_eq "show: FAULT_ALLOC" "$(reason_shown FAULT_ALLOC)" $((F + P + Q))
	expect_eq "show: ZAP" "$(reason_shown ZAP)" $((P + Q))
	expect_eq "show: MADV_COLLAPSE" "$(reason_shown MADV_COLLAPSE)" $C
fi
capbound $CAPS topdown serve --listen 127.0.0.1:9476 2>"$TD_TMP/serve.err" &
serve_pid=$!
wait_line "$TD_TMP/serve.err" "serving http://127.0.0.1:9476/metrics"
scrape
if [ $FN = deferred_split_huge_page ]; then
	expect_eq "metrics: ZAP" "$(calls $FN ZAP)" $((512 * (P + Q)))
	expect_eq "metrics: UNMAP" "$(calls $FN UNMAP)" 0
else
	expect_eq "metrics: FAULT_ALLOC" "$(calls $FN FAULT_ALLOC)" $((F + P + Q))
	expect_eq "metrics: ZAP" "$(calls $FN ZAP)" $((P + Q))
	expect_eq "metrics: MADV_COLLAPSE" "$(calls $FN MADV_COLLAPSE)" $C
fi
ts1=$(metric "topdown_pinned_timestamp_seconds{function=\"$FN\"}")
[ -n "$ts1" ] || fail "no pinned timestamp"
# vfs_read may gain callers between two scrapes: the series compared are $FN's.
check_formats "serve" http://127.0.0.1:9476 $FN

# 3. Re-sync after a change: the new instance replaces the old one (both count
# meanwhile), its counters start over, and the re-pin shows in the timestamp.
decl $FN.toml "function = \"$FN\"
depth = 32"
do_sync
synced_line "topdown: re-pinned $FN with fentry as $FN.toml declares"
expect_progs "re-pin: programs" 2
scrape
ts2=$(metric "topdown_pinned_timestamp_seconds{function=\"$FN\"}")
echo "timestamps: $ts1 -> $ts2"
[ "$(echo "$ts1 $ts2" | awk '{ print ($2 > $1) }')" = 1 ] || fail "timestamp not later: $ts1 -> $ts2"
expect_eq "re-pin: ZAP from zero" "$(calls $FN ZAP)" 0
thp --munmap-halves $P >/dev/null || fail "thp failed"
scrape
if [ $FN = deferred_split_huge_page ]; then
	expect_eq "re-pin: ZAP" "$(calls $FN ZAP)" $((512 * P))
	expect_eq "re-pin: UNMAP" "$(calls $FN UNMAP)" 0
else
	expect_eq "re-pin: ZAP" "$(calls $FN ZAP)" $P
	expect_eq "re-pin: FAULT_ALLOC" "$(calls $FN FAULT_ALLOC)" $P
fi
# The new instance's file: its counts, as serve (which resolved the sites) has them.
if [ "$FILES" ]; then
	cat $ROOT/$FN/reasons
	expect_eq "re-pin: ZAP in the metrics file" "$(file_calls $FN ZAP)" "$(calls $FN ZAP)"
fi
kill -INT $serve_pid
wait_exit $serve_pid "topdown serve" || fail "serve exited with $?"
do_sync
expect_eq "after re-pin: nothing to change" "$(cat "$TD_TMP/sync.err")" \
	"topdown: nothing to change: 2 declared in $D and pinned"

# 3b. An upgrade: an instance pinned by a topdown with an older map layout (its meta
# map rewritten as such a topdown left it, the layout read from there first, and the
# fresh map that layouts before 7 lack unpinned) is refused in one line that says how
# to re-pin, and sync replaces it, saying that its counts restart.
json='{"layout":3,"version":"0.9.0"}'
hex=$(printf '%s' "$json" | od -An -tx1 -v | tr -s ' \n' '  ')
pad=$(awk -v n=${#json} 'BEGIN { for (i = n; i < 32768; i++) printf "00 " }')
# shellcheck disable=SC2086 # one argument a byte
bpftool map update pinned $ROOT/$FN/meta key 0 0 0 0 value hex $hex $pad ||
	fail "cannot rewrite $FN's meta"
rm $ROOT/$FN/fresh || fail "cannot unpin $FN's fresh map"
expect_fail 1 "$FN's pinned instance cannot be read by this topdown (.* with map layout [0-9]*): it was pinned by topdown 0.9.0 with map layout 3; re-pin it: 'topdown pin --sync' if a declaration pins it (its counts restart), else 'topdown unpin $FN' and pin it again" show $FN
do_sync
synced_line "topdown: re-pinned $FN with fentry as $FN.toml declares (its old instance was made by a topdown with another map layout: its counts restart at 0)"
expect_progs "upgrade: programs" 2
SHOWN=$(topdown show $FN --json) || fail "show after the upgrade's sync failed"
expect_eq "upgrade: ZAP from zero" "$(reason_shown ZAP)" 0

# 4. Bad files: one line each, naming the file and the key; the good ones still
# apply; a synced function whose file turned bad stays pinned; nothing is made for
# a bad name.
topdown pin vfs_write --no-profile 2>/dev/null || fail "hand pin failed"
decl bad_depth.toml 'function = "vfs_readv"
depth = 500'
decl bad_key.toml 'function = "vfs_readv"
deep = 3'
decl bad_name.toml 'function = "../../../etc"'
decl bad_syntax.toml 'function = vfs_readv'
decl vfs_write.toml 'function = "vfs_write"'
decl vfs_read.toml 'function = "vfs_read"
kprobe = "yes"'
decl new.toml 'function = "vfs_open"
no_profile = true'
chmod 666 "$D/new.toml"
do_sync 1
synced_line "topdown: $D/bad_depth.toml: key 'depth': invalid value '500' for '--depth <N>': 500 is not in 1..=127"
grep -q "^topdown: $D/bad_key.toml: unknown key 'deep': keys are function and topdown pin's options: " "$TD_TMP/sync.err" ||
	fail "no unknown-key line"
synced_line "topdown: $D/bad_name.toml: key 'function': '../../../etc' is not a kernel function name: it starts with '.'"
grep -q "^topdown: $D/bad_syntax.toml: line 1: " "$TD_TMP/sync.err" || fail "no syntax line"
synced_line "topdown: $D/vfs_read.toml: key 'kprobe': a flag: give true or false"
synced_line "topdown: $D/new.toml: it is writable by others (mode 666): chmod go-w it"
synced_line "topdown: $D/vfs_write.toml: vfs_write is pinned by hand, not by topdown pin --sync: unpin it (topdown unpin vfs_write) for sync to pin it"
synced_line "topdown: 7 declarations in $D not applied (see above)"
expect_eq "bad: lines" "$(wc -l <"$TD_TMP/sync.err")" 8
expect_eq "bad: pinned" "$(ls $ROOT | tr '\n' ' ')" "$FN vfs_read vfs_write "
chmod 644 "$D/new.toml"
do_sync 1
synced_line "topdown: pinned vfs_open with fentry as new.toml declares"
rm "$D"/bad_*.toml "$D/vfs_write.toml"
decl vfs_read.toml "function = \"vfs_read\"
no-profile = true$VR_KPROBE"
do_sync
expect_eq "fixed: nothing to change" "$(cat "$TD_TMP/sync.err")" \
	"topdown: nothing to change: 3 declared in $D and pinned"

# 5. A directory that cannot be read changes nothing.
out=$(topdown pin --sync --config-dir "$TD_TMP/none" 2>&1) && fail "sync of a missing dir succeeded"
expect_eq "missing dir" "$out" \
	"topdown: cannot read $TD_TMP/none: No such file or directory (os error 2); declare pins there (one FUNC.toml each) or give --config-dir DIR"
expect_eq "missing dir: pinned" "$(ls $ROOT | tr '\n' ' ')" "$FN vfs_open vfs_read vfs_write "

# 6. unpin --synced: what sync pinned, not the hand-made pin.
(ulimit -l unlimited && exec capbound $PIN_CAPS topdown unpin --synced) 2>"$TD_TMP/unpin.err" || fail "unpin --synced failed: $(cat "$TD_TMP/unpin.err")"
expect_eq "unpin --synced: pinned" "$(ls $ROOT | tr '\n' ' ')" "vfs_write "
do_sync
expect_eq "synced again: pinned" "$(ls $ROOT | tr '\n' ' ')" "$FN vfs_open vfs_read vfs_write "

# 7. The configuration removed and synced: sync's pins go, the hand-made one stays;
# then nothing of topdown is left.
rm "$D"/*.toml
do_sync
synced_line "topdown: unpinned $FN: $FN.toml declares it no more"
synced_line "topdown: unpinned vfs_read: vfs_read.toml declares it no more"
synced_line "topdown: unpinned vfs_open: new.toml declares it no more"
expect_eq "config removed: pinned" "$(ls $ROOT | tr '\n' ' ')" "vfs_write "
topdown unpin vfs_write 2>/dev/null || fail "unpin failed"
expect_progs "programs left" 0
expect_settled "file iterator programs left" 0 file_progs
expect_maps "maps left" 0
expect_eq "pins left" "$(ls -A $ROOT)" ""
exit 0
