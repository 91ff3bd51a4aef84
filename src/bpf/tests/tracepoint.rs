//! A tracepoint's counting program (td_rawtp) through BPF_PROG_TEST_RUN:
//! run from the test-run code, with that code given as its glue, it counts
//! the call under the first frame outside it (the system call's code).

use super::*;
use crate::kallsyms::Kallsyms;

/// The test-run code that calls a raw tracepoint program, as glue.
const TEST_RUN: [&str; 2] = ["__bpf_prog_test_run_raw_tp", "bpf_prog_test_run_raw_tp"];

#[test]
fn a_tracepoint_is_counted_under_the_first_frame_outside_its_glue() {
    if !crate::testing::bpf_or_skip() {
        return;
    }
    let Ok(ksyms) = Kallsyms::load() else {
        return crate::testing::skip("/proc/kallsyms cannot be read");
    };
    let glue: Vec<(u64, u64)> = TEST_RUN
        .iter()
        .flat_map(|n| ksyms.function(n))
        .map(|s| (s.addr, s.end))
        .collect();
    if glue.is_empty() || ksyms.addresses_hidden() {
        return crate::testing::skip("no bpf_prog_test_run_raw_tp in /proc/kallsyms");
    }
    let config = LoadConfig {
        glue,
        ..LoadConfig::default()
    };
    let mut storage = MaybeUninit::uninit();
    let p = selftest::load_rawtp(&mut storage, &config);
    // A new site: counted per address until resolved, under the frame
    // above the test-run code (what the context's words say is no part).
    p.test_count(0xffffffff81000123, 3);
    let pending = p.maps().pending().unwrap();
    assert_eq!(pending.len(), 1, "{pending:x?}");
    let (ret, n) = pending[0];
    assert_eq!(n, 3);
    let caller = ksyms.caller_of(ret).map(|s| s.name.clone());
    let caller = caller.expect("the firing frame is in the kernel's text");
    assert!(
        !TEST_RUN.contains(&caller.as_str()) && caller.contains("bpf"),
        "counted under {caller}"
    );
    // Resolved: counted in its slot, and nothing as "caller not found".
    p.maps().add_site(ret, 7).unwrap();
    p.test_count(0xffffffff81000123, 5);
    let counts = p.maps().counts().unwrap();
    assert_eq!(counts[7], 5);
    assert_eq!(counts[SLOT_NOT_FOUND as usize], 0);
}

#[test]
fn without_its_glue_a_tracepoint_s_caller_is_not_found() {
    if !crate::testing::bpf_or_skip() {
        return;
    }
    let mut storage = MaybeUninit::uninit();
    let p = selftest::load_rawtp(&mut storage, &LoadConfig::default());
    p.test_count(0, 2);
    assert!(p.maps().pending().unwrap().is_empty());
    assert_eq!(p.maps().counts().unwrap()[SLOT_NOT_FOUND as usize], 2);
}

#[test]
fn an_unloaded_module_s_frames_are_forgotten() {
    if !crate::testing::bpf_or_skip() {
        return;
    }
    let mut storage = MaybeUninit::uninit();
    let p = selftest::load_rawtp(&mut storage, &LoadConfig::default());
    let maps = p.maps();
    assert_eq!(maps.learned_frames(), 0);
    maps.set_learned_frame(5, 0xffff_8100_0123_4008);
    assert_eq!(maps.learned_frames(), 1);
    maps.set_learned_frame(4095, 7);
    assert_eq!(maps.learned_frames(), 2);
    maps.forget_frames().unwrap();
    assert_eq!(maps.learned_frames(), 0);
}
