//! A run's result as a file (`--save`), read back as the baseline of a
//! later run (`--baseline`): JSON of the format "topdown-result",
//! documented in topdown(8) (RESULT FILES). Within one version fields are
//! only added, never removed or given another meaning; a reader takes its
//! own version and older ones, and ignores fields it does not know.
//!
//! Version 2 added the system's settings (`system`), `fix`, `threshold`
//! and `top_reason`, and gave `hot_reason` the threshold's meaning (in
//! version 1 it was the top reason, hot or not). A version 1 file reads
//! with those unknown. A tracepoint's category (`tracepoint`) was added
//! within version 2: a file without it reads with the category unknown.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::reasons::{NOT_FOUND_NAME, SITES_FULL_NAME};
use crate::report::{
    Distribution, Pinned, ReasonRow, Saved, SavedDrill, SavedPath, SavedRow, SavedStack,
    SavedStacks, Summary,
};

/// The `format` of a result file, and the newest version this topdown
/// reads and the one it writes.
pub(crate) const FORMAT: &str = "topdown-result";
pub(crate) const VERSION: u32 = 2;

/// A figure rounded to 3 decimals, as in the NDJSON output.
fn round(v: f64) -> f64 {
    let scaled = v * 1000.0;
    if scaled.is_finite() {
        scaled.round() / 1000.0
    } else if v.is_finite() {
        // Too large for decimals: as it is (JSON has no infinity).
        v
    } else {
        0.0
    }
}

fn saved_rows(d: &Distribution) -> Vec<SavedRow> {
    d.rows
        .iter()
        .filter(|r| r.count > 0)
        .map(|r| SavedRow {
            reason: r.reason.clone(),
            count: r.count,
            rate: round(r.rate),
            share: round(r.share),
        })
        .collect()
}

impl Saved {
    /// A run's result, with its top `top` stacks of each reason.
    pub(crate) fn of_summary(sum: &Summary, top: usize) -> Saved {
        Saved {
            format: FORMAT.into(),
            version: VERSION,
            topdown: env!("CARGO_PKG_VERSION").into(),
            source: "run".into(),
            func: sum.func.clone(),
            tracepoint: sum.tracepoint.clone(),
            kernel: sum.kernel.clone(),
            profile: sum.profile.clone(),
            reason_names: sum.named.clone(),
            mode: sum.mode,
            phase: sum.phase.name().into(),
            start: round(sum.start),
            secs: round(sum.calls.secs),
            total: sum.calls.total,
            rate: round(sum.calls.rate),
            reasons: saved_rows(&sum.calls),
            hot_reason: sum.hot().map(|r| r.reason.clone()),
            top_reason: sum.top().map(|r| r.reason.clone()),
            threshold: Some(sum.threshold),
            fix: sum.fix.clone(),
            system: sum.system.clone(),
            stacks: sum
                .stacks
                .iter()
                .map(|st| SavedStacks {
                    reason: st.reason.clone(),
                    captured: st.captured,
                    background: st.background,
                    stacks: st
                        .top(top)
                        .iter()
                        .map(|sc| SavedStack {
                            count: sc.count,
                            frames: sc.stack.display(),
                        })
                        .collect(),
                })
                .collect(),
            drops: sum.drops,
            drill: sum
                .drill
                .iter()
                .map(|t| SavedDrill {
                    reason: t.reason.clone(),
                    paths: t
                        .folded()
                        .into_iter()
                        .map(|(path, calls)| SavedPath {
                            calls,
                            path: path.split(';').map(String::from).collect(),
                        })
                        .collect(),
                })
                .collect(),
        }
    }

    /// A pinned instance's counts since it was pinned (no stacks).
    pub(crate) fn of_pinned(p: &Pinned) -> Saved {
        Saved {
            format: FORMAT.into(),
            version: VERSION,
            topdown: env!("CARGO_PKG_VERSION").into(),
            source: "pinned".into(),
            func: p.func.clone(),
            tracepoint: p.tracepoint.clone(),
            kernel: p.kernel.clone(),
            profile: p.profile.clone(),
            reason_names: p
                .calls
                .rows
                .iter()
                .filter(|r| !r.special)
                .map(|r| r.reason.clone())
                .collect(),
            mode: p.mode,
            phase: "counting".into(),
            start: round(p.pinned_at),
            secs: round(p.calls.secs),
            total: p.calls.total,
            rate: round(p.calls.rate),
            reasons: saved_rows(&p.calls),
            hot_reason: p.hot().map(|r| r.reason.clone()),
            top_reason: p.top().map(|r| r.reason.clone()),
            threshold: Some(p.threshold),
            fix: p.fix.clone(),
            system: p.system.clone(),
            stacks: Vec::new(),
            drops: p.drops,
            drill: Vec::new(),
        }
    }

