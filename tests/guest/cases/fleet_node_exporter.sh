# node_exporter (Debian's prometheus-node-exporter, copied in by tests/guest/run) reads
# the pinned metrics file through its textfile collector, as docs/always-on.md sets it
# up: a directory holding a symlink topdown_FUNC.prom to /sys/fs/bpf/topdown/FUNC/metrics
# (bpffs allows no dot in a name). Its scrape serves topdown_calls_total with the exact
# counts of a known workload, run twice, with no topdown process alive after the pin:
# the pinned program names new call sites itself. promtool check metrics passes on
# the file and on node_exporter's scrape. The THP deferred-split function is
# deferred_split_folio with its built-in profile (6.12 on), or on 6.1
# deferred_split_huge_page pinned with deeper-frame rules (MUNMAP, page_remove_rmap for
# a half MADV_DONTNEED, EXIT), 256 calls per PTE-mapped half of a THP unmapped. The file
# needs Linux 5.19 (BPF iterators with bpf_loop): on 5.10 the case checks the pin's
# one-line notice and skips, naming why.
. "$TD_LIB"
need_cmd topdown thp wget bpftool prometheus-node-exporter
split_fn
FN=$TD_SPLIT
ROOT=/sys/fs/bpf/topdown
F=3 P=2 Q=2 C=2

kmajor=$(uname -r | cut -d. -f1) kminor=$(uname -r | cut -d. -f2)
if [ "$kmajor" -lt 5 ] || { [ "$kmajor" = 5 ] && [ "$kminor" -lt 19 ]; }; then
	topdown pin $FN 2>"$TD_TMP/pin.err" || fail "pin failed: $(cat "$TD_TMP/pin.err")"
	cat "$TD_TMP/pin.err"
	notice=$(grep "^topdown: $FN: pinned without its reasons and metrics files: they need Linux 5.19 or later (BPF iterators with bpf_loop), and this is $(uname -r)\$" \
		"$TD_TMP/pin.err")
	expect_eq "the pin's notice lines" "$(echo "$notice" | grep -c .)" 1
	[ ! -e $ROOT/$FN/metrics ] || fail "a metrics file on $(uname -r)"
	topdown unpin $FN || fail "unpin failed"
	expect_progs "programs left" 0
	skip "no metrics file for node_exporter on Linux $(uname -r): the pinned BPF iterators need 5.19; pin said: ${notice#topdown: }"
fi

if [ $FN = deferred_split_huge_page ]; then
	PIN_ARGS="--rules $TD_RULES_61"
	MIX="--munmap-halves $P --dontneed-halves $Q"
	WANT="MUNMAP=$((2 * 256 * P)) page_remove_rmap=$((2 * 256 * Q)) EXIT=$((2 * 256 * (P + Q)))"
else
	PIN_ARGS=
	MIX="--faults $F --munmap-halves $P --dontneed-halves $Q --collapse $C"
	WANT="FAULT_ALLOC=$((2 * (F + P + Q))) ZAP=$((2 * (P + Q))) MADV_COLLAPSE=$((2 * C))"
fi

# shellcheck disable=SC2086 # PIN_ARGS's words are separate arguments
topdown pin $FN $PIN_ARGS 2>"$TD_TMP/pin.err" || fail "pin failed: $(cat "$TD_TMP/pin.err")"
[ -f $ROOT/$FN/metrics ] || fail "no metrics file: $(ls $ROOT/$FN) $(cat "$TD_TMP/pin.err")"
# shellcheck disable=SC2086 # MIX's words are separate arguments
thp $MIX >/dev/null || fail "thp failed"
# The same again, still with no topdown process: the pinned program names every call
# site itself (no reader has run at all).
[ -z "$(pidof topdown)" ] || fail "a topdown process is running"
# shellcheck disable=SC2086
thp $MIX >/dev/null || fail "thp failed"

cat $ROOT/$FN/metrics >"$TD_TMP/file.prom" || fail "cat metrics failed"
echo "--- $ROOT/$FN/metrics"
cat "$TD_TMP/file.prom"
echo "---"
grep -q "unresolved" "$TD_TMP/file.prom" && fail "unresolved calls in the file"

