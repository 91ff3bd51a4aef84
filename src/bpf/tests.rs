//! The counting and stack paths' BPF code, run for real on the host kernel
//! through BPF_PROG_TEST_RUN on a raw_tp wrapper (this host refuses
//! fentry; the guest tests cover attaching). Needs root, as CI has.

use std::cell::RefCell;
use std::mem::MaybeUninit;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use libbpf_rs::{MapCore, MapHandle, RingBufferBuilder};

use crate::bpf::abi::{self, Config, StackStat, Stat, MAX_STACK_RANGES, SLOT_NONE, SLOT_NOT_FOUND};
use crate::bpf::ctl::{mono_ns, page_size, publish};
use crate::bpf::deep::{Deep, DeepCaller, DeepRule};
use crate::bpf::percpu::Pending;
use crate::bpf::probe::selftest;
use crate::bpf::probe::Probe;
use crate::bpf::skel::types::td_sample;
use crate::filter::Filter;
use crate::host::Features;

const FUNC: u64 = 0xffffffff82000000;

fn with_probe(f: impl FnOnce(&mut Probe<'_>)) {
    let mut storage = MaybeUninit::uninit();
    let config = Config {
        func_addr: FUNC,
        ..Config::default()
    };
    f(&mut selftest::load(&mut storage, &config));
}

#[test]
fn new_sites_are_pending_then_counted_in_their_slot() {
    if !crate::testing::bpf_or_skip() {
        return;
    }
    with_probe(|p| {
        let a = 0xffffffff81000123;
        assert!(!p.maps().take_new_sites());
        p.test_count(a, 3);
        assert_eq!(p.maps().pending().unwrap(), vec![(a, 3)]);
        assert!(p.maps().counts().unwrap().iter().all(|&n| n == 0));
        // The site's first call raised the flag that has it resolved soon;
        // taking it clears it, and the site's later calls leave it down.
        assert!(p.maps().take_new_sites());
        assert!(!p.maps().take_new_sites());
        p.test_count(a, 1);
        assert!(!p.maps().take_new_sites());

        p.maps().add_site(a, 7).unwrap();
        p.test_count(a, 5);
        assert_eq!(p.maps().counts().unwrap()[7], 5);
        assert!(!p.maps().take_new_sites());
        // The pending count is frozen once the site is known.
        assert_eq!(p.maps().pending().unwrap(), vec![(a, 4)]);
        // Only the calls before the cache knew the site took the slow path.
        assert_eq!(p.maps().stats().unwrap().get(Stat::TD_STAT_UNCACHED), 4);
    });
}

#[test]
fn calls_of_the_awake_topdown_process_are_left_out_and_no_other() {
    if !crate::testing::bpf_or_skip() {
        return;
    }
    with_probe(|p| {
        let a = 0xffffffff81000123;
        p.maps().add_site(a, 7).unwrap();
        p.test_count(a, 2);
        // Awake: this process's calls (the test runs are its own) take the
        // slow path, which leaves them out.
        p.maps().own(std::process::id());
        p.test_count(a, 3);
        let own = p.maps().stats().unwrap().get(Stat::TD_STAT_OWN_CALLS);
        // Another process awake: this one's calls count, through the slow
        // path as well.
        p.maps().own(1);
        p.test_count(a, 4);
        p.maps().own(0);
        p.test_count(a, 5);
        assert_eq!(p.maps().counts().unwrap()[7], 2 + 4 + 5);
        assert_eq!(own, 3);
        assert_eq!(p.maps().stats().unwrap().get(Stat::TD_STAT_OWN_CALLS), 3);
        // The cache served them all: none was uncached.
        assert_eq!(p.maps().stats().unwrap().get(Stat::TD_STAT_UNCACHED), 0);
    });
}

/// The lease fields as the BPF side sees them: (lease_ns, own_tgid,
/// reason, watch bytes).
fn steered(p: &Probe<'_>) -> (u64, u32, u32, [u8; 4]) {
    let (ctl, watch) = p.maps().control_ptr();
    // SAFETY: the object is alive; plain loads of mapped memory.
    unsafe {
        (
            std::ptr::read_volatile(std::ptr::addr_of!((*ctl).lease_ns)),
            std::ptr::read_volatile(std::ptr::addr_of!((*ctl).own_tgid)),
            std::ptr::read_volatile(std::ptr::addr_of!((*ctl).reason)),
            std::ptr::read_volatile(std::ptr::addr_of!((*watch).why)),
        )
    }
}

#[test]
fn a_readers_state_is_put_back_by_the_first_watched_call_past_its_lease() {
    if !crate::testing::bpf_or_skip() {
        return;
    }
    let a = 0xffffffff81000123;
    let mut storage = MaybeUninit::uninit();
    let config = capture_config();
    let mut p = selftest::load(&mut storage, &config);
    p.maps_mut().take_leases();
    p.maps().add_site(a, 7).unwrap();
    // A reader of another process, capturing slot 2: the lease is taken.
    p.maps().own(1);
    p.maps().capture(2, &[]).unwrap();
    let (lease, own, reason, why) = steered(&p);
    assert!(lease > mono_ns());
    assert_eq!((own, reason, why), (1, 2, [1, 1, 0, 0]));
    // Within the lease, calls take the slow path and nothing changes.
    p.test_count(a, 2);
    assert_eq!(steered(&p), (lease, 1, 2, [1, 1, 0, 0]));
    // The reader is killed: nobody renews. Past the lease, the first
    // watched call puts everything back, and is counted.
    let (ctl, _) = p.maps().control_ptr();
    // SAFETY: as in steered.
    unsafe { std::ptr::write_volatile(std::ptr::addr_of_mut!((*ctl).lease_ns), 1) };
    p.test_count(a, 1);
    assert_eq!(steered(&p), (0, 0, SLOT_NONE, [0, 0, 0, 0]));
    p.test_count(a, 4);
    assert_eq!(p.maps().counts().unwrap()[7], 2 + 1 + 4);
    // A reader that stalled past its lease publishes all of it again on
    // its next touch.
    p.maps().own(1);
    let (lease, own, reason, why) = steered(&p);
    assert!(lease > mono_ns());
    assert_eq!((own, reason, why), (1, 2, [1, 1, 0, 0]));
    // Nothing held: the lease is given up, and never runs out.
    p.maps().capture(SLOT_NONE, &[]).unwrap();
    p.maps().own(0);
    assert_eq!(steered(&p), (0, 0, SLOT_NONE, [0, 0, 0, 0]));
}

#[test]
fn the_pending_table_is_read_whole_in_batches() {
    if !crate::testing::bpf_or_skip() {
        return;
    }
    with_probe(|p| {
        let cpus = libbpf_rs::num_possible_cpus().unwrap();
        let online = std::thread::available_parallelism().map_or(1, |n| n.get());
        // More sites than a first read's room: several batch calls.
        let mut want: Vec<(u64, u64)> = (0..300u64)
            .map(|i| (0xffffffff81000000 + 0x40 * i, 1 + i % 3))
            .collect();
        for &(ret, n) in &want {
            for k in 0..n {
                p.test_count_on(ret, ((ret / 0x40 + k) as usize % online) as u32);
            }
        }
        let mut buf = Pending::default();
        let read = |buf: &mut Pending| {
            p.maps().read_pending(buf).unwrap();
            let mut got: Vec<(u64, u64)> = buf.sums().collect();
            got.sort();
            got
        };
        assert_eq!(read(&mut buf), want, "{cpus} possible CPUs");
        // The buffers are reused: more calls and a new site show.
        p.test_count(want[0].0, 2);
        want[0].1 += 2;
        p.test_count(0xffffffff81ff0000, 1);
        want.push((0xffffffff81ff0000, 1));
        assert_eq!(read(&mut buf), want);
    });
}

#[test]
fn a_missing_return_address_counts_as_not_found() {
    if !crate::testing::bpf_or_skip() {
        return;
    }
    with_probe(|p| {
        p.test_count(0, 4);
        let c = p.maps().counts().unwrap();
        assert_eq!(c[SLOT_NOT_FOUND as usize], 4);
        assert_eq!(c.iter().sum::<u64>(), 4);
        assert!(p.maps().pending().unwrap().is_empty());
    });
}

/// The self-test program, its deeper-frame rules walked with bpf_loop or
/// unrolled as on a kernel before 5.17.
fn load_walking_rules<'obj>(
    storage: &'obj mut MaybeUninit<libbpf_rs::OpenObject>,
    config: &Config,
    loop_helper: bool,
) -> Probe<'obj> {
    let host = Features {
        loop_helper,
        ..Features::probe()
    };
    selftest::load_on(storage, config, &host)
}

