use super::*;
use clap::Parser;

fn plan(args: &[&str]) -> Result<Plan> {
    Plan::from_cli(&Cli::try_parse_from(args).unwrap())
}

fn trace_of(args: &[&str]) -> Trace {
    match plan(args).unwrap().job {
        Job::Trace(t) => *t,
        other => panic!("not a trace: {other:?}"),
    }
}

#[test]
fn modes_and_companions() {
    let t = trace_of(&["topdown", "vfs_read"]);
    assert_eq!(t.load.request, Request::Auto);
    assert!(t.load_options.is_empty());
    let t = trace_of(&["topdown", "vfs_read", "--kprobe", "-U"]);
    assert_eq!(t.load.request, Request::Only(Mode::Kprobe));
    assert_eq!(t.load_options, ["--kprobe", "--user-stacks"]);
    let t = trace_of(&["topdown", "vfs_read", "--companion", "fexit"]);
    assert_eq!(t.load.request, Request::Only(Mode::Fentry));
    assert_eq!(t.companion, Some(Companion::Fexit));
    let e = plan(&["topdown", "vfs_read", "--companion", "fentry", "--kprobe"]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "--companion fentry and fexit need fentry mode: leave out --kprobe"
    );
    let t = trace_of(&["topdown", "vfs_read", "--companion", "bare", "--kprobe"]);
    assert_eq!(t.load.request, Request::Only(Mode::Kprobe));
}

#[test]
fn a_raw_tracepoint_is_a_tracepoint_through_raw_tp_only() {
    let t = trace_of(&["topdown", "rawtracepoint:sched:sched_switch"]);
    assert_eq!(t.load.request, Request::RawTracepoint);
    assert_eq!(t.target.tracepoint.as_deref(), Some("sched"));
    let t = trace_of(&["topdown", "t:sched:sched_switch"]);
    assert_eq!(t.load.request, Request::Tracepoint);
}

#[test]
fn commands_become_jobs() {
    let job = |args: &[&str]| plan(args).unwrap().job;
    assert!(matches!(
        job(&["topdown", "trace", "vfs_read"]),
        Job::Trace(_)
    ));
    let Job::Pin(p) = job(&["topdown", "pin", "deferred_split_folio", "--kprobe"]) else {
        panic!()
    };
    assert_eq!(p.load.request, Request::Only(Mode::Kprobe));
    assert!(p.target.profile.is_some());
    assert!(matches!(
        job(&["topdown", "show", "a", "b", "--json"]),
        Job::Show(s) if s.funcs == ["a", "b"] && s.printer == Printer::Json && s.save.is_none()
    ));
    assert!(
        matches!(job(&["topdown", "unpin", "--all"]), Job::Unpin { funcs, synced: false } if funcs.is_empty())
    );
    assert!(matches!(job(&["topdown", "serve"]), Job::Serve { .. }));
}