    /// The calls as a distribution, for comparing with a run's.
    pub(crate) fn calls(&self) -> Distribution {
        Distribution {
            secs: self.secs,
            total: self.total,
            rate: self.rate,
            rows: self
                .reasons
                .iter()
                .map(|r| ReasonRow {
                    reason: r.reason.clone(),
                    count: r.count,
                    rate: r.rate,
                    share: r.share,
                    special: r.reason == NOT_FOUND_NAME || r.reason == SITES_FULL_NAME,
                })
                .collect(),
        }
    }

    /// The result as one line of JSON (no newline).
    pub(crate) fn to_json(&self) -> String {
        // Plain strings and numbers: serializing cannot fail.
        serde_json::to_string(self).expect("result serializes")
    }

    /// A result file's text, checked: a topdown result of a version this
    /// topdown reads, for `func` if one is given.
    pub(crate) fn parse(text: &str, func: Option<&str>) -> std::result::Result<Saved, String> {
        let v: serde_json::Value =
            serde_json::from_str(text).map_err(|e| format!("not JSON ({e})"))?;
        if v.get("format").and_then(|f| f.as_str()) != Some(FORMAT) {
            return Err(format!(
                "not a topdown result (no \"format\":\"{FORMAT}\"; write one with --save)"
            ));
        }
        match v.get("version").and_then(|n| n.as_u64()) {
            Some(n) if (1..=u64::from(VERSION)).contains(&n) => {}
            Some(n) if n > u64::from(VERSION) => {
                return Err(format!(
                    "format version {n} is newer than this topdown reads ({VERSION}): use a newer topdown"
                ))
            }
            _ => return Err("no valid format version".into()),
        }
        let mut saved: Saved =
            serde_json::from_value(v).map_err(|e| format!("not a valid topdown result ({e})"))?;
        if saved.version == 1 {
            // Its hot reason was the top one, whatever its share.
            saved.top_reason = saved.hot_reason.take();
        }
        match func {
            Some(f) if saved.func != f => Err(format!(
                "it is a result for function {}, not {f}",
                saved.func
            )),
            _ => Ok(saved),
        }
    }

    /// Whether the result is of the same kind of target as a run on a
    /// tracepoint of category `tracepoint` (None: a function) of the same
    /// name. A tracepoint whose category the file does not record (an
    /// older file, a pinned instance's) passes.
    pub(crate) fn check_tracepoint(
        &self,
        tracepoint: Option<&str>,
    ) -> std::result::Result<(), String> {
        let what = |category: Option<&str>| match category {
            Some(c) => format!("tracepoint t:{c}:{}", self.func),
            None => format!("function {}", self.func),
        };
        let recorded = match self.tracepoint.as_deref() {
            None if self.mode.is_tracepoint() => return Ok(()),
            recorded => recorded,
        };
        if recorded == tracepoint {
            Ok(())
        } else {
            Err(format!(
                "it is a result for {}, not {}",
                what(recorded),
                what(tracepoint)
            ))
        }
    }

    /// Reads a baseline file: a one-line error naming the file otherwise.
    pub(crate) fn load(path: &Path, func: Option<&str>) -> Result<Saved> {
        let name = path.display();
        let text = crate::input::read_text(path, crate::input::MAX_RESULT)
            .map_err(|e| Error::msg(format!("baseline {name}: cannot read it: {e}")))?;
        Saved::parse(&text, func).map_err(|why| Error::msg(format!("baseline {name}: {why}")))
    }
}