#[test]
fn deep_rules_fall_back_to_the_callers_reason_when_no_frame_matches() {
    if !crate::testing::bpf_or_skip() {
        return;
    }
    for loop_helper in [false, true] {
        deep_rules_fall_back(loop_helper);
    }
}

// No frame above the caller lies in the rule's range, so the caller's
// default reason must be used, never a pending or lost count.
fn deep_rules_fall_back(loop_helper: bool) {
    let mut storage = MaybeUninit::uninit();
    let config = Config {
        func_addr: FUNC,
        deep: Some(
            Deep {
                callers: vec![DeepCaller {
                    lo: 0xffffffff81000000,
                    hi: 0xffffffff81001000,
                    rule_first: 0,
                    rule_count: 1,
                    reason: 9,
                }],
                rules: vec![DeepRule {
                    lo: 0xffffffff81002000,
                    hi: 0xffffffff81003000,
                    reason: 10,
                    depth: 4,
                }],
            }
            .tables(),
        ),
        ..Config::default()
    };
    let p = load_walking_rules(&mut storage, &config, loop_helper);
    p.test_count(0xffffffff81000010, 6);
    let c = p.maps().counts().unwrap();
    assert_eq!(c[9], 6);
    assert_eq!(c[10], 0);
    assert!(p.maps().pending().unwrap().is_empty());
    assert_eq!(
        p.maps()
            .stats()
            .unwrap()
            .get(Stat::TD_STAT_DEEP_UNWIND_FAILED),
        0
    );
}

