//! The --pid, --cpu and --cgroup filters on the counting path, and the code
//! they leave out when off.

use super::*;

/// The self-test program's settings with `filter`.
fn with_filter(filter: &Filter) -> LoadConfig {
    LoadConfig {
        func_addr: FUNC,
        filter: filter.for_bpf(),
        ..LoadConfig::default()
    }
}

/// Loads the self-test program with `filter`, resolves one site to slot
/// 5, runs `f` and returns the calls counted.
fn filtered(filter: Filter, f: impl FnOnce(&Probe<'_>, u64)) -> u64 {
    let mut storage = MaybeUninit::uninit();
    let config = with_filter(&filter);
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
    let config = with_filter(&filter);
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
