//! `topdown serve`: the pinned functions' counters on /metrics, and with
//! --capture their hot reasons' stacks.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::bpf::pin;
use crate::error::{Error, Result};
use crate::funcname::FuncName;
use crate::host;
use crate::kallsyms::Kallsyms;
use crate::listen::Listen;
use crate::plan;
use crate::report;
use crate::serve;
use crate::session::watch::Watch;

use super::common::stop_on_signals;
use super::pinned::{pinned_mapper, snapshots, KsymsCache};

/// `topdown serve`: the pinned functions' counters on /metrics.
pub fn serve(listen: Listen, capture: Option<plan::ServeCapture>) -> Result<()> {
    host::check_privileges()?;
    let stop = stop_on_signals()?;
    let captures = capture.map(|_| serve::Captures::default());
    // Kept across scrapes: each would otherwise read /proc/kallsyms again,
    // once per function with new call sites.
    let ksyms = std::sync::Mutex::new(KsymsCache::default());
    let scrape = |format| {
        let mut ksyms = ksyms.lock().unwrap_or_else(|p| p.into_inner());
        // One function that cannot be read fails its own series, not the
        // scrape.
        let (mut read, mut unreadable) = (Vec::new(), Vec::new());
        for func in pin::pinned()? {
            match snapshots(std::slice::from_ref(&func), &mut ksyms) {
                Ok(all) => read.extend(all.into_iter().map(|(p, _)| p)),
                Err(e) => {
                    eprintln!("topdown: scrape: cannot read pinned {func}: {e}");
                    unreadable.push(func.to_string());
                }
            }
        }
        let series = captures.as_ref().map(serve::Captures::series);
        Ok(report::openmetrics::encode(
            format,
            &read,
            &unreadable,
            series.as_deref(),
        ))
    };
    let (Some(cap), Some(captures)) = (capture, captures.as_ref()) else {
        return serve::run(&listen, &stop, scrape, None);
    };
    std::thread::scope(|s| {
        let server = s.spawn(|| {
            let served = serve::run(&listen, &stop, scrape, Some(captures));
            stop.store(true, Ordering::Relaxed);
            served
        });
        let watched = watch_pinned(&stop, cap, captures);
        stop.store(true, Ordering::Relaxed);
        let served = server
            .join()
            .unwrap_or_else(|_| Err(Error::msg("the HTTP server failed")));
        served.and(watched)
    })
}

/// The watches of serve --capture, and the functions not watched with
/// what was said about each (said once).
struct Watching<'a> {
    cap: plan::ServeCapture,
    captures: &'a serve::Captures,
    watches: Vec<Watch>,
    said: HashMap<FuncName, String>,
}

/// serve --capture's loop: every pinned function is watched (the trigger
/// run on its counters, the hot reason's stacks captured) unless another
/// reader steers its capture, in which case it is watched once that one
/// ends; an instance unpinned or re-pinned is let go within a second.
fn watch_pinned(
    stop: &AtomicBool,
    cap: plan::ServeCapture,
    captures: &serve::Captures,
) -> Result<()> {
    let ksyms = host::load_kallsyms()?;
    let mut w = Watching {
        cap,
        captures,
        watches: Vec::new(),
        said: HashMap::new(),
    };
    let mut next_scan = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        if now >= next_scan {
            next_scan = now + Duration::from_secs(1);
            w.scan(&ksyms);
        }
        w.step(&ksyms);
        let due = w.watches.iter().map(Watch::due).fold(next_scan, Ord::min);
        std::thread::sleep(
            due.saturating_duration_since(Instant::now())
                .min(Duration::from_millis(50)),
        );
    }
    Ok(())
}

impl Watching<'_> {
    /// Lets go of instances unpinned or re-pinned, and watches those
    /// pinned since (or no longer steered by another reader).
    fn scan(&mut self, ksyms: &Kallsyms) {
        let pinned = pin::pinned().unwrap_or_default();
        let captures = self.captures;
        self.watches.retain(|w| {
            let func = FuncName::parse(w.func()).ok();
            let id = func.as_ref().and_then(pin::instance_id);
            let kept = id == Some(w.instance());
            if !kept {
                let what = if id.is_some() {
                    "re-pinned"
                } else {
                    "unpinned"
                };
                eprintln!("topdown: {}: {what}: its stack capture stops", w.func());
                captures.switched(w.func(), Vec::new());
            }
            kept
        });
        self.said.retain(|f, _| pinned.contains(f));
        for func in &pinned {
            if self.watches.iter().any(|w| w.func() == func.as_str()) {
                continue;
            }
            let why = match start_watch(func, self.cap, ksyms) {
                Ok(Ok(w)) => {
                    eprintln!(
                        "topdown: {func}: watching for a reason to take over (threshold {}%)",
                        self.cap.trigger.threshold
                    );
                    self.said.remove(func);
                    captures.switched(func, Vec::new());
                    self.watches.push(w);
                    continue;
                }
                Ok(Err(pid)) => format!(
                    "{func}: its stack capture is steered by topdown (pid {pid}): \
                     watched once that one ends"
                ),
                Err(e) => format!("{func}: cannot watch it: {e}"),
            };
            if self.said.get(func) != Some(&why) {
                eprintln!("topdown: {why}");
                self.said.insert(func.clone(), why);
            }
        }
    }

    /// Steps every watch; one that fails stops.
    fn step(&mut self, ksyms: &Kallsyms) {
        let captures = self.captures;
        self.watches.retain_mut(|w| match w.step(ksyms) {
            Ok((got, said)) => {
                for line in &said {
                    eprintln!("topdown: {line}");
                }
                if !said.is_empty() {
                    captures.switched(w.func(), w.targets());
                }
                captures.add(w.func(), got);
                if let Some(gates) = w.take_gates() {
                    captures.gates(w.func(), gates);
                }
                true
            }
            Err(e) => {
                eprintln!("topdown: {}: stack capture stops: {e}", w.func());
                captures.switched(w.func(), Vec::new());
                false
            }
        });
    }
}

/// A watch of `func`'s pinned instance, or the pid of the reader that
/// steers its capture.
fn start_watch(
    func: &FuncName,
    cap: plan::ServeCapture,
    ksyms: &Kallsyms,
) -> Result<std::result::Result<Watch, String>> {
    let lock = match pin::Lock::try_take_for_serve(func)? {
        Ok(lock) => lock,
        Err(holder) => return Ok(Err(holder)),
    };
    let id = pin::instance_id(func).ok_or_else(|| Error::msg("it is not pinned any more"))?;
    let inst = pin::open(func)?;
    if pin::instance_id(func) != Some(id) {
        return Err(Error::msg("it was re-pinned meanwhile"));
    }
    let mapper = pinned_mapper(&inst)?;
    Watch::new(inst, id, lock, mapper, cap.trigger, cap.max_rate, ksyms).map(Ok)
}