/// Loads the self-test program with `filter`, resolves one site to slot
/// 5, runs `f` and returns the calls counted.
fn filtered(filter: Filter, f: impl FnOnce(&Probe<'_>, u64)) -> u64 {
    let mut storage = MaybeUninit::uninit();
    let config = Config {
        func_addr: FUNC,
        filter: filter.for_bpf(),
        ..Config::default()
    };
    let p = selftest::load(&mut storage, &config);
    let site = 0xffffffff81000123;
    p.maps().add_site(site, 5).unwrap();
    f(&p, site);
    let c = p.maps().counts().unwrap();
    assert_eq!(c.iter().sum::<u64>(), c[5], "all in the site's slot");
    assert!(p.maps().pending().unwrap().is_empty());
    c[5]
}

#[test]
fn the_pid_filter_counts_only_its_processes() {
    if !crate::testing::bpf_or_skip() {
        return;
    }
    let me = std::process::id();
    let mine = Filter::check(&[me], None, None).unwrap();
    assert_eq!(filtered(mine.clone(), |p, site| p.test_count(site, 3)), 3);
    // pid 1 (init) runs no test: every call is filtered out.
    let other = Filter::check(&[1], None, None).unwrap();
    assert_eq!(filtered(other, |p, site| p.test_count(site, 3)), 0);
    // Both: ours counts. An exited process's pid taken out: nothing counts.
    let both = Filter::check(&[1, me], None, None).unwrap();
    assert_eq!(filtered(both.clone(), |p, site| p.test_count(site, 2)), 2);
    // An exited process is taken out in place: the others still count.
    let n = filtered(both.clone(), |p, site| {
        p.maps().drop_pid(1).unwrap();
        p.test_count(site, 4);
    });
    assert_eq!(n, 4);
    // A full list (every slot the BPF side scans): ours, last, counts.
    let mut full = Filter::check(&[1], None, None).unwrap();
    full.pids = vec![full.pids[0].clone(); abi::MAX_PIDS - 1];
    full.pids.push(mine.pids[0].clone());
    assert_eq!(full.tgids().len(), abi::MAX_PIDS);
    assert_eq!(filtered(full, |p, site| p.test_count(site, 3)), 3);
    let n = filtered(mine, |p, site| {
        p.maps().drop_pid(me).unwrap();
        p.maps().drop_pid(me).unwrap(); // gone already: not an error
        p.test_count(site, 2);
    });
    assert_eq!(n, 0);
}

#[test]
fn the_cpu_filter_counts_only_its_cpus() {
    if !crate::testing::bpf_or_skip() {
        return;
    }
    let cpus = libbpf_rs::num_possible_cpus().unwrap() as u32;
    let on = |list: Vec<u32>, runs: &[u32]| {
        let filter = Filter {
            cpus: Some(list),
            ..Filter::default()
        };
        filtered(filter, |p, site| {
            for &cpu in runs {
                p.test_count_on(site, cpu);
            }
        })
    };
    assert_eq!(on(vec![0], &[0, 0]), 2);
    if cpus > 1 {
        assert_eq!(on(vec![1], &[0, 1, 1, 0, 1]), 3);
        assert_eq!(on(vec![0, 1], &[0, 1]), 2);
    }
    // Unfiltered, every CPU counts.
    assert_eq!(
        filtered(Filter::default(), |p, site| p.test_count_on(site, cpus - 1)),
        1
    );
}

#[test]
fn the_cgroup_filter_counts_only_tasks_under_it() {
    if !crate::testing::bpf_or_skip() {
        return;
    }
    // The cgroup v2 hierarchy this process is in, and a cgroup beside it.
    let Some(mount) = std::fs::read_to_string("/proc/self/mounts")
        .unwrap()
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() > 2 && f[2] == "cgroup2").then(|| std::path::PathBuf::from(f[1]))
        })
    else {
        crate::testing::skip("no cgroup v2 mount");
        return;
    };
    let own = std::fs::read_to_string("/proc/self/cgroup")
        .unwrap()
        .lines()
        .find_map(|l| {
            l.strip_prefix("0::")
                .map(|p| p.trim_start_matches('/').to_string())
        })
        .unwrap();
    let mine = mount.join(&own);
    let under = |path: &std::path::Path| Filter::check(&[], Some(path), None).unwrap();
    assert_eq!(filtered(under(&mine), |p, site| p.test_count(site, 4)), 4);
    // The root: every task is below it.
    assert_eq!(filtered(under(&mount), |p, site| p.test_count(site, 1)), 1);
    let beside = mount.join(format!("topdown-test-{}", std::process::id()));
    if std::fs::create_dir(&beside).is_err() {
        crate::testing::skip(&format!(
            "its negative case: cannot create {}",
            beside.display()
        ));
        return;
    }
    let n = filtered(under(&beside), |p, site| p.test_count(site, 4));
    std::fs::remove_dir(&beside).unwrap();
    assert_eq!(n, 0);
}

