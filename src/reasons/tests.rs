use super::*;
use crate::bpf::abi::{SLOT_NOT_FOUND, SLOT_SITES_FULL};

#[test]
fn slots_are_stable_and_special_slots_reserved() {
    let mut r = Reasons::new(64);
    assert_eq!(r.name(SLOT_NOT_FOUND), NOT_FOUND_NAME);
    assert_eq!(r.name(SLOT_SITES_FULL), SITES_FULL_NAME);
    let a = r.slot("a");
    let b = r.slot("b");
    assert_eq!((a, b), (2, 3));
    assert_eq!(r.slot("a"), a);
    assert_eq!(r.lookup("b"), Some(b));
    assert_eq!(r.reason_names().collect::<Vec<_>>(), ["a", "b"]);
}

#[test]
fn another_processs_names_are_adopted() {
    let mut r = Reasons::new(64);
    let a = r.slot("a");
    // Another process named slot 2 "b" first: "a" loses it.
    r.adopt(a, "b");
    assert_eq!((r.name(2), r.lookup("a")), ("b", None));
    assert_eq!(r.slot("a"), 3);
    // A name seen at another slot moves there.
    r.adopt(7, "a");
    assert_eq!(
        (r.lookup("a"), r.known(3), r.name(7)),
        (Some(7), false, "a")
    );
    assert_eq!(r.slot("c"), 3, "the freed slot is reused");
    r.adopt(9, OTHER_NAME);
    let names: Vec<(u32, &str)> = r.named().collect();
    assert_eq!(names, [(2, "b"), (3, "c"), (7, "a"), (9, "OTHER")]);
}

#[test]
fn past_the_limit_callers_merge_into_other() {
    let mut r = Reasons::new(2);
    let a = r.slot("a");
    let b = r.slot("b");
    let c = r.slot("c");
    let d = r.slot("d");
    assert_ne!(a, b);
    assert_eq!(c, d);
    assert_eq!(r.name(c), OTHER_NAME);
    assert_eq!(r.merged().iter().collect::<Vec<_>>(), ["c", "d"]);
    // A known reason keeps its slot after the table filled.
    assert_eq!(r.slot("a"), a);
    assert_eq!(r.name(5), "?");
}

#[test]
fn the_limit_is_capped_by_the_slot_array() {
    let mut r = Reasons::new(10_000);
    for i in 0..MAX_REASONS {
        r.slot(&format!("f{i}"));
    }
    let other = r.slot("one_too_many");
    assert_eq!(r.name(other), OTHER_NAME);
    assert_eq!(other as usize, NR_SLOTS - 1);
}

#[test]
fn routed_callers_share_a_reason_and_others_get_their_own() {
    let k = Kallsyms::parse(
        "ffffffff81000000 t zap_pte_range\nffffffff81001000 T folio_remove_rmap_ptes\nffffffff81002000 T other_caller\nffffffff81003000 T end\n",
    );
    let mut m = Mapper::auto(64);
    let zap = m.route("zap_pte_range", "ZAP");
    assert_eq!(m.route("folio_remove_rmap_ptes", "ZAP"), zap);
    assert_eq!(m.classify(&k, 0xffffffff81000100, None), zap);
    assert_eq!(m.classify(&k, 0xffffffff81001100, None), zap);
    let other = m.classify(&k, 0xffffffff81002100, None);
    assert_ne!(other, zap);
    assert_eq!(m.reasons.name(other), "other_caller");
    assert_eq!(
        m.callers_of(zap),
        ["folio_remove_rmap_ptes", "zap_pte_range"]
    );
    assert_eq!(m.callers_of(other), ["other_caller"]);
}

#[test]
fn source_patterns_match_inlined_functions_and_files_first() {
    struct Fake;
    impl SourceLookup for Fake {
        fn source(&mut self, addr: u64) -> Option<SourceLoc> {
            (addr == 0xffffffff81000fff).then(|| SourceLoc {
                functions: vec!["zap_pte_range".into(), "unmap_page_range.cold".into()],
                files: vec!["/build/linux/mm/memory.c".into()],
            })
        }
    }
    let k = Kallsyms::parse("ffffffff81000000 t unmap_page_range\nffffffff81002000 T end\n");
    let mut m = Mapper::auto(64);
    m.route_source(SourcePattern::Function("zap_pte_range".into()), "ZAP");
    m.route_source(SourcePattern::File("mm/memory.c".into()), "MEMORY");
    let (zap, mem) = (m.reasons.slot("ZAP"), m.reasons.slot("MEMORY"));
    // The inlined function, though the symbol is unmap_page_range.
    assert_eq!(m.classify(&k, 0xffffffff81001000, Some(&mut Fake)), zap);
    // Another address: no source location, so the caller's own name.
    let own = m.classify(&k, 0xffffffff81000100, Some(&mut Fake));
    assert_eq!(m.reasons.name(own), "unmap_page_range");
    // Without debug info the pattern cannot match.
    let own2 = m.classify(&k, 0xffffffff81001000, None);
    assert_eq!(own2, own);
    // A file pattern, when no function pattern comes first.
    m.by_source.remove(0);
    assert_eq!(m.classify(&k, 0xffffffff81001000, Some(&mut Fake)), mem);
}