DIR=$TD_TMP/textfile
mkdir "$DIR"
ln -s $ROOT/$FN/metrics "$DIR/topdown_$FN.prom"
prometheus-node-exporter --collector.disable-defaults --collector.textfile \
	--collector.textfile.directory="$DIR" --web.listen-address=127.0.0.1:9100 2>"$TD_TMP/ne.log" &
ne_pid=$!
wait_line "$TD_TMP/ne.log" "Listening on.*127.0.0.1:9100" 60
timeout 30 wget -q -O "$TD_TMP/ne.txt" http://127.0.0.1:9100/metrics || fail "scrape of node_exporter failed"
echo "--- node_exporter's scrape, topdown's and the textfile collector's lines"
grep -E '^(# (HELP|TYPE) )?(topdown_|node_textfile)' "$TD_TMP/ne.txt"
echo "---"

for rn in $WANT; do
	line="topdown_calls_total{function=\"$FN\",reason=\"${rn%=*}\"} ${rn#*=}"
	grep -qx "$line" "$TD_TMP/file.prom" || fail "the file lacks '$line'"
	grep -qx "$line" "$TD_TMP/ne.txt" || fail "node_exporter lacks '$line': $(grep "\"${rn%=*}\"" "$TD_TMP/ne.txt")"
	echo "ok: node_exporter: $line"
done
# Every sample of the file, the same in the scrape (node_exporter sorts the labels).
sorted() {
	awk '/^topdown_/ {
		v = $NF; s = $0; sub(/ [^ ]*$/, "", s); i = index(s, "{")
		k = split(substr(s, i + 1, length(s) - i - 1), l, "\",")
		for (j = 1; j < k; j++) l[j] = l[j] "\""
		for (j = 2; j <= k; j++) for (m = j; m > 1 && l[m - 1] > l[m]; m--) { t = l[m]; l[m] = l[m - 1]; l[m - 1] = t }
		o = l[1]; for (j = 2; j <= k; j++) o = o "," l[j]
		print substr(s, 1, i) o "} " v
	}' "$1" | sort
}
sorted "$TD_TMP/file.prom" >"$TD_TMP/file.sorted"
sorted "$TD_TMP/ne.txt" >"$TD_TMP/ne.sorted"
cmp -s "$TD_TMP/file.sorted" "$TD_TMP/ne.sorted" ||
	fail "the scrape's topdown samples differ from the file's: $(diff "$TD_TMP/file.sorted" "$TD_TMP/ne.sorted")"
echo "ok: the scrape has the file's $(wc -l <"$TD_TMP/file.sorted") samples"
grep -qx "node_textfile_scrape_error 0" "$TD_TMP/ne.txt" || fail "node_textfile_scrape_error is not 0"
grep -q "^node_textfile_mtime_seconds{file=\"$DIR/topdown_$FN.prom\"} " "$TD_TMP/ne.txt" ||
	grep -q "^node_textfile_mtime_seconds{file=\"topdown_$FN.prom\"} " "$TD_TMP/ne.txt" ||
	fail "no node_textfile_mtime_seconds of topdown_$FN.prom"

# promtool (linting too) on the file and on the scrape.
if command -v promtool >/dev/null 2>&1; then
	for f in file.prom ne.txt; do
		if ! promtool check metrics <"$TD_TMP/$f" >"$TD_TMP/promtool.out" 2>&1 || [ -s "$TD_TMP/promtool.out" ]; then
			fail "promtool check metrics on $f: $(cat "$TD_TMP/promtool.out")"
		fi
		echo "ok: promtool check metrics passes $f ($(grep -vc '^#' "$TD_TMP/$f") samples)"
	done
else
	echo "note: no promtool in this guest: promtool check metrics not run"
fi

kill $ne_pid
wait_exit $ne_pid node_exporter
topdown unpin $FN || fail "unpin failed"
expect_progs "programs left" 0
exit 0