/// The instructions of the self-test program as the verifier left them
/// (xlated), loaded with `filter`.
fn xlated_len(filter: Filter) -> u32 {
    let mut storage = MaybeUninit::uninit();
    let config = Config {
        func_addr: FUNC,
        filter: filter.for_bpf(),
        ..Config::default()
    };
    let p = selftest::load(&mut storage, &config);
    let mut info = libbpf_sys::bpf_prog_info::default();
    let mut len = std::mem::size_of::<libbpf_sys::bpf_prog_info>() as u32;
    // SAFETY: info is a zeroed bpf_prog_info and len its size; with no
    // buffers given the kernel only fills in sizes and counters.
    let rc = unsafe {
        libbpf_sys::bpf_prog_get_info_by_fd(p.selftest_fd().as_raw_fd(), &mut info, &mut len)
    };
    assert_eq!(rc, 0, "bpf_prog_get_info_by_fd");
    info.xlated_prog_len
}

/// A filter that is off costs nothing: the same bytecode, its switch a
/// constant false in .rodata, and the verifier drops its code.
#[test]
fn filters_that_are_off_leave_no_code() {
    if !crate::testing::bpf_or_skip() {
        return;
    }
    let none = xlated_len(Filter::default());
    let me = std::process::id();
    let pid = xlated_len(Filter::check(&[me], None, None).unwrap());
    let cpu = xlated_len(Filter {
        cpus: Some(vec![0]),
        ..Filter::default()
    });
    let both = xlated_len(Filter {
        cpus: Some(vec![0]),
        ..Filter::check(&[me], None, None).unwrap()
    });
    assert!(none < pid, "no filter: {none} bytes, --pid: {pid}");
    assert!(none < cpu, "no filter: {none} bytes, --cpu: {cpu}");
    // Each its own code: both filters make more than either alone.
    assert!(
        both > pid.max(cpu),
        "both: {both} bytes, --pid: {pid}, --cpu: {cpu}"
    );
}

const B: u64 = 0xffffffff80000000;