/// Whether `path` can be written at exit as `write_file` will: in place
/// for something that is not a regular file (a FIFO, a device, a symbolic
/// link), otherwise by creating a file in its directory. Found out now, before anything is attached, with
/// a probe file created and removed at once.
pub(crate) fn check_writable(path: &Path, option: &str) -> Result<()> {
    let fail = |why: String| {
        Error::msg(format!(
            "{option} {}: cannot write it: {why}",
            path.display()
        ))
    };
    let meta = fs::metadata(path).ok();
    if meta.as_ref().is_some_and(|m| m.is_dir()) {
        return Err(fail("it is a directory".into()));
    }
    // A FIFO is not opened now: a reader waiting on it would take the
    // close for the end of what it reads. Whether one reads it at exit is
    // found then (write_file).
    if meta.is_some_and(|m| m.file_type().is_fifo()) {
        let c = std::ffi::CString::new(path.as_os_str().as_bytes())
            .map_err(|_| fail("its name has a NUL byte".into()))?;
        // SAFETY: a plain syscall on a NUL-terminated path.
        if unsafe { libc::access(c.as_ptr(), libc::W_OK) } != 0 {
            return Err(fail(std::io::Error::last_os_error().to_string()));
        }
        return Ok(());
    }
    // As write_file decides: in place unless a regular file or nothing.
    if fs::symlink_metadata(path).is_ok_and(|m| !m.is_file()) {
        return OpenOptions::new()
            .write(true)
            .open(path)
            .map(drop)
            .map_err(|e| fail(e.to_string()));
    }
    let probe = sibling(path, "probe");
    // The file is made in its directory: say which, as the errno alone
    // misleads (`--save /proc/version`: ENOENT for a file that exists).
    let dir = match path.parent() {
        Some(d) if d.as_os_str().is_empty() => Path::new("."),
        Some(d) => d,
        None => Path::new("/"),
    };
    if !dir.is_dir() {
        return Err(fail(format!("no directory {}", dir.display())));
    }
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
        .map_err(|e| fail(format!("cannot create a file in {}: {e}", dir.display())))?;
    let _ = fs::remove_file(&probe);
    Ok(())
}

/// A hidden file next to `path`, unique to this process.
fn sibling(path: &Path, what: &str) -> PathBuf {
    let name = path
        .file_name()
        .map_or_else(|| "result".into(), |n| n.to_string_lossy().into_owned());
    path.with_file_name(format!(".{name}.topdown-{what}-{}", std::process::id()))
}

/// Writes `text` to `path`: through a temporary file renamed over it, so
/// that a reader never sees half a file; in place if `path` is not a
/// regular file (a FIFO, a device, a symbolic link, which is followed).
pub(crate) fn write_file(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if fs::metadata(path).is_ok_and(|m| m.file_type().is_fifo()) {
        return write_fifo(path, bytes);
    }
    if fs::symlink_metadata(path).is_ok_and(|m| !m.is_file()) {
        return fs::write(path, bytes);
    }
    let tmp = sibling(path, "tmp");
    let done = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .and_then(|mut f| {
            f.write_all(bytes)?;
            f.sync_all()
        })
        .and_then(|()| fs::rename(&tmp, path));
    if done.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    done
}

/// Writes `bytes` to the FIFO `path` if something reads it: without a
/// reader the open would wait for ever, so it fails at once (ENXIO) and
/// the output is rescued instead.
fn write_fifo(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut f = OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ENXIO) => std::io::Error::new(
                e.kind(),
                "it is a FIFO that nothing reads (start its reader first)",
            ),
            _ => e,
        })?;
    // Writes block again: a slow reader is still a reader.
    crate::input::blocking(&f);
    f.write_all(bytes)
}

/// An output written at exit, and where it goes if its file cannot be
/// written: a file of its own in the temporary directory or, failing that,
/// standard error. Nothing is lost after a long run.
pub(crate) struct Output<'a> {
    /// The option that named the file (`--save`).
    pub(crate) option: &'a str,
    pub(crate) path: &'a Path,
    pub(crate) bytes: &'a [u8],
    /// What it is, in the error (`the result`).
    pub(crate) what: &'a str,
    /// The rescue file's name in the temporary directory.
    pub(crate) rescue: String,
    /// What goes to standard error if even that fails (the bytes, or
    /// their text form), and how the error names it.
    pub(crate) stderr: &'a str,
    pub(crate) stderr_what: &'a str,
}

impl Output<'_> {
    /// Writes the file (as `write_file`). If that fails the output is
    /// rescued, and the error says where it went.
    pub(crate) fn write(&self) -> Result<()> {
        let Err(e) = write_file(self.path, self.bytes) else {
            return Ok(());
        };
        let failed = format!(
            "{} {}: cannot write it: {e}",
            self.option,
            self.path.display()
        );
        let rescue = std::env::temp_dir().join(&self.rescue);
        let rescued = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&rescue)
            .and_then(|mut f| f.write_all(self.bytes));
        match rescued {
            Ok(()) => Err(Error::msg(format!(
                "{failed}; {} is in {} instead",
                self.what,
                rescue.display()
            ))),
            Err(_) => {
                eprint!("{}", self.stderr);
                Err(Error::msg(format!(
                    "{failed}; {} {} above, on standard error",
                    self.stderr_what,
                    if self.stderr.lines().count() == 1 {
                        "is the line"
                    } else {
                        "are the lines"
                    }
                )))
            }
        }
    }
}

