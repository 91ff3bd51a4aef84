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
    notices: Notices,
}

/// How often serve --capture logs the same change of capture of a
/// function: a daemon's log, where two reasons near the threshold would
/// trade capture every few seconds.
const NOTICE_EVERY: Duration = Duration::from_secs(60);

/// serve --capture's notices of changes of capture: each change at once,
/// but the same one (the same reason starting, ending or moving from the
/// same others) again only NOTICE_EVERY later; the repeats held back are
/// counted in one line a NOTICE_EVERY per function, with what is captured
/// then.
#[derive(Default)]
struct Notices {
    /// When each change was last printed, by its text without figures.
    said: HashMap<String, Instant>,
    /// Per function: repeats held back, since when.
    held: HashMap<String, (u64, Instant)>,
}

/// A notice's text without its figures ("ZAP has 91.0% of calls (...)"):
/// the same change whatever its share.
fn change_of(line: &str) -> String {
    match line
        .find(" has ")
        .and_then(|i| Some((i, line[i..].find("%): ")?)))
    {
        Some((i, j)) => format!("{}{}", &line[..i], &line[i + j + 3..]),
        None => line.to_string(),
    }
}

impl Notices {
    /// Of a tick's notices `said` of function `func`, those to print now.
    fn admit(&mut self, func: &str, said: Vec<String>, now: Instant) -> Vec<String> {
        let mut out = Vec::new();
        for line in said {
            let key = change_of(&line);
            match self.said.get(&key) {
                Some(at) if now.duration_since(*at) < NOTICE_EVERY => {
                    self.held.entry(func.to_string()).or_insert((0, now)).0 += 1;
                }
                _ => {
                    self.said.insert(key, now);
                    out.push(line);
                }
            }
        }
        out
    }

    /// The line that sums up function `func`'s repeats held back, once
    /// NOTICE_EVERY has passed since the first; `captured`: the reasons
    /// captured now.
    fn summary(&mut self, func: &str, captured: &[String], now: Instant) -> Option<String> {
        let &(n, since) = self.held.get(func)?;
        if now.duration_since(since) < NOTICE_EVERY {
            return None;
        }
        self.held.remove(func);
        Some(format!(
            "{func}: stack capture changed {n} more time{} in the last {}s, as logged before; \
             captured now: {}",
            if n == 1 { "" } else { "s" },
            now.duration_since(since).as_secs(),
            match captured {
                [] => "none".to_string(),
                r => r.join(", "),
            }
        ))
    }
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
        notices: Notices::default(),
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
        let notices = &mut self.notices;
        self.watches.retain_mut(|w| match w.step(ksyms) {
            Ok((got, said)) => {
                let changed = !said.is_empty();
                let now = Instant::now();
                let targets = w.targets();
                let held = notices.summary(w.func(), &targets, now);
                for line in notices.admit(w.func(), said, now).iter().chain(&held) {
                    eprintln!("topdown: {line}");
                }
                if changed {
                    captures.switched(w.func(), targets);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_of_capture_is_logged_at_once_and_its_repeats_once_a_minute() {
        let mut n = Notices::default();
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let line = |r: &str, share: &str, what: &str| {
            format!("f: {r} has {share}% of calls (9 in the last 1.0s; threshold 80%): {what}")
        };
        let a = line("A", "91.0", "capturing its stacks");
        let b = line("B", "100.0", "moving stack capture from A");
        let a_back = line("A", "85.5", "moving stack capture from B");
        // Each change at once, the first time.
        for l in [&a, &b, &a_back] {
            assert_eq!(n.admit("f", vec![l.clone()], at(0)), vec![l.clone()]);
        }
        // The same changes again within the minute (other figures): held.
        let b2 = line("B", "99.0", "moving stack capture from A");
        assert!(n
            .admit(
                "f",
                vec![b2.clone(), line("A", "88.0", "moving stack capture from B")],
                at(10)
            )
            .is_empty());
        assert!(n.admit("f", vec![b2.clone()], at(20)).is_empty());
        // Another function's, or another change: at once.
        assert_eq!(n.admit("g", vec![a.replace("f:", "g:")], at(20)).len(), 1);
        let c = line("C", "90.0", "capturing its stacks, beside B's");
        assert_eq!(n.admit("f", vec![c.clone()], at(30)), vec![c]);
        // The repeats, summed up a minute after the first was held.
        assert_eq!(n.summary("f", &["B".into()], at(69)), None);
        assert_eq!(
            n.summary("f", &["B".into(), "C".into()], at(70)).as_deref(),
            Some("f: stack capture changed 3 more times in the last 60s, as logged before; captured now: B, C")
        );
        assert_eq!(n.summary("f", &[], at(200)), None);
        // A minute after it was said, the same change is said again.
        assert_eq!(n.admit("f", vec![b2.clone()], at(61)), vec![b2]);
    }
}