/// Caller range [0x1000, 0x2000), rule 1: a frame in [0x5000, 0x6000)
/// within 2 frames means slot 10; rule 2: a frame in [0x7000, 0x8000)
/// within 4 frames means slot 11; otherwise slot 9.
fn deep_tables() -> Deep {
    Deep {
        callers: vec![DeepCaller {
            lo: B + 0x1000,
            hi: B + 0x2000,
            rule_first: 0,
            rule_count: 2,
            reason: 9,
        }],
        rules: vec![
            DeepRule {
                lo: B + 0x5000,
                hi: B + 0x6000,
                reason: 10,
                depth: 2,
            },
            DeepRule {
                lo: B + 0x7000,
                hi: B + 0x8000,
                reason: 11,
                depth: 4,
            },
        ],
    }
}

/// Made-up stacks for deep_tables(): the frames above the caller, and the
/// slot the rules give.
const DEEP_CASES: [(&[u64], usize); 9] = [
    (&[B + 0x5010], 10),                                     // rule 1 at depth 1
    (&[B + 0x3000, B + 0x5010], 10),                         // rule 1 at depth 2
    (&[B + 0x3000, B + 0x3000, B + 0x5010], 9),              // rule 1 too deep
    (&[B + 0x3000, B + 0x3000, B + 0x3000, B + 0x7010], 11), // rule 2 at depth 4
    (&[B + 0x7010, B + 0x5010], 10),                         // both: the first rule wins
    (&[B + 0x6000], 10),                                     // return address at hi: inside (-1)
    (&[B + 0x5000], 9),                                      // return address at lo: outside
    (&[0, B + 0x5010], 9),                                   // the stack ends at a zero frame
    (
        &[B + 0x3000, B + 0x3000, B + 0x3000, B + 0x3000, B + 0x7010],
        9,
    ), // rule 2 too deep
];

const DEEP_CALLER: u64 = B + 0x1010;

/// Runs each DEEP_CASES stack i+1 times (caller DEEP_CALLER) and returns
/// the calls each slot should have.
fn run_deep_cases(p: &Probe<'_>) -> [u64; 12] {
    let mut want = [0u64; 12];
    for (i, (above, slot)) in DEEP_CASES.iter().enumerate() {
        let mut frames = vec![DEEP_CALLER];
        frames.extend_from_slice(above);
        p.test_count_stack(&frames, (i + 1) as u32);
        want[*slot] += (i + 1) as u64;
    }
    want
}

/// Deeper-frame rules on made-up stacks (deep_tables, DEEP_CASES), known
/// at load; walked with bpf_loop and without.
#[test]
fn deep_rules_match_frames_within_their_depth_first_rule_first() {
    if !crate::testing::bpf_or_skip() {
        return;
    }
    for loop_helper in [false, true] {
        deep_rules_match(loop_helper);
    }
}

fn deep_rules_match(loop_helper: bool) {
    let mut storage = MaybeUninit::uninit();
    let config = Config {
        func_addr: FUNC,
        deep: Some(deep_tables().tables()),
        ..Config::default()
    };
    let p = load_walking_rules(&mut storage, &config, loop_helper);
    let want = run_deep_cases(&p);
    let c = p.maps().counts().unwrap();
    assert_eq!(
        &c[9..12],
        &want[9..12],
        "slots 9, 10, 11, bpf_loop: {loop_helper}"
    );
    assert_eq!(c.iter().sum::<u64>(), want.iter().sum::<u64>());
    assert!(p.maps().pending().unwrap().is_empty());
    assert_eq!(
        p.maps()
            .stats()
            .unwrap()
            .get(Stat::TD_STAT_DEEP_UNWIND_FAILED),
        0
    );
}

/// The same stacks before the rules are filled in: counted in the early
/// table with the frames the rules look at, and given there, by the user
/// space mirror of the rules, the slots the BPF side gives the same stacks
/// once the rules are in. A site with no rules waits there too, and is
/// resolved as any pending site.
#[test]
fn calls_before_the_rules_are_kept_with_their_frames_and_agree_after() {
    if !crate::testing::bpf_or_skip() {
        return;
    }
    for loop_helper in [false, true] {
        calls_before_the_rules(loop_helper);
    }
}