/// Writes the result to `path` (`--save`); if that fails it is rescued
/// (`Output`).
pub(crate) fn save(path: &Path, saved: &Saved) -> Result<()> {
    let text = saved.to_json() + "\n";
    Output {
        option: "--save",
        path,
        bytes: text.as_bytes(),
        what: "the result",
        rescue: format!("topdown-result-{}-{}.json", saved.func, std::process::id()),
        stderr: &text,
        stderr_what: "the result",
    }
    .write()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::bpf::probe::Mode;
    use crate::report::Drops;
    use crate::system::SystemState;

    pub(crate) fn row(reason: &str, count: u64, rate: f64, share: f64) -> SavedRow {
        SavedRow {
            reason: reason.into(),
            count,
            rate,
            share,
        }
    }

    pub(crate) fn sample() -> Saved {
        Saved {
            format: FORMAT.into(),
            version: VERSION,
            topdown: "0.1.0".into(),
            source: "run".into(),
            func: "deferred_split_folio".into(),
            tracepoint: None,
            kernel: "6.12.0".into(),
            profile: Some("built-in profile deferred_split_folio".into()),
            reason_names: vec!["FAULT_ALLOC".into(), "ZAP".into(), "KHUGEPAGED".into()],
            mode: Mode::Fentry,
            phase: "stack capture".into(),
            start: 1_700_000_000.0,
            secs: 10.0,
            total: 250,
            rate: 25.0,
            reasons: vec![
                row("ZAP", 200, 20.0, 80.0),
                row("FAULT_ALLOC", 50, 5.0, 20.0),
            ],
            hot_reason: Some("ZAP".into()),
            stacks: vec![SavedStacks {
                reason: "ZAP".into(),
                captured: 3,
                background: 0,
                stacks: vec![SavedStack {
                    count: 3,
                    frames: vec!["folio_remove_rmap_ptes+0xbb".into()],
                }],
            }],
            drops: Drops::default(),
            drill: Vec::new(),
            top_reason: Some("ZAP".into()),
            threshold: Some(80.0),
            fix: Some("before: THP defaults".into()),
            system: Some(SystemState {
                build_id: Some("ab01".into()),
                cmdline: Some("console=ttyS0".into()),
                knobs: vec![
                    knob(
                        THP_DEFRAG,
                        Some("always defer defer+madvise [madvise] never"),
                    ),
                    knob(MAX_PTES_NONE, Some("511")),
                    knob("/sys/kernel/mm/transparent_hugepage/shrink_underused", None),
                ],
            }),
        }
    }

    pub(crate) const THP_DEFRAG: &str = "/sys/kernel/mm/transparent_hugepage/defrag";
    pub(crate) const MAX_PTES_NONE: &str =
        "/sys/kernel/mm/transparent_hugepage/khugepaged/max_ptes_none";

    pub(crate) fn knob(path: &str, value: Option<&str>) -> crate::system::Knob {
        crate::system::Knob {
            path: path.into(),
            value: value.map(String::from),
            error: None,
        }
    }

    /// A result file of format version 1, as topdown wrote it before
    /// version 2 (`tests/data/result-v1.json`).
    const V1: &str = include_str!("../../tests/data/result-v1.json");

    #[test]
    fn a_version_1_file_reads_with_its_new_parts_unknown() {
        let s = Saved::parse(V1, Some("deferred_split_folio")).unwrap();
        assert_eq!((s.version, s.total, s.reasons.len()), (1, 250, 2));
        // Its "hot_reason" was the top reason, hot or not.
        assert_eq!((s.hot_reason, s.top_reason.as_deref()), (None, Some("ZAP")));
        assert_eq!((s.threshold, s.fix, s.system), (None, None, None));
        assert_eq!(s.drops.stacks_rate_capped, 2);
    }

    #[test]
    fn a_result_reads_back_as_written() {
        let s = sample();
        let text = s.to_json();
        assert!(
            text.starts_with("{\"format\":\"topdown-result\",\"version\":2,"),
            "{text}"
        );
        assert_eq!(Saved::parse(&text, Some("deferred_split_folio")), Ok(s));
        // --drill's paths, and a file without them (read as none).
        let drilled = Saved {
            drill: vec![SavedDrill {
                reason: "ZAP".into(),
                paths: vec![SavedPath {
                    calls: 3,
                    path: vec!["zap".into(), "[stack end]".into()],
                }],
            }],
            ..sample()
        };
        let text = drilled.to_json();
        assert!(text.contains(",\"drill\":[{\"reason\":\"ZAP\",\"paths\":[{\"calls\":3,\"path\":[\"zap\",\"[stack end]\"]}]}]"), "{text}");
        assert_eq!(
            Saved::parse(&text, Some("deferred_split_folio")),
            Ok(drilled)
        );
        assert!(!sample().to_json().contains("drill"));
    }

    #[test]
    fn a_tracepoints_category_is_saved_and_a_file_without_it_reads() {
        let mut sum = crate::report::fixtures::sample_summary();
        sum.func = "sched_switch".into();
        sum.tracepoint = Some("sched".into());
        sum.mode = Mode::TpBtf;
        let s = Saved::of_summary(&sum, 5);
        let text = s.to_json();
        assert!(
            text.contains(",\"func\":\"sched_switch\",\"tracepoint\":\"sched\",\"kernel\":"),
            "{text}"
        );
        let back = Saved::parse(&text, Some("sched_switch")).unwrap();
        assert_eq!(back.tracepoint.as_deref(), Some("sched"));
        assert_eq!(back, s);
        // Written before the field was: read as not recorded.
        let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
        v.as_object_mut().unwrap().remove("tracepoint");
        let old = Saved::parse(&v.to_string(), Some("sched_switch")).unwrap();
        assert_eq!(old.tracepoint, None);
        assert_eq!(Saved::parse(V1, None).unwrap().tracepoint, None);
    }

    #[test]
    fn a_baseline_of_another_tracepoint_category_or_kind_is_refused() {
        let tp = |category: Option<&str>, mode: Mode| Saved {
            func: "sched_switch".into(),
            tracepoint: category.map(String::from),
            mode,
            ..sample()
        };
        let sched = tp(Some("sched"), Mode::TpBtf);
        assert_eq!(sched.check_tracepoint(Some("sched")), Ok(()));
        assert_eq!(
            sched.check_tracepoint(Some("other")),
            Err(
                "it is a result for tracepoint t:sched:sched_switch, not tracepoint t:other:sched_switch"
                    .into()
            )
        );
        assert_eq!(
            sched.check_tracepoint(None),
            Err(
                "it is a result for tracepoint t:sched:sched_switch, not function sched_switch"
                    .into()
            )
        );
        // A function's result, for a run on a tracepoint.
        let function = tp(None, Mode::Fentry);
        assert_eq!(function.check_tracepoint(None), Ok(()));
        assert_eq!(
            function.check_tracepoint(Some("sched")),
            Err(
                "it is a result for function sched_switch, not tracepoint t:sched:sched_switch"
                    .into()
            )
        );
        // A tracepoint whose category is not recorded (an older file, a
        // pinned instance's): nothing to tell them apart by.
        let unknown = tp(None, Mode::RawTp);
        assert_eq!(unknown.check_tracepoint(Some("sched")), Ok(()));
        assert_eq!(unknown.check_tracepoint(None), Ok(()));
    }

    #[test]
    fn figures_too_large_to_round_read_back() {
        // Found by fuzzing: rounding made them infinite, written as null.
        let mut s = sample();
        s.reasons[0].share = 1.8e307;
        let mut r = s.clone();
        r.reasons[0].share = round(1.8e307);
        assert_eq!(r.reasons[0].share, 1.8e307);
        assert!(Saved::parse(&r.to_json(), None).is_ok());
    }

    #[test]
    fn newer_fields_are_ignored_and_drops_may_be_missing() {
        let mut v: serde_json::Value = serde_json::from_str(&sample().to_json()).unwrap();
        v["later"] = serde_json::json!({"x": 1});
        v.as_object_mut().unwrap().remove("drops");
        let s = Saved::parse(&v.to_string(), None).unwrap();
        assert_eq!(s.drops, Drops::default());
    }

    #[test]
    fn bad_files_are_refused_with_the_reason() {
        let err = |text: &str| Saved::parse(text, Some("deferred_split_folio")).unwrap_err();
        assert!(err("").starts_with("not JSON ("), "{}", err(""));
        assert!(err("{\"type\":\"summary\"}").starts_with("not a topdown result"));
        let mut v: serde_json::Value = serde_json::from_str(&sample().to_json()).unwrap();
        v["version"] = 3.into();
        assert_eq!(
            err(&v.to_string()),
            "format version 3 is newer than this topdown reads (2): use a newer topdown"
        );
        v["version"] = 0.into();
        assert_eq!(err(&v.to_string()), "no valid format version");
        v["version"] = 1.into();
        v.as_object_mut().unwrap().remove("reasons");
        assert!(
            err(&v.to_string()).starts_with("not a valid topdown result (missing field `reasons`")
        );
        let other = Saved {
            func: "vfs_read".into(),
            ..sample()
        };
        assert_eq!(
            err(&other.to_json()),
            "it is a result for function vfs_read, not deferred_split_folio"
        );
    }

    #[test]
    fn a_fifo_output_is_written_to_its_reader_or_rescued_without_one() {
        let dir = std::env::temp_dir().join(format!("topdown-fifo-out-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("f");
        crate::testing::mkfifo(&fifo);
        // Checked without opening it (that would end a reader's input).
        check_writable(&fifo, "--save").unwrap();
        // Nothing reads it: an error at once, not a wait for ever.
        let e = write_file(&fifo, b"x").unwrap_err();
        assert_eq!(
            e.to_string(),
            "it is a FIFO that nothing reads (start its reader first)"
        );
        // A reader gets it whole.
        let reader = {
            let fifo = fifo.clone();
            std::thread::spawn(move || fs::read(fifo).unwrap())
        };
        let mut done = write_file(&fifo, b"{\"a\":1}");
        for _ in 0..100 {
            if done.is_ok() {
                break;
            }
            // The reader has not opened it yet.
            std::thread::sleep(std::time::Duration::from_millis(20));
            done = write_file(&fifo, b"{\"a\":1}");
        }
        done.unwrap();
        assert_eq!(reader.join().unwrap(), b"{\"a\":1}");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_output_that_cannot_be_written_is_rescued() {
        let nowhere = Path::new("/nonexistent-dir/out.svg");
        let rescue = format!("topdown-test-rescue-{}.svg", std::process::id());
        let out = Output {
            option: "--flamegraph",
            path: nowhere,
            bytes: b"<svg/>",
            what: "the flame graph",
            rescue: rescue.clone(),
            stderr: "A;b 1\n",
            stderr_what: "its stacks, folded,",
        };
        let e = out.write().unwrap_err().to_string();
        let at = std::env::temp_dir().join(&rescue);
        assert!(
            e.starts_with("--flamegraph /nonexistent-dir/out.svg: cannot write it: ")
                && e.ends_with(&format!("; the flame graph is in {} instead", at.display())),
            "{e}"
        );
        assert_eq!(fs::read(&at).unwrap(), b"<svg/>");
        fs::remove_file(&at).unwrap();
        // No rescue file either: the text goes to standard error.
        let e = Output {
            rescue: "no/such/dir/x".into(),
            ..out
        }
        .write()
        .unwrap_err()
        .to_string();
        assert!(
            e.ends_with("; its stacks, folded, is the line above, on standard error"),
            "{e}"
        );
    }

    #[test]
    fn files_are_checked_loaded_and_written_whole() {
        let dir = std::env::temp_dir().join(format!("topdown-saved-test-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("r.json");
        check_writable(&path, "--save").unwrap();
        assert!(!path.exists(), "the check leaves nothing behind");
        let e = check_writable(&dir, "--save").unwrap_err();
        assert!(
            e.to_string()
                .ends_with(": cannot write it: it is a directory"),
            "{e}"
        );
        let e = check_writable(&dir.join("no/such/r.json"), "--save").unwrap_err();
        assert!(e.to_string().starts_with("--save "), "{e}");
        save(&path, &sample()).unwrap();
        assert_eq!(Saved::load(&path, None).unwrap(), sample());
        assert_eq!(
            fs::read_dir(&dir).unwrap().count(),
            1,
            "no temporary file left"
        );
        let e = Saved::load(&dir.join("missing.json"), None).unwrap_err();
        assert!(
            e.to_string().starts_with(&format!(
                "baseline {}: cannot read it: ",
                dir.join("missing.json").display()
            )),
            "{e}"
        );
        fs::remove_dir_all(&dir).unwrap();
    }
}
