//! Stack capture: samples from the BPF ring buffer, trimmed to the frames
//! above the traced function, and counted per distinct stack.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

use libbpf_rs::{MapHandle, RingBuffer, RingBufferBuilder};

use crate::error::{Error, Result};
use crate::output::StackRow;
use crate::skel::types::td_sample;

// SAFETY: td_sample is a repr(C) struct of integers and arrays: any bytes
// of its size are a valid value.
unsafe impl plain::Plain for td_sample {}

/// One captured sample, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    pub pid: u32,
    pub tid: u32,
    pub cpu: u32,
    pub reason: u32,
    pub comm: String,
    pub kstack: Vec<u64>,
    pub ustack: Vec<u64>,
}

fn frames_of(stack: &[u64], bytes: i32) -> Vec<u64> {
    let n = (bytes.max(0) as usize / 8).min(stack.len());
    stack[..n].iter().copied().take_while(|&a| a != 0).collect()
}

/// Decodes one ring buffer record.
pub fn decode(bytes: &[u8]) -> Option<Sample> {
    let mut raw = td_sample::default();
    plain::copy_from_bytes(&mut raw, bytes).ok()?;
    let comm: Vec<u8> = raw
        .comm
        .iter()
        .map(|&c| c as u8)
        .take_while(|&c| c != 0)
        .collect();
    Some(Sample {
        pid: raw.pid,
        tid: raw.tid,
        cpu: raw.cpu,
        reason: raw.reason,
        comm: String::from_utf8_lossy(&comm).into_owned(),
        kstack: frames_of(&raw.kstack, raw.kstack_bytes),
        ustack: frames_of(&raw.ustack, raw.ustack_bytes),
    })
}

/// The frames above the traced function's entry frame, caller first. BPF
/// program and trampoline frames sit below it and are dropped with it. If
/// the entry frame is missing the stack is kept whole.
pub fn above_entry(kstack: &[u64], func_addr: u64, window: u64) -> &[u64] {
    match kstack
        .iter()
        .position(|&ip| ip.wrapping_sub(func_addr) < window)
    {
        Some(i) => &kstack[i + 1..],
        None => kstack,
    }
}

/// The ring buffer and the samples it has delivered.
pub struct Capture {
    ring: RingBuffer<'static>,
    inbox: Rc<RefCell<Vec<Sample>>>,
    _map: MapHandle,
}

impl Capture {
    pub fn new(map: MapHandle) -> Result<Self> {
        let inbox = Rc::new(RefCell::new(Vec::new()));
        let sink = Rc::clone(&inbox);
        let mut builder = RingBufferBuilder::new();
        builder
            .add(&map, move |data: &[u8]| {
                if let Some(s) = decode(data) {
                    sink.borrow_mut().push(s);
                }
                0
            })
            .map_err(|e| Error::bpf("setting up the ring buffer", e))?;
        let ring = builder
            .build()
            .map_err(|e| Error::bpf("setting up the ring buffer", e))?;
        Ok(Capture {
            ring,
            inbox,
            _map: map,
        })
    }

    /// Sleeps until samples arrive or `timeout` passes.
    pub fn wait(&self, timeout: Duration) -> Result<()> {
        match self.ring.poll(timeout) {
            Err(e) if e.kind() != libbpf_rs::ErrorKind::Interrupted => {
                Err(Error::bpf("polling the ring buffer", e))
            }
            _ => Ok(()),
        }
    }

    /// Reads what is left in the buffer without waiting.
    pub fn drain(&self) -> Result<()> {
        self.ring
            .consume()
            .map_err(|e| Error::bpf("reading the ring buffer", e))
    }

    pub fn take(&self) -> Vec<Sample> {
        std::mem::take(&mut *self.inbox.borrow_mut())
    }
}

/// A symbolized stack: kernel frames caller first, then user frames
/// innermost first.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Stack {
    pub kernel: Vec<String>,
    pub user: Vec<String>,
}

impl Stack {
    /// Frames for display, with a separator before the user part.
    pub fn display(&self) -> Vec<String> {
        let mut f = self.kernel.clone();
        if !self.user.is_empty() {
            f.push("--".into());
            f.extend(self.user.iter().cloned());
        }
        f
    }

    /// The folded form: `reason` as the root, then the frames root first,
    /// `func` as the leaf.
    pub fn folded(&self, reason: &str, func: &str) -> String {
        let mut parts: Vec<&str> = vec![reason];
        parts.extend(self.user.iter().rev().map(String::as_str));
        parts.extend(self.kernel.iter().rev().map(String::as_str));
        parts.push(func);
        parts
            .iter()
            .map(|p| p.replace([';', ' '], "_"))
            .collect::<Vec<_>>()
            .join(";")
    }
}

/// Counts per distinct stack, for the interval and for the run.
#[derive(Debug, Default)]
pub struct Tally {
    interval: HashMap<Stack, u64>,
    run: HashMap<Stack, u64>,
    interval_total: u64,
    run_total: u64,
}

