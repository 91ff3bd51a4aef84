//! Stack capture: the ring's size, moving capture between reasons while
//! calls run, several reasons at once, and who is sampled.

use super::*;

/// The stack ring buffer's size as the kernel made it, for a run with
/// `config`.
fn ring_bytes(config: &LoadConfig) -> u32 {
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
    let off = LoadConfig {
        func_addr: FUNC,
        ..LoadConfig::default()
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
        let s = Sample::decode(data).expect("a whole sample");
        out.borrow_mut().push((s.caller, s.reason));
        0
    })
    .unwrap();
    rb.build().unwrap()
}

/// Runs the self-test program (`fd`) on each of `sites` in turn until
/// `done`, counting the runs in `runs`.
fn run_until(fd: i32, sites: [u64; 2], done: &AtomicBool, runs: &AtomicU64) {
    while !done.load(Ordering::Relaxed) {
        for site in sites {
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
}

/// Capture moves between two reasons, and to both at once, while another
/// thread runs the stack path on calls of both: every sample names a
/// reason that was captured, and the right one (a resolved site by its
/// slot, a pending site by the tagged caller range).
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
    // site_b pending at every call: in a pool slot, its entry would reach
    // the gate only while flagged, which capture does through flag_sites
    // (left out here), not publish; until then its first unwanted call
    // clears the flag, and B would have no sample at all if the runner
    // came first.
    let config = LoadConfig {
        no_pool: true,
        ..capture_config()
    };
    let p = selftest::load(&mut storage, &config);
    p.maps().add_site(site_a, A).unwrap();
    p.maps().refill_every(u64::MAX).unwrap();
    let (ctl, watch) = p.maps().control_ptr();
    let (ctl, watch) = (ctl as usize, watch as usize);
    // Capture on A flags A's cached site, as Maps::capture does; the
    // program clears the flag at its first call while another reason is
    // captured.
    let (cell_a, entry_a) = p.maps().site_cell_ptr(site_a, A);
    let cell_a = cell_a as usize;
    let fd = p.selftest_fd().as_raw_fd();
    let samples = RefCell::new(Vec::<(u64, u32)>::new());
    let map = p.maps().samples().unwrap();
    let rb = sample_ring(&map, &samples);
    let done = AtomicBool::new(false);
    let runs = AtomicU64::new(0);
    std::thread::scope(|scope| {
        scope.spawn(|| run_until(fd, [site_a, site_b], &done, &runs));
        // Move as fast as possible until the runner has made enough calls,
        // holding each state a moment so that every one is seen, even when
        // both threads share a CPU (a spin would let the runner see only
        // the few states it was preempted in).
        let start = Instant::now();
        let mut i = 0u64;
        // Enough calls, and enough moves that each state is held many
        // times, however the two threads are scheduled.
        while (runs.load(Ordering::Relaxed) < 40_000 || i < 400)
            && start.elapsed() < Duration::from_secs(20)
        {
            i += 1;
            let (ctl, watch) = (ctl as *mut _, watch as *mut _);
            // SAFETY: the object outlives the scope; the cell is an
            // aligned u64 of the mapped .bss.
            let a = Captured {
                slot: A,
                callers: vec![],
            };
            let b = Captured {
                slot: B,
                callers: vec![b_range],
            };
            unsafe {
                match i % 4 {
                    0 | 3 => {
                        let set = if i % 4 == 0 { vec![a] } else { vec![a, b] };
                        publish(ctl, watch, &set);
                        let cell = AtomicU64::from_ptr(cell_a as *mut u64);
                        let _ = cell.compare_exchange(
                            entry_a,
                            entry_a ^ 1,
                            Ordering::SeqCst,
                            Ordering::SeqCst,
                        );
                    }
                    1 => publish(ctl, watch, &[b]),
                    _ => publish(ctl, watch, &[]),
                }
            }
            std::thread::sleep(Duration::from_micros(20));
            if i % 50 == 0 {
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
    p.maps().refill_every(u64::MAX).unwrap();
    p.maps()
        .capture_set(&[Captured {
            slot: SLOT_NOT_FOUND,
            callers: Vec::new(),
        }])
        .unwrap();
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
    p.maps().refill_every(u64::MAX).unwrap();
    let ranges: Vec<(u64, u64)> = (0..MAX_STACK_RANGES as u64)
        .map(|i| {
            (
                0xffffffff81001000 + i * 0x1000,
                0xffffffff81001800 + i * 0x1000,
            )
        })
        .collect();
    assert!(ranges[MAX_STACK_RANGES - 1].0 < in_last && in_last < ranges[MAX_STACK_RANGES - 1].1);
    p.maps()
        .capture_set(&[Captured {
            slot: R,
            callers: ranges.clone(),
        }])
        .unwrap();
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

/// The samples in `p`'s ring buffer now, as (reason, background).
fn ring_now(p: &Probe<'_>) -> Vec<(u32, bool)> {
    let out = RefCell::new(Vec::new());
    let map = p.maps().samples().unwrap();
    let mut rb = RingBufferBuilder::new();
    rb.add(&map, |data: &[u8]| {
        let s = Sample::decode(data).expect("a whole sample");
        out.borrow_mut().push((s.reason, s.background));
        0
    })
    .unwrap();
    rb.build().unwrap().consume().unwrap();
    out.into_inner()
}

/// How many of `got` are background samples of `reason`.
fn background_of(got: &[(u32, bool)], reason: u32) -> usize {
    got.iter().filter(|&&s| s == (reason, true)).count()
}

/// The background sampler, on one CPU: a flagged site's calls take the
/// reason's bucket (16 in a row with --background-stacks 16) and then
/// clear the flag, so the rest take the common path; each reason has its
/// own bucket, calls from sites not resolved yet one of their own; a
/// reason being captured is the capture's, not the sampler's; and every
/// call is counted once, in its slot, whichever path it took.
#[test]
fn the_background_sampler_takes_a_bursts_first_calls_per_reason() {
    if !crate::testing::bpf_or_skip() {
        return;
    }
    const A: u32 = 2;
    const B: u32 = 3;
    let (site_a, site_b) = (0xffffffff81000010, 0xffffffff81001018);
    let pending = 0xffffffff81002010;
    let mut storage = MaybeUninit::uninit();
    let config = LoadConfig {
        background: 16,
        ..capture_config()
    };
    let p = selftest::load(&mut storage, &config);
    p.maps().add_site(site_a, A).unwrap();
    p.maps().add_site(site_b, B).unwrap();
    p.maps().flag_sites(&[], true);
    for _ in 0..40 {
        p.test_count_on(site_a, 0);
    }
    let got = ring_now(&p);
    assert_eq!(background_of(&got, A), 16, "{got:?}");
    assert_eq!(got.len(), 16);
    // The flag was cleared with the bucket empty: the other 24 calls took
    // the common path, and none counts as uncached.
    let st = p.maps().stats().unwrap();
    assert_eq!(st.get(Stat::TD_STAT_UNCACHED), 0);
    assert_eq!(st.stack(StackStat::TD_STACK_BG_SENT), 16);
    // B's bucket is its own; pending calls have theirs.
    for _ in 0..20 {
        p.test_count_on(site_b, 0);
        p.test_count_on(pending, 0);
    }
    let got = ring_now(&p);
    assert_eq!(background_of(&got, B), 16, "{got:?}");
    assert_eq!(background_of(&got, SLOT_NONE), 16, "{got:?}");
    assert_eq!(got.len(), 32);
    // Flagged again within the refill time (a token every 250 ms): A's
    // bucket holds at most one more.
    p.maps().flag_sites(&[], true);
    for _ in 0..10 {
        p.test_count_on(site_a, 0);
    }
    assert!(background_of(&ring_now(&p), A) <= 1);
    // Capture on A: A's calls are the capture's, B's still the sampler's
    // (its bucket is empty by now: the flag is cleared, nothing sent).
    p.maps().refill_every(u64::MAX).unwrap();
    p.maps()
        .capture_set(&[Captured {
            slot: A,
            callers: Vec::new(),
        }])
        .unwrap();
    p.maps().flag_sites(&[], true);
    for _ in 0..5 {
        p.test_count_on(site_a, 0);
        p.test_count_on(site_b, 0);
    }
    let got = ring_now(&p);
    assert_eq!(
        got.iter().filter(|&&s| s == (A, false)).count(),
        5,
        "{got:?}"
    );
    assert!(background_of(&got, B) <= 1, "{got:?}");
    let counts = p.maps().counts().unwrap();
    assert_eq!((counts[A as usize], counts[B as usize]), (55, 25));
    assert_eq!(p.maps().pending().unwrap(), vec![(pending, 20)]);
}

/// --background-stacks 0 leaves the sampler out: a flagged site that is
/// not captured takes no stack, and its first call clears the flag.
#[test]
fn no_background_stacks_without_the_sampler() {
    if !crate::testing::bpf_or_skip() {
        return;
    }
    let site = 0xffffffff81000010;
    let mut storage = MaybeUninit::uninit();
    let p = selftest::load(&mut storage, &capture_config());
    p.maps().add_site(site, 2).unwrap();
    p.maps().flag_sites(&[], true);
    let (cell, entry) = p.maps().site_cell_ptr(site, 2);
    // SAFETY: the object is alive; a plain load of mapped memory.
    let now = || unsafe { std::ptr::read_volatile(cell) };
    assert_eq!(now(), entry ^ 1);
    p.test_count(site, 10);
    assert_eq!(now(), entry);
    assert!(ring_now(&p).is_empty());
    assert_eq!(p.maps().counts().unwrap()[2], 10);
    assert_eq!(p.maps().stats().unwrap().get(Stat::TD_STAT_UNCACHED), 0);
}

/// Capture flags the captured reason's cached sites and nothing else: its
/// calls reach the stack gate, another reason's stay on the common path
/// (no watch byte is set), and a site resolved during the capture comes
/// in flagged. Moved elsewhere, the old reason's flags are cleared by
/// their next call.
#[test]
fn capture_leaves_the_common_path_to_other_reasons() {
    if !crate::testing::bpf_or_skip() {
        return;
    }
    const A: u32 = 2;
    const B: u32 = 3;
    let (site_a, site_b, late_a) = (0xffffffff81000010, 0xffffffff81001018, 0xffffffff81002020);
    let mut storage = MaybeUninit::uninit();
    let p = selftest::load(&mut storage, &capture_config());
    p.maps().add_site(site_a, A).unwrap();
    p.maps().add_site(site_b, B).unwrap();
    p.maps().refill_every(u64::MAX).unwrap();
    p.maps()
        .capture_set(&[Captured {
            slot: A,
            callers: Vec::new(),
        }])
        .unwrap();
    p.maps().add_site(late_a, A).unwrap();
    let cell = |ret, slot| {
        let (c, e) = p.maps().site_cell_ptr(ret, slot);
        // SAFETY: the object is alive; a plain load of mapped memory.
        unsafe { std::ptr::read_volatile(c) ^ e }
    };
    assert_eq!(
        (cell(site_a, A), cell(late_a, A), cell(site_b, B)),
        (1, 1, 0)
    );
    let (_, watch) = p.maps().control_ptr();
    // SAFETY: as above.
    assert_eq!(
        unsafe { std::ptr::read_volatile(std::ptr::addr_of!((*watch).why)) },
        [0; 4]
    );
    for _ in 0..3 {
        p.test_count(site_a, 1);
        p.test_count(late_a, 1);
        p.test_count(site_b, 1);
    }
    assert_eq!(ring_now(&p), vec![(A, false); 6]);
    assert_eq!((cell(site_a, A), cell(late_a, A)), (1, 1));
    p.maps()
        .capture_set(&[Captured {
            slot: B,
            callers: Vec::new(),
        }])
        .unwrap();
    p.test_count(site_a, 1);
    p.test_count(site_b, 2);
    assert_eq!(ring_now(&p), vec![(B, false); 2]);
    assert_eq!(
        (cell(site_a, A), cell(late_a, A), cell(site_b, B)),
        (0, 1, 1)
    );
    let counts = p.maps().counts().unwrap();
    assert_eq!((counts[A as usize], counts[B as usize]), (7, 5));
    assert_eq!(p.maps().stats().unwrap().get(Stat::TD_STAT_UNCACHED), 0);
}

/// Each reason draws on a budget of its own: a reason that spent its
/// budget leaves the next captured reason's whole, and the calls over a
/// budget are counted as rate capped under their reason.
#[test]
fn each_captured_reason_spends_its_own_budget() {
    if !crate::testing::bpf_or_skip() {
        return;
    }
    const A: u32 = 2;
    const B: u32 = 3;
    let (site_a, site_b) = (0xffffffff81000010, 0xffffffff81001018);
    let mut storage = MaybeUninit::uninit();
    let p = selftest::load(&mut storage, &capture_config());
    p.maps().add_site(site_a, A).unwrap();
    p.maps().add_site(site_b, B).unwrap();
    // A budget is per CPU: the runs are all on CPU 0.
    p.maps().refill(A, 3, 0).unwrap();
    p.maps().refill(B, 5, 0).unwrap();
    p.maps()
        .capture_set(&[Captured {
            slot: A,
            callers: Vec::new(),
        }])
        .unwrap();
    (0..10).for_each(|_| p.test_count_on(site_a, 0));
    assert_eq!(ring_now(&p), vec![(A, false); 3]);
    p.maps()
        .capture_set(&[Captured {
            slot: B,
            callers: Vec::new(),
        }])
        .unwrap();
    (0..10).for_each(|_| p.test_count_on(site_b, 0));
    assert_eq!(ring_now(&p), vec![(B, false); 5]);
    let gates = p.maps().reason_stacks(A..=B).unwrap();
    let at = |slot: u32, s: StackStat| gates[slot as usize][s.0 as usize];
    use StackStat as S;
    for (slot, sent) in [(A, 3), (B, 5)] {
        assert_eq!(at(slot, S::TD_STACK_MATCHED), 10);
        assert_eq!(at(slot, S::TD_STACK_EMITTED), sent);
        assert_eq!(at(slot, S::TD_STACK_RATE_CAPPED), 10 - sent);
    }
}

/// Two reasons captured at once, a budget shared between them: each
/// reason's calls take stacks under their own reason (a resolved site by
/// its slot, a pending one by its reason's caller range) up to its share,
/// and the rest are rate capped under it; a third reason's calls stay on
/// the common path and take none. One reason leaving the set ends its
/// capture alone: the other's goes on.
#[test]
fn two_reasons_are_captured_at_once_each_within_its_share() {
    if !crate::testing::bpf_or_skip() {
        return;
    }
    const A: u32 = 2;
    const B: u32 = 3;
    const C: u32 = 4;
    let site_a = 0xffffffff81000010; // resolved: slot A
    let site_b = 0xffffffff81001010; // pending, inside B's caller range
    let site_c = 0xffffffff81003018; // resolved: slot C, never captured
    let b_range = (0xffffffff81001000, 0xffffffff81002000);
    let mut storage = MaybeUninit::uninit();
    let p = selftest::load(&mut storage, &capture_config());
    p.maps().add_site(site_a, A).unwrap();
    p.maps().add_site(site_c, C).unwrap();
    let set = [
        Captured {
            slot: A,
            callers: vec![],
        },
        Captured {
            slot: B,
            callers: vec![b_range],
        },
    ];
    p.maps().capture_set(&set).unwrap();
    assert_eq!(p.maps().capturing(), [A, B]);
    // A CPU's budget of 8 split evenly (Budget::share): 4 each. The runs
    // are all on CPU 0.
    for slot in [A, B] {
        p.maps().refill(slot, 4, 0).unwrap();
    }
    for _ in 0..10 {
        for site in [site_a, site_b, site_c] {
            p.test_count_on(site, 0);
        }
    }
    let mut got = ring_now(&p);
    got.sort_unstable();
    assert_eq!(got, [vec![(A, false); 4], vec![(B, false); 4]].concat());
    let gates = p.maps().reason_stacks(A..=C).unwrap();
    let at = |slot: u32, s: StackStat| gates[slot as usize][s.0 as usize];
    use StackStat as S;
    for slot in [A, B] {
        assert_eq!(at(slot, S::TD_STACK_MATCHED), 10, "slot {slot}");
        assert_eq!(at(slot, S::TD_STACK_EMITTED), 4, "slot {slot}");
        assert_eq!(at(slot, S::TD_STACK_RATE_CAPPED), 6, "slot {slot}");
    }
    assert_eq!(at(C, S::TD_STACK_MATCHED), 0);
    // C's site was never flagged: none of its calls left the common path.
    let (cell, entry) = p.maps().site_cell_ptr(site_c, C);
    // SAFETY: the object is alive; a plain load of mapped memory.
    assert_eq!(unsafe { std::ptr::read_volatile(cell) }, entry);
    // A leaves the set: B's capture goes on, A's calls take no stack.
    p.maps().capture_set(&set[1..]).unwrap();
    assert_eq!(p.maps().capturing(), [B]);
    for slot in [A, B] {
        p.maps().refill(slot, 8, 0).unwrap();
    }
    for _ in 0..3 {
        p.test_count_on(site_a, 0);
        p.test_count_on(site_b, 0);
    }
    assert_eq!(ring_now(&p), vec![(B, false); 3]);
    let counts = p.maps().counts().unwrap();
    assert_eq!((counts[A as usize], counts[C as usize]), (13, 10));
    assert_eq!(p.maps().pending().unwrap(), vec![(site_b, 13)]);
}
