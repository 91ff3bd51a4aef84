# Tail calls in module code: the RAM disk's bio handler, brd_submit_bio, ends in
# bio_endio(bio). directread reads /dev/ram0 N times with O_DIRECT, 4 KiB a read: N bios,
# each submitted and completed in its own process, so exactly N calls of bio_endio from
# brd_submit_bio (-p counts directread's calls only). __submit_bio calls brd_submit_bio
# through a pointer (the disk's fops->submit_bio): an indirect call.
#   x86-64 from 5.16 on (submit_bio returns nothing; no frame pointers, so sibling calls):
#     brd_submit_bio ends in "jmp bio_endio", and the return address lies in
#     __submit_bio, after the indirect call. Which function jumped cannot be known, nor
#     whether the pointer held bio_endio itself (an exported function may be called
#     through one): the N calls are named "__submit_bio → indirect", never plain
#     __submit_bio, and the site is counted as indirect, a tail call not ruled out
#     (--verify-caller; on 7.x the call goes to the retpoline thunk's __pi_ alias, which
#     must not be taken for a function that jumped);
#   x86-64 before it (5.10: brd_submit_bio returns a value after bio_endio) and arm64
#     (frame pointers: no sibling calls): a plain call, N calls under brd_submit_bio, and
#     a profile that names brd_submit_bio gets every call.
# --verify-caller (the full unwind) finds no mismatch either way.
. "$TD_LIB"
need_cmd topdown directread insmod rmmod
[ -f /lib/td-modules/brd.ko ] || skip "no RAM-disk module (brd) among $TD_KERNEL's packages"
insmod /lib/td-modules/brd.ko rd_nr=1 rd_size=4096 || fail "insmod brd.ko failed"
trap 'rmmod brd 2>/dev/null' EXIT
[ -b /dev/ram0 ] || fail "brd loaded, but no /dev/ram0"
need_func bio_endio

N=2000
# run_reads ARGS...: topdown bio_endio ARGS on N direct reads of directread only.
run_reads() {
	rm -f "$TD_TMP/go"
	directread /dev/ram0 $N "$TD_TMP/go" >"$TD_TMP/dr" 2>&1 &
	dr=$!
	wait_line "$TD_TMP/dr" "directread: ready"
	td_start bio_endio -p $dr --verify-caller "$@"
	touch "$TD_TMP/go"
	wait $dr || fail "directread failed: $(cat "$TD_TMP/dr")"
	td_stop INT
	expect_eq "exit status" "$TD_RC" 0
	expect_eq "total" "$(summary_num total)" $N
	expect_eq "caller not found" "$(summary_num caller_not_found)" 0
	expect_eq "mismatches" "$(summary_num mismatches)" 0
}

run_reads --no-profile
expect_eq "reasons" "$(reason_rows)" 1
ver=${TD_KERNEL%%-*}
major=${ver%%.*} minor=${ver#*.}
minor=${minor%%.*}
if ! grep -q '^CONFIG_FRAME_POINTER=y' "/boot/config-$TD_KERNEL" &&
	[ $((major * 100 + minor)) -ge 516 ]; then
	expect_eq "__submit_bio → indirect" "$(reason_count '__submit_bio → indirect')" $N
	expect_eq "__submit_bio" "$(reason_count __submit_bio)" 0
	expect_eq "indirect sites" "$(summary_num indirect_sites)" 1
	expect_eq "tail-call sites" "$(summary_num tail_call_sites)" 0
	expect_eq "indirect tail-call sites" "$(summary_num indirect_tail_call_sites)" 0
	exit 0
fi
expect_eq "brd_submit_bio" "$(reason_count brd_submit_bio)" $N
expect_eq "tail-call sites" "$(summary_num tail_call_sites)" 0
expect_eq "indirect sites" "$(summary_num indirect_sites)" 0

run_reads --rules 'RAMDISK=brd_submit_bio'
expect_eq "profile: RAMDISK" "$(reason_count RAMDISK)" $N
expect_eq "profile: reasons" "$(reason_rows)" 1
exit 0