#[test]
fn stack_reasons_are_profile_reasons_or_kernel_functions() {
    let k = Kallsyms::parse("ffffffff81000000 T vfs_read\nffffffff81001000 T end\n");
    let mut m = Mapper::auto(64);
    m.route("do_fault", "FAULT");
    m.reasons.slot("KHUGEPAGED");
    assert_eq!(m.stack_reason(&k, "FAULT").unwrap(), 2);
    let own = m.stack_reason(&k, "vfs_read").unwrap();
    assert_eq!(m.reasons.name(own), "vfs_read");
    let e = m.stack_reason(&k, "NOPE").unwrap_err().to_string();
    assert!(
        e.starts_with(
            "unknown reason 'NOPE' for --stack-on: give one of FAULT, KHUGEPAGED, vfs_read, not-found"
        ),
        "{e}"
    );
    let e = m.stack_reason(&k, "fault").unwrap_err().to_string();
    assert!(
        e.starts_with("unknown reason 'fault' for --stack-on: did you mean FAULT? give one of"),
        "{e}"
    );
    assert_eq!(m.stack_reason(&k, "not-found").unwrap(), SLOT_NOT_FOUND);
    assert_eq!(m.stack_reason(&k, NOT_FOUND_NAME).unwrap(), SLOT_NOT_FOUND);
    let e = Mapper::auto(4)
        .stack_reason(&k, "NOPE")
        .unwrap_err()
        .to_string();
    assert!(
        e.ends_with("give not-found or a caller function's name"),
        "{e}"
    );
}

#[test]
fn caller_names_fold_clones() {
    let k =
        Kallsyms::parse("ffffffff81000000 t collapse_huge_page.isra.0\nffffffff81001000 T next\n");
    assert_eq!(caller_name(&k, 0xffffffff81000010), "collapse_huge_page");
    assert_eq!(caller_name(&k, 0x1000), UNKNOWN_NAME);
}

/// Kernel text: the bytes of each call instruction that ends at an address.
struct Calls(Vec<(u64, [u8; crate::tailcall::BEFORE])>);

impl crate::tailcall::Text for Calls {
    fn read(&self, addr: u64, buf: &mut [u8]) -> bool {
        let n = crate::tailcall::BEFORE as u64;
        match self.0.iter().find(|(ret, _)| ret - n == addr) {
            Some((_, b)) if buf.len() == b.len() => {
                buf.copy_from_slice(b);
                true
            }
            _ => false,
        }
    }
}

/// `call rel32` ending at `ret`, to `to`.
fn call_to(ret: u64, to: u64) -> (u64, [u8; crate::tailcall::BEFORE]) {
    let rel = (to.wrapping_sub(ret) as i64 as i32).to_le_bytes();
    (
        ret,
        [0x90, 0x90, 0x90, 0xe8, rel[0], rel[1], rel[2], rel[3]],
    )
}

#[test]
fn call_sites_are_named_by_the_instruction_before_them() {
    let k = Kallsyms::parse(
        "ffffffff81000000 T func\nffffffff81001000 T plain\nffffffff81002000 T jumper\nffffffff81003000 T through_pointer\nffffffff81004000 T routed\nffffffff81005000 T __x86_indirect_thunk_rax\nffffffff81006000 T end\n",
    );
    let func = 0xffff_ffff_8100_0000;
    let thunk = 0xffff_ffff_8100_5000;
    let (plain, jumped, pointer, routed) = (
        0xffff_ffff_8100_1010,
        0xffff_ffff_8100_1020,
        0xffff_ffff_8100_3010,
        0xffff_ffff_8100_4010,
    );
    let text = Calls(vec![
        call_to(plain, func),
        call_to(jumped, 0xffff_ffff_8100_2000),
        call_to(pointer, thunk),
        call_to(routed, thunk),
    ]);
    let mut m = Mapper::auto(64);
    m.tail = Some(TailCalls::with(Box::new(text), func, false));
    let read = m.route("routed", "READ");
    let name = |m: &mut Mapper, ret| {
        let s = m.classify(&k, ret, None);
        m.reasons.name(s).to_string()
    };
    assert_eq!(name(&mut m, plain), "plain");
    assert_eq!(name(&mut m, jumped), "jumper (tail call)");
    // Through a pointer (a retpoline thunk): FUNC itself, or a function
    // that jumped to it; the name says which is not known.
    assert_eq!(name(&mut m, pointer), "through_pointer \u{2192} indirect");
    // A profile's route for the caller still holds.
    assert_eq!(m.classify(&k, routed, None), read);
    let sites = &m.tail.as_ref().unwrap().sites;
    assert_eq!((sites.tail_call_sites, sites.indirect_sites), (1, 2));
}

