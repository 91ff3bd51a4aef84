//! The files a run writes at exit, after its summary: --folded,
//! --flamegraph and --save.

use crate::error::{Error, Result};
use crate::plan::Files;
use crate::report::flamegraph::Failed;
use crate::report::{self, saved, Saved, Summary};
use crate::session;

use super::common::Status;

/// Writes a run's files, whatever ended it; an error that ended it early
/// is its result then (after the files' own errors, printed).
pub(super) fn finish(ended: session::Ended, files: &Files, top: usize) -> Result<Status> {
    let written = write_outputs(&ended.summary, files, top);
    match (ended.error, written) {
        (None, written) => written,
        (Some(e), Err(out)) => {
            eprintln!("topdown: {out}");
            Err(e)
        }
        (Some(e), Ok(_)) => Err(e),
    }
}

/// Each file checked writable at start. One failing does not keep the
/// others from being written, and what it held is rescued
/// (`saved::Output`); the last error is returned (earlier ones are
/// printed).
fn write_outputs(sum: &Summary, files: &Files, top: usize) -> Result<Status> {
    let mut failed: Option<Error> = None;
    let mut fail = |e: Error| {
        if let Some(prev) = failed.replace(e) {
            eprintln!("topdown: {prev}");
        }
    };
    let pid = std::process::id();
    let folded = report::folded::folded(&sum.stacks, &sum.func);
    if let Some(path) = &files.folded {
        let out = saved::Output {
            option: "--folded",
            path,
            bytes: folded.as_bytes(),
            what: "the folded stacks",
            rescue: format!("topdown-{}-{pid}.folded", sum.func),
            stderr: &folded,
            stderr_what: "the folded stacks",
        };
        out.write().unwrap_or_else(&mut fail);
    }
    if let Some(path) = &files.flamegraph {
        if let Some(svg) = flamegraph(sum, &folded, path, &mut fail) {
            let out = saved::Output {
                option: "--flamegraph",
                path,
                bytes: &svg,
                what: "the flame graph",
                rescue: format!("topdown-{}-{pid}.svg", sum.func),
                stderr: &folded,
                stderr_what: "its stacks, folded,",
            };
            out.write().unwrap_or_else(&mut fail);
        }
    }
    if let Some(path) = &files.save {
        saved::save(path, &Saved::of_summary(sum, top)).unwrap_or_else(&mut fail);
    }
    match failed {
        Some(e) => Err(e),
        None => Ok(Status::of(sum.compare.as_ref())),
    }
}

/// The flame graph of the folded stacks; with no stacks, one that says
/// so; None (and `fail` told) if it cannot be drawn.
fn flamegraph(
    sum: &Summary,
    folded: &str,
    path: &std::path::Path,
    fail: &mut impl FnMut(Error),
) -> Option<Vec<u8>> {
    match report::flamegraph::svg(folded, &sum.func, &flamegraph_subtitle(sum)) {
        Ok(svg) => Some(svg),
        Err(Failed::NoStacks(empty)) => {
            eprintln!(
                "topdown: --flamegraph {}: no stacks were captured; the flame graph says so",
                path.display()
            );
            Some(empty)
        }
        Err(Failed::Inferno(e)) => {
            fail(Error::msg(format!(
                "--flamegraph {}: cannot draw it: {e}",
                path.display()
            )));
            None
        }
    }
}

/// The flame graph's subtitle: the run it comes from.
fn flamegraph_subtitle(sum: &Summary) -> String {
    let mut s = format!(
        "{} in {:.1}s, kernel {}, {}",
        report::calls(sum.calls.total),
        sum.calls.secs,
        sum.kernel,
        sum.mode
    );
    if let Some(f) = &sum.filter {
        s.push_str(&format!("; only calls {}", f.text));
    }
    s
}
