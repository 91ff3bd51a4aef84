# Start-up benchmark (prints figures; it checks only that every measurement was made):
# the time from exec to "attached" (timeto: to the first line of output holding a text),
# median of RUNS interleaved rounds after a warm-up run of each command (the first BPF
# load of a boot parses the kernel's BTF), everything on CPU 0:
#   - topdown vfs_read --no-profile, to "topdown: tracing vfs_read with ...", its first
#     line, printed right after attaching;
#   - topdown on the THP deferred-split function with its built-in profile (deeper-frame
#     rules, written right after attaching: the kernel's symbols are read while the
#     program loads, on another thread, here on the same CPU), to the same line;
#   - bpftrace's one-liner on vfs_read (fentry), if the guest has bpftrace
#     (tests/guest/run --bpftrace), to the line "__BPFTRACE_NOTIFY_PROBES_ATTACHED" that
#     it prints once every probe is attached when that variable is in its environment
#     (the hook bpftrace's own runtime tests wait on). A bpftrace without that hook is
#     timed to its "Attaching 1 probe..." line instead, printed before it loads and
#     attaches the program: a flattering figure, and said so.
# Software emulation: read the ratios, not the times.
# case-timeout: 400
. "$TD_LIB"
. /bench/lib.sh
need_cmd topdown timeto taskset
need_func vfs_read

RUNS=${TD_BENCH_RUNS:-7}
# TD_BENCH_QUICK=1 (the default suite's bench_quick case): one run after the warm-up, to
# show that the script still works; no figure to keep.
[ -z "${TD_BENCH_QUICK:-}" ] || RUNS=1
thp=deferred_split_folio
ktext $thp || thp=deferred_split_huge_page

# The commands: a label, the text that says "attached", the command line (eval'ed).
cat >"$TD_TMP/configs" <<EOC
topdown vfs_read --no-profile|topdown: tracing vfs_read with|topdown vfs_read --no-profile
topdown $thp (built-in profile)|topdown: tracing $thp with|topdown $thp
EOC
bt=
if bt_detect; then
	bt="bpftrace $bt_version -e '$bt_fentry:vfs_read { @n = count(); }'"
	cat >>"$TD_TMP/configs" <<EOC
$bt|$bt_attached|env __BPFTRACE_NOTIFY_PROBES_ATTACHED=1 $bt_cmd -e '$bt_fentry:vfs_read { @n = count(); }'
EOC
else
	echo "bench: notice: no bpftrace in this guest (tests/guest/run --bpftrace puts it there): no ratios"
fi

# one TEXT CMD: ns from exec of CMD to its first line holding TEXT.
one() {
	eval "taskset -c 0 timeto \"\$1\" $2" >"$TD_TMP/out" 2>"$TD_TMP/err" ||
		fail "timeto '$1' $2: $(cat "$TD_TMP/out" "$TD_TMP/err")"
	sed -n 's/^timeto: ns=//p' "$TD_TMP/err"
}

set -f # bpftrace's program holds *
: >"$TD_TMP/results"
for r in $(seq 0 "$RUNS"); do
	i=0
	while IFS='|' read -r label text cmd; do
		i=$((i + 1))
		ns=$(one "$text" "$cmd") || { echo "$ns"; exit 1; }
		[ "$r" = 0 ] || echo "$i $ns" >>"$TD_TMP/results" # round 0: the warm-up
	done <"$TD_TMP/configs"
done

# stat I: "MEDIAN MIN MAX" of command I, in ms.
stat() {
	awk -v i="$1" '$1 == i { print $2 }' "$TD_TMP/results" | sort -n | awk '{ v[NR] = $1 } END {
		if (NR) printf "%.1f %.1f %.1f", ((NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) / 1e6,
			v[1] / 1e6, v[NR] / 1e6 }'
}

echo "bench: kernel $TD_KERNEL, exec -> attached, median of $RUNS interleaved runs after a warm-up run, on CPU 0, software emulation (ratios only)"
nbt=$(wc -l <"$TD_TMP/configs")
bt_ms=
[ -z "$bt" ] || bt_ms=$(stat "$nbt" | cut -d' ' -f1)
i=0
while IFS='|' read -r label text cmd; do
	i=$((i + 1))
	set -- $(stat $i)
	[ -n "$1" ] || fail "no figure for $label"
	line="bench: $label: $1 ms (runs $2-$3 ms)"
	if [ -n "$bt" ] && [ "$i" != "$nbt" ]; then
		line="$line = $(awk -v a="$1" -v b="$bt_ms" 'BEGIN { printf "%.2f", a / b }')x bpftrace's"
	fi
	if [ "$i" = "$nbt" ] && [ -n "$bt" ]; then
		if [ "$bt_attached" = __BPFTRACE_NOTIFY_PROBES_ATTACHED ]; then
			line="$line (to its probes attached)"
		else
			line="$line (to \"Attaching...\", before it loads and attaches: flattering)"
		fi
	fi
	echo "$line"
done <"$TD_TMP/configs"
exit 0