/// A names map in memory that counts the claims it is asked for.
#[derive(Default)]
struct CountingNames {
    names: std::cell::RefCell<HashMap<u32, String>>,
    claims: std::cell::Cell<usize>,
}

impl NameTable for CountingNames {
    fn merged_into(&self, _slot: u32) -> Result<Vec<String>> {
        Ok(Vec::new())
    }

    fn names(&self) -> Result<Vec<(u32, String)>> {
        let mut v: Vec<_> = self.names.borrow().clone().into_iter().collect();
        v.sort();
        Ok(v)
    }

    fn claim_name(&self, slot: u32, name: &str) -> Result<Claim> {
        self.claims.set(self.claims.get() + 1);
        let mut names = self.names.borrow_mut();
        // As the by_name index says: a name has one slot.
        if let Some((&other, _)) = names.iter().find(|(&s, n)| *n == name && s != slot) {
            return Ok(Claim::Elsewhere(other));
        }
        let held = names.entry(slot).or_insert_with(|| name.to_string());
        Ok(if held == name {
            Claim::Ours
        } else {
            Claim::Taken(held.clone())
        })
    }
}

#[test]
fn a_slot_is_claimed_once_then_known() {
    let table = CountingNames::default();
    let mut m = Mapper::auto(64);
    let a = m.reasons.slot("a");
    assert_eq!(m.claim(&table, a).unwrap(), a);
    assert_eq!(m.claim(&table, a).unwrap(), a);
    assert_eq!(
        table.claims.get(),
        1,
        "the second site of a reason asks nothing"
    );
    // Another process named the next slot first: adopted, and "b" claimed
    // where it lands, then known there.
    let b = m.reasons.slot("b");
    table.names.borrow_mut().insert(b, "other".into());
    let moved = m.claim(&table, b).unwrap();
    assert_ne!(moved, b);
    assert_eq!(m.reasons.name(moved), "b");
    assert_eq!(m.reasons.name(b), "other");
    let asked = table.claims.get();
    assert_eq!(m.claim(&table, moved).unwrap(), moved);
    assert_eq!(table.claims.get(), asked);
    assert_eq!(
        table.names().unwrap(),
        [(a, "a".into()), (b, "other".into()), (moved, "b".into())]
    );
}

#[test]
fn a_name_the_programs_gave_a_slot_first_is_taken_from_there() {
    let table = CountingNames::default();
    let mut m = Mapper::auto(64);
    let a = m.reasons.slot("a");
    assert_eq!(m.claim(&table, a).unwrap(), a);
    // The programs named "b" in slot 9 before this table allocated it.
    table.names.borrow_mut().insert(9, "b".into());
    let b = m.reasons.slot("b");
    assert_ne!(b, 9);
    assert_eq!(m.claim(&table, b).unwrap(), 9);
    assert_eq!(m.reasons.lookup("b"), Some(9));
    assert!(!m.reasons.known(b), "the slot asked for is free again");
    // Known there from now on: nothing more asked.
    let asked = table.claims.get();
    assert_eq!(m.claim(&table, 9).unwrap(), 9);
    assert_eq!(table.claims.get(), asked);
}

#[test]
fn slots_the_programs_named_are_adopted_once_they_count() {
    let table = CountingNames::default();
    let mut m = Mapper::auto(64);
    table.names.borrow_mut().insert(5, "brd_insert_page".into());
    let mut totals = vec![0u64; 16];
    m.adopt_new(&table, &totals).unwrap();
    assert!(!m.reasons.known(5), "no calls, nothing read");
    assert_eq!(table.claims.get(), 0);
    totals[5] = 3;
    m.adopt_new(&table, &totals).unwrap();
    assert_eq!(m.reasons.name(5), "brd_insert_page");
    assert_eq!(m.reasons.lookup("brd_insert_page"), Some(5));
}