#[test]
fn result_files_are_checked_before_anything_is_loaded() {
    let dir = std::env::temp_dir().join(format!("topdown-plan-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = |name: &str| dir.join(name).display().to_string();
    let err = |args: &[&str]| plan(args).unwrap_err().to_string();
    let missing = file("missing.json");
    assert!(err(&["topdown", "vfs_read", "--baseline", &missing])
        .starts_with(&format!("baseline {missing}: cannot read it: ")),);
    let saved = crate::report::saved::tests::sample();
    std::fs::write(file("dsf.json"), saved.to_json()).unwrap();
    assert_eq!(
        err(&["topdown", "vfs_read", "--baseline", &file("dsf.json")]),
        format!(
            "baseline {}: it is a result for function deferred_split_folio, not vfs_read",
            file("dsf.json")
        )
    );
    let t = trace_of(&[
        "topdown",
        "deferred_split_folio",
        "--baseline",
        &file("dsf.json"),
        "--threshold",
        "60",
        "--verify-drop",
        "30",
        "--save",
        &file("after.json"),
    ]);
    let b = t.session.baseline.unwrap();
    assert_eq!(b.saved, saved);
    assert_eq!((b.verify.threshold, b.verify.drop), (60.0, 30.0));
    assert_eq!(
        t.files.save.unwrap().display().to_string(),
        file("after.json")
    );
    let nowhere = file("no/such/dir/r.json");
    assert!(err(&["topdown", "vfs_read", "--save", &nowhere])
        .starts_with(&format!("--save {nowhere}: cannot write it: ")));
    assert!(err(&["topdown", "vfs_read", "--folded", &nowhere])
        .starts_with(&format!("--folded {nowhere}: cannot write it: ")));
    assert!(err(&["topdown", "vfs_read", "--flamegraph", &nowhere])
        .starts_with(&format!("--flamegraph {nowhere}: cannot write it: ")));
    // --vmlinux: readable, and an ELF file.
    assert!(err(&["topdown", "vfs_read", "--vmlinux", &nowhere])
        .starts_with(&format!("--vmlinux {nowhere}: cannot read it: ")));
    assert_eq!(
        err(&["topdown", "vfs_read", "--vmlinux", &file("dsf.json")]),
        format!(
            "--vmlinux {}: not an ELF file (a debug vmlinux is)",
            file("dsf.json")
        )
    );
    let exe = std::env::current_exe().unwrap();
    let t = trace_of(&["topdown", "vfs_read", "--vmlinux", exe.to_str().unwrap()]);
    assert_eq!(t.target.vmlinux.as_deref(), Some(exe.as_path()));
    // A tracepoint's result: refused for another category, or a function.
    let sched = crate::report::Saved {
        func: "sched_switch".into(),
        tracepoint: Some("sched".into()),
        mode: Mode::TpBtf,
        ..saved.clone()
    };
    std::fs::write(file("sched.json"), sched.to_json()).unwrap();
    let t = trace_of(&[
        "topdown",
        "t:sched:sched_switch",
        "--baseline",
        &file("sched.json"),
    ]);
    assert_eq!(t.session.tracepoint.as_deref(), Some("sched"));
    assert_eq!(t.session.baseline.unwrap().saved, sched);
    assert_eq!(
        err(&["topdown", "t:other:sched_switch", "--baseline", &file("sched.json")]),
        format!(
            "baseline {}: it is a result for tracepoint t:sched:sched_switch, not tracepoint t:other:sched_switch",
            file("sched.json")
        )
    );
    assert_eq!(
        err(&["topdown", "sched_switch", "--baseline", &file("sched.json")]),
        format!(
            "baseline {}: it is a result for tracepoint t:sched:sched_switch, not function sched_switch",
            file("sched.json")
        )
    );
    // show: the baseline names the function; one function only.
    let Job::Show(s) = plan(&["topdown", "show", "--baseline", &file("dsf.json")])
        .unwrap()
        .job
    else {
        panic!()
    };
    assert_eq!(s.funcs, ["deferred_split_folio"]);
    assert_eq!(
        err(&["topdown", "show", "a", "b", "--save", &file("x.json")]),
        "--save and --baseline take one pinned function: name one"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn filters_that_can_never_match_are_refused_before_anything_is_loaded() {
    let err = |args: &[&str]| plan(args).unwrap_err().to_string();
    assert_eq!(
        err(&["topdown", "vfs_read", "-p", "8388608"]),
        "--pid 8388608: no such process"
    );
    assert_eq!(
        err(&["topdown", "vfs_read", "--cgroup", "/proc"]),
        "--cgroup /proc: not a cgroup v2 directory"
    );
    assert!(err(&["topdown", "vfs_read", "-C", "8191"]).starts_with("--cpu 8191: "));
    assert!(err(&["topdown", "pin", "vfs_read", "-C", "8191"]).starts_with("--cpu 8191: "));
    let me = std::process::id().to_string();
    let t = trace_of(&["topdown", "vfs_read", "-p", &me, "-C", "0"]);
    assert_eq!(t.filter.tgids(), [std::process::id()]);
    assert_eq!(t.filter.cpus.as_deref(), Some(&[0][..]));
    assert_eq!(t.load_options, ["--pid", "--cpu"]);
    assert!(trace_of(&["topdown", "vfs_read"]).filter.is_empty());
}

#[test]
fn profiles_are_chosen_once() {
    let t = trace_of(&["topdown", "deferred_split_folio"]);
    assert_eq!(
        t.target.profile.unwrap().origin,
        "built-in profile deferred_split_folio"
    );
    assert!(!t.target.users_own);
    let t = trace_of(&["topdown", "deferred_split_folio", "--no-profile"]);
    assert!(t.target.profile.is_none());
    let t = trace_of(&["topdown", "vfs_read", "--rules", "A=ksys_read"]);
    assert!(t.target.users_own);
    let e = plan(&["topdown", "vfs_read", "--profile", "nope"]).unwrap_err();
    assert!(e
        .to_string()
        .starts_with("no built-in profile named 'nope'; built-in profiles: "));
    assert!(matches!(
        plan(&["topdown", "--list-profiles"]).unwrap().job,
        Job::ListProfiles { json: false }
    ));
    assert!(matches!(
        plan(&["topdown", "--list-profiles", "--json"]).unwrap().job,
        Job::ListProfiles { json: true }
    ));
    assert!(matches!(
        plan(&["topdown", "vfs_read", "--list-reasons"])
            .unwrap()
            .job,
        Job::ListReasons { json: false, .. }
    ));
    assert!(matches!(
        plan(&["topdown", "vfs_read", "--list-reasons", "--json"])
            .unwrap()
            .job,
        Job::ListReasons { json: true, .. }
    ));
}

#[test]
fn other_tools_probe_types_set_the_mode() {
    let t = trace_of(&["topdown", "p:vfs_read"]);
    assert_eq!(t.target.func, "vfs_read");
    assert_eq!(t.load.request, Request::Only(Mode::Kprobe));
    let t = trace_of(&["topdown", "kfunc:vfs_read"]);
    assert_eq!(
        (t.target.func.as_str(), t.load.request),
        ("vfs_read", Request::Auto)
    );
    let e = plan(&["topdown", "kprobe:vfs_read", "--fentry"]).unwrap_err();
    assert!(e.is_usage(), "{e}");
}

#[test]
fn whatever_the_plan_refuses_is_a_usage_error() {
    for args in [
        &["topdown", "vfs_read", "--rules", "a=ksys_read"][..],
        &["topdown", "vfs_read", "--reasons", "/nonexistent"],
        &["topdown", "vfs_read", "--vmlinux", "/nonexistent"],
        &["topdown", "vfs_read", "--profile", "nope"],
    ] {
        assert!(plan(args).unwrap_err().is_usage(), "{args:?}");
    }
}

#[test]
fn options_that_do_nothing_are_warned_about() {
    let warnings = |args: &[&str]| plan(args).unwrap().warnings;
    assert!(warnings(&["topdown", "vfs_read", "--threshold", "50"]).is_empty());
    assert!(warnings(&["topdown", "vfs_read", "--no-auto"]).is_empty());
    assert!(warnings(&[
        "topdown",
        "vfs_read",
        "--no-auto",
        "--stack-on",
        "X",
        "--sample",
        "3"
    ])
    .is_empty());
    assert_eq!(
        warnings(&[
            "topdown",
            "vfs_read",
            "--no-auto",
            "--threshold",
            "50",
            "-U"
        ]),
        [
            "--threshold does nothing with --no-auto (capture never starts by itself)",
            "--user-stacks does nothing with --no-auto and no --stack-on (no stack is captured)"
        ]
    );
    assert_eq!(
        warnings(&["topdown", "vfs_read", "--no-auto", "--sample", "2"]),
        ["--sample does nothing with --no-auto and no --stack-on (no stack is captured)"]
    );
    assert_eq!(
        warnings(&["topdown", "vfs_read", "--verify-drop", "20"]),
        ["--verify-drop does nothing without --baseline"]
    );
    assert_eq!(
        warnings(&["topdown", "serve", "--threshold", "50"]),
        ["--threshold does nothing without --capture"]
    );
    assert!(warnings(&["topdown", "serve", "--capture", "--threshold", "50"]).is_empty());
}

#[test]
fn a_command_runs_through_the_shell_with_c_and_as_given_after_dashes() {
    let t = trace_of(&["topdown", "vfs_read", "-c", "make -j2 | tail"]);
    let sh = ["/bin/sh", "-c", "make -j2 | tail"].map(String::from);
    assert_eq!(t.command.as_deref(), Some(&sh[..]));
    // A pinned instance's filters were fixed when it was pinned.
    assert_eq!(t.load_options, ["-c"]);
    let t = trace_of(&["topdown", "vfs_read", "-d", "5", "--", "ls", "-l", "/"]);
    let argv = ["ls", "-l", "/"].map(String::from);
    assert_eq!(t.command.as_deref(), Some(&argv[..]));
    assert_eq!(trace_of(&["topdown", "vfs_read"]).command, None);
    // Its own process and children are the filter: no other.
    for args in [
        &["topdown", "vfs_read", "-c", "true", "-p", "1"][..],
        &["topdown", "vfs_read", "-c", "true", "--cgroup", "/x"],
        &["topdown", "vfs_read", "-p", "1", "--", "true"],
        &["topdown", "vfs_read", "-c", "true", "--", "true"],
    ] {
        assert!(Cli::try_parse_from(args).is_err(), "{args:?}");
    }
}