fn top(map: &HashMap<Stack, u64>, n: usize) -> Vec<StackRow> {
    let mut v: Vec<(&Stack, u64)> = map.iter().map(|(s, &c)| (s, c)).collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
    v.into_iter()
        .take(n)
        .map(|(s, count)| StackRow {
            count,
            frames: s.display(),
        })
        .collect()
}

impl Tally {
    pub fn add(&mut self, stack: Stack) {
        *self.interval.entry(stack.clone()).or_default() += 1;
        *self.run.entry(stack).or_default() += 1;
        self.interval_total += 1;
        self.run_total += 1;
    }

    /// The interval's top `n` stacks and its stack count; starts a new
    /// interval.
    pub fn end_interval(&mut self, n: usize) -> (u64, Vec<StackRow>) {
        let out = (self.interval_total, top(&self.interval, n));
        self.interval.clear();
        self.interval_total = 0;
        out
    }

    pub fn run_top(&self, n: usize) -> (u64, Vec<StackRow>) {
        (self.run_total, top(&self.run, n))
    }

    /// Every stack of the run in folded form, one line each, sorted.
    pub fn folded(&self, reason: &str, func: &str) -> String {
        let mut lines: Vec<String> = self
            .run
            .iter()
            .map(|(s, c)| format!("{} {c}", s.folded(reason, func)))
            .collect();
        lines.sort();
        lines.iter().map(|l| format!("{l}\n")).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stack(k: &[&str], u: &[&str]) -> Stack {
        Stack {
            kernel: k.iter().map(|s| s.to_string()).collect(),
            user: u.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn frames_above_the_entry_frame_are_kept() {
        let func = 0xffffffff81000000;
        let ks = [0xffffffffc0001000, 0xffffffffc0002000, func + 9, 0xa, 0xb];
        assert_eq!(above_entry(&ks, func, 16), &[0xa, 0xb]);
        assert_eq!(above_entry(&[0xa, 0xb], func, 16), &[0xa, 0xb]);
    }

    #[test]
    fn decode_reads_sizes_and_stops_at_zero_frames() {
        let mut raw = td_sample {
            pid: 42,
            tid: 43,
            cpu: 1,
            reason: 5,
            kstack_bytes: 3 * 8,
            ustack_bytes: -14,
            ..Default::default()
        };
        raw.kstack[0] = 1;
        raw.kstack[1] = 2;
        raw.kstack[2] = 0;
        raw.comm[..3].copy_from_slice(&[b't' as i8, b'h' as i8, b'p' as i8]);
        // SAFETY: reading a repr(C) value's bytes.
        let bytes = unsafe { plain::as_bytes(&raw) };
        let s = decode(bytes).unwrap();
        assert_eq!((s.pid, s.tid, s.cpu, s.reason), (42, 43, 1, 5));
        assert_eq!(s.comm, "thp");
        assert_eq!(s.kstack, vec![1, 2]);
        assert!(s.ustack.is_empty());
        assert!(decode(&bytes[..10]).is_none());
    }

    #[test]
    fn tally_counts_per_interval_and_run() {
        let mut t = Tally::default();
        let a = stack(&["zap_pte_range+0x1", "unmap_page_range+0x2"], &[]);
        let b = stack(&["do_huge_pmd_anonymous_page+0x3"], &[]);
        t.add(a.clone());
        t.add(a.clone());
        t.add(b.clone());
        let (n, rows) = t.end_interval(5);
        assert_eq!(n, 3);
        assert_eq!(rows[0].count, 2);
        assert_eq!(rows[0].frames, a.display());
        assert_eq!(rows[1].count, 1);
        t.add(b.clone());
        let (n, rows) = t.end_interval(1);
        assert_eq!((n, rows.len(), rows[0].count), (1, 1, 1));
        let (n, rows) = t.run_top(5);
        assert_eq!(n, 4);
        assert_eq!((rows[0].count, rows[1].count), (2, 2));
    }

    #[test]
    fn folded_lines_are_reason_then_root_first_with_the_function_as_leaf() {
        let mut t = Tally::default();
        t.add(stack(
            &["caller+0x1", "root fn+0x2"],
            &["main+0x5", "_start+0x1"],
        ));
        t.add(stack(
            &["caller+0x1", "root fn+0x2"],
            &["main+0x5", "_start+0x1"],
        ));
        assert_eq!(
            t.folded("ZAP", "deferred_split_folio"),
            "ZAP;_start+0x1;main+0x5;root_fn+0x2;caller+0x1;deferred_split_folio 2\n"
        );
    }

    #[test]
    fn display_separates_user_frames() {
        let s = stack(&["k"], &["u"]);
        assert_eq!(s.display(), ["k", "--", "u"]);
        assert_eq!(stack(&["k"], &[]).display(), ["k"]);
    }
}