/// The self-test program for deep_tables() with the rules not filled in
/// yet, as in the moments after attaching; and the rules, for set_deep.
fn load_before_the_rules(
    storage: &mut MaybeUninit<libbpf_rs::OpenObject>,
    loop_helper: bool,
) -> (Probe<'_>, Deep) {
    let deep = deep_tables();
    let config = Config {
        func_addr: FUNC,
        deep_depth: deep.depth(),
        ..Config::default()
    };
    (load_walking_rules(storage, &config, loop_helper), deep)
}

fn calls_before_the_rules(loop_helper: bool) {
    let mut storage = MaybeUninit::uninit();
    let (p, deep) = load_before_the_rules(&mut storage, loop_helper);
    let want = run_deep_cases(&p);
    let plain = B + 0x9010;
    p.test_count_stack(&[plain, B + 0x5010], 3);
    assert!(p.maps().counts().unwrap().iter().all(|&n| n == 0));
    assert!(p.maps().pending().unwrap().is_empty());
    let mut early = Pending::default();
    p.maps().read_early(&mut early).unwrap();
    let mut got = [0u64; 12];
    let mut plain_calls = 0;
    for (key, n) in early.entries() {
        // Frames past the deepest rule's depth are not kept.
        assert!(
            key[1 + deep.depth() as usize..].iter().all(|&f| f == 0),
            "{key:x?}"
        );
        match deep.slot(key[0], &key[1..]) {
            Some(slot) => got[slot as usize] += n,
            None => {
                assert_eq!(key[0], plain);
                plain_calls += n;
            }
        }
    }
    assert_eq!(got, want, "early calls by the user space rules");
    assert_eq!(plain_calls, 3);

    p.maps().set_deep(&deep);
    let again = run_deep_cases(&p);
    assert_eq!(again, want);
    let c = p.maps().counts().unwrap();
    assert_eq!(&c[..12], &want, "calls after the rules, by the BPF side");
    // Nothing more in the early table; the plain site is pending now.
    p.test_count_stack(&[plain], 2);
    let mut after = Pending::default();
    p.maps().read_early(&mut after).unwrap();
    let mut before: Vec<_> = early.entries().map(|(k, n)| (k.to_vec(), n)).collect();
    let mut now: Vec<_> = after.entries().map(|(k, n)| (k.to_vec(), n)).collect();
    before.sort();
    now.sort();
    assert_eq!(now, before);
    assert_eq!(p.maps().pending().unwrap(), vec![(plain, 2)]);
}

/// A call from a deeper-frame caller whose unwind fails takes the caller's
/// own reason and counts as a deep unwind failure: by the BPF side once
/// the rules are in, and by user space from the early table before.
#[test]
fn unwind_failures_count_the_same_before_and_after_the_rules() {
    if !crate::testing::bpf_or_skip() {
        return;
    }
    let mut storage = MaybeUninit::uninit();
    let (p, deep) = load_before_the_rules(&mut storage, true);
    let failed = |p: &Probe<'_>| {
        p.maps()
            .stats()
            .unwrap()
            .get(Stat::TD_STAT_DEEP_UNWIND_FAILED)
    };
    p.test_count_stack(&[DEEP_CALLER, abi::NO_FRAMES], 3);
    // A plain site's failed unwind changes nothing: it is not counted as one.
    p.test_count_stack(&[B + 0x9010, abi::NO_FRAMES], 2);
    let mut early = Pending::default();
    p.maps().read_early(&mut early).unwrap();
    let mut keys: Vec<_> = early.entries().map(|(k, n)| (k[..3].to_vec(), n)).collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            (vec![DEEP_CALLER, abi::NO_FRAMES, 0], 3),
            (vec![B + 0x9010, abi::NO_FRAMES, 0], 2)
        ]
    );
    assert_eq!(deep.slot(DEEP_CALLER, &keys[0].0[1..]), Some(9));
    assert_eq!(deep.unwind_failures(&early), 3);
    assert_eq!(failed(&p), 0, "the BPF side counts none before the rules");

    p.maps().set_deep(&deep);
    p.test_count_stack(&[DEEP_CALLER, abi::NO_FRAMES], 4);
    assert_eq!(p.maps().counts().unwrap()[9], 4);
    assert_eq!(failed(&p), 4);
}

/// Stacks on, every matched call sampled, one frame each.
fn capture_config() -> Config {
    Config {
        func_addr: FUNC,
        sample_every: 1,
        stack_frames: 1,
        stacks: true,
        ..Config::default()
    }
}

/// The stack ring buffer's size as the kernel made it, for a run with
/// `config`.
fn ring_bytes(config: &Config) -> u32 {
    let mut storage = MaybeUninit::uninit();
    let p = selftest::load(&mut storage, config);
    let ring = p.maps().samples().expect("the sample ring buffer");
    ring.max_entries()
}

/// A run that can never capture gets a ring buffer of one page; one that
/// can, the object's full 4 MiB.
#[test]
fn the_stack_ring_is_one_page_where_nothing_can_be_captured() {
    if !crate::testing::bpf_or_skip() {
        return;
    }
    let off = Config {
        func_addr: FUNC,
        ..Config::default()
    };
    assert_eq!(ring_bytes(&off) as usize, page_size());
    assert_eq!(ring_bytes(&capture_config()), 4 << 20);
}

/// A ring buffer on `map` that keeps each sample's caller and reason in
/// `out`.
fn sample_ring<'a>(
    map: &'a MapHandle,
    out: &'a RefCell<Vec<(u64, u32)>>,
) -> libbpf_rs::RingBuffer<'a> {
    let mut rb = RingBufferBuilder::new();
    rb.add(map, move |data: &[u8]| {
        let mut s = td_sample::default();
        plain::copy_from_bytes(&mut s, data).expect("a whole sample");
        out.borrow_mut().push((s.caller, s.reason));
        0
    })
    .unwrap();
    rb.build().unwrap()
}

/// Capture moves between two reasons while another thread runs the stack
/// path on calls of both: every sample names a reason that was captured,
/// and the right one (a resolved site by its slot, a pending site by the
/// tagged caller range).
#[test]
fn moving_capture_never_yields_a_sample_of_an_unknown_or_wrong_reason() {
    if !crate::testing::bpf_or_skip() {
        return;
    }
    const A: u32 = 2;
    const B: u32 = 3;
    let site_a = 0xffffffff81000010; // resolved: slot A
    let site_b = 0xffffffff81001010; // pending, inside B's caller range
    let b_range = (0xffffffff81001000, 0xffffffff81002000);
    let mut storage = MaybeUninit::uninit();
    let config = capture_config();
    let p = selftest::load(&mut storage, &config);
    p.maps().add_site(site_a, A).unwrap();
    p.maps().refill(u64::MAX).unwrap();
    let (ctl, watch) = p.maps().control_ptr();
    let (ctl, watch) = (ctl as usize, watch as usize);
    let fd = p.selftest_fd().as_raw_fd();
    let samples = RefCell::new(Vec::<(u64, u32)>::new());
    let map = p.maps().samples().unwrap();
    let rb = sample_ring(&map, &samples);
    let done = AtomicBool::new(false);
    let runs = AtomicU64::new(0);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            while !done.load(Ordering::Relaxed) {
                for site in [site_a, site_b] {
                    let mut ctx = selftest::context(&[site]);
                    let mut opts = libbpf_sys::bpf_test_run_opts {
                        sz: std::mem::size_of::<libbpf_sys::bpf_test_run_opts>() as _,
                        ctx_in: ctx.as_mut_ptr().cast(),
                        ctx_size_in: ctx.len() as u32,
                        ..Default::default()
                    };
                    // SAFETY: opts points to a live context buffer.
                    let rc = unsafe { libbpf_sys::bpf_prog_test_run_opts(fd, &mut opts) };
                    assert_eq!(rc, 0, "test run");
                    runs.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        // Move as fast as possible until the runner has made enough calls,
        // holding each state a moment so that every one is seen, even when
        // both threads share a CPU (a spin would let the runner see only
        // the few states it was preempted in).
        let start = Instant::now();
        let mut i = 0u64;
        while runs.load(Ordering::Relaxed) < 40_000 && start.elapsed() < Duration::from_secs(20) {
            i += 1;
            let (ctl, watch) = (ctl as *mut _, watch as *mut _);
            // SAFETY: the object outlives the scope.
            unsafe {
                match i % 3 {
                    0 => publish(ctl, watch, A, &[]),
                    1 => publish(ctl, watch, B, &[b_range]),
                    _ => publish(ctl, watch, SLOT_NONE, &[]),
                }
            }
            std::thread::sleep(Duration::from_micros(20));
            if i.is_multiple_of(50) {
                rb.consume().unwrap();
            }
        }
        done.store(true, Ordering::Relaxed);
    });
    let runs = runs.into_inner();
    rb.consume().unwrap();
    drop(rb);
    let samples = samples.into_inner();
    let stats = p.maps().stats().unwrap();
    eprintln!(
        "{runs} runs, {} samples, ring buffer full {}",
        samples.len(),
        stats.stack(StackStat::TD_STACK_RINGBUF_FULL)
    );
    assert!(
        samples.len() > 100,
        "too few samples to tell: {}",
        samples.len()
    );
    for (caller, reason) in &samples {
        let want = if *caller == site_a { A } else { B };
        assert_eq!(*reason, want, "sample of {caller:#x}");
    }
    let of = |r: u32| samples.iter().filter(|s| s.1 == r).count();
    assert!(
        of(A) > 0 && of(B) > 0,
        "{} samples of A, {} of B in {runs} runs",
        of(A),
        of(B)
    );
}

/// `--stack-on not-found`: the calls whose caller is not found are the
/// ones sampled, and no other.
#[test]
fn capture_on_not_found_samples_only_calls_without_a_caller() {
    if !crate::testing::bpf_or_skip() {
        return;
    }
    let site = 0xffffffff81000010;
    let mut storage = MaybeUninit::uninit();
    let config = capture_config();
    let p = selftest::load(&mut storage, &config);
    p.maps().add_site(site, 2).unwrap();
    p.maps().refill(u64::MAX).unwrap();
    p.maps().capture(SLOT_NOT_FOUND, &[]).unwrap();
    let samples = RefCell::new(Vec::<(u64, u32)>::new());
    let map = p.maps().samples().unwrap();
    let rb = sample_ring(&map, &samples);
    p.test_count(site, 5);
    p.test_count(0, 3);
    p.test_count(site, 5);
    rb.consume().unwrap();
    drop(rb);
    assert_eq!(samples.into_inner(), vec![(0, SLOT_NOT_FOUND); 3]);
    assert_eq!(p.maps().counts().unwrap()[SLOT_NOT_FOUND as usize], 3);
}

/// A pending site is captured when it lies in one of the stack reason's
/// caller ranges, the last of a full table included; with the ranges walked
/// by bpf_loop and unrolled as on a kernel before 5.17.
#[test]
fn pending_sites_are_captured_by_their_reasons_caller_ranges() {
    if !crate::testing::bpf_or_skip() {
        return;
    }
    for loop_helper in [false, true] {
        captured_by_ranges(loop_helper);
    }
}

fn captured_by_ranges(loop_helper: bool) {
    const R: u32 = 2;
    let resolved = 0xffffffff81000010; // resolved: slot R
    let other = 0xffffffff81000020; // resolved: slot R + 1
    let in_last = 0xffffffff81020010; // pending, in the last range
    let outside = 0xffffffff81100010; // pending, in no range
    let mut storage = MaybeUninit::uninit();
    let config = capture_config();
    let p = load_walking_rules(&mut storage, &config, loop_helper);
    p.maps().add_site(resolved, R).unwrap();
    p.maps().add_site(other, R + 1).unwrap();
    p.maps().refill(u64::MAX).unwrap();
    let ranges: Vec<(u64, u64)> = (0..MAX_STACK_RANGES as u64)
        .map(|i| {
            (
                0xffffffff81001000 + i * 0x1000,
                0xffffffff81001800 + i * 0x1000,
            )
        })
        .collect();
    assert!(ranges[MAX_STACK_RANGES - 1].0 < in_last && in_last < ranges[MAX_STACK_RANGES - 1].1);
    p.maps().capture(R, &ranges).unwrap();
    let samples = RefCell::new(Vec::<(u64, u32)>::new());
    let map = p.maps().samples().unwrap();
    let rb = sample_ring(&map, &samples);
    for site in [resolved, other, in_last, outside] {
        p.test_count(site, 2);
    }
    rb.consume().unwrap();
    drop(rb);
    assert_eq!(
        samples.into_inner(),
        vec![(resolved, R), (resolved, R), (in_last, R), (in_last, R)],
        "bpf_loop: {loop_helper}"
    );
}
