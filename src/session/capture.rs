//! Stack capture: samples from the BPF ring buffer, trimmed to the frames
//! above the traced function, and counted per distinct stack.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

use libbpf_rs::{MapHandle, RingBuffer, RingBufferBuilder};

use crate::bpf::sample::Sample;
use crate::error::{Error, Result};
use crate::report::{rank_processes, Process, ProcessCount, Stack, StackCount};

/// The frames above the traced function's entry frame, caller first. BPF
/// program and trampoline frames sit below it and are dropped with it. If
/// the entry frame is missing (a jumped-to trampoline on x86 7.x) the
/// stack starts at `caller`, or is kept whole if it lacks that too. If the frame above
/// the entry is not `caller`, the caller's return address the BPF side
/// found, the unwind missed it and it is put first: an arm64 kprobe fires
/// at FUNC's first instruction, before FUNC has pushed its frame record, so
/// the kernel's unwinder goes from FUNC straight to its caller's caller.
pub(crate) fn above_entry(kstack: &[u64], func_addr: u64, window: u64, caller: u64) -> Vec<u64> {
    match kstack
        .iter()
        .position(|&ip| ip.wrapping_sub(func_addr) < window)
    {
        Some(i) => {
            let above = &kstack[i + 1..];
            if caller != 0 && above.first() != Some(&caller) {
                std::iter::once(caller)
                    .chain(above.iter().copied())
                    .collect()
            } else {
                above.to_vec()
            }
        }
        // No entry frame (a jumped-to trampoline): the stack from the
        // caller the BPF side found, if the unwind has it.
        None => match kstack.iter().position(|&ip| caller != 0 && ip == caller) {
            Some(i) => kstack[i..].to_vec(),
            None => kstack.to_vec(),
        },
    }
}

/// The ring buffer and the samples it has delivered.
pub(crate) struct Capture {
    ring: RingBuffer<'static>,
    inbox: Rc<RefCell<Vec<Sample>>>,
    _map: MapHandle,
}

impl Capture {
    pub(crate) fn new(map: MapHandle) -> Result<Self> {
        let inbox = Rc::new(RefCell::new(Vec::new()));
        let sink = Rc::clone(&inbox);
        let mut builder = RingBufferBuilder::new();
        builder
            .add(&map, move |data: &[u8]| {
                if let Some(s) = Sample::decode(data) {
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

    /// Sleeps until the buffer is half full or `timeout` passes, then reads
    /// what is there: the program wakes no reader for each stack.
    pub(crate) fn wait(&self, timeout: Duration) -> Result<()> {
        match self.ring.poll(timeout) {
            Err(e) if e.kind() != libbpf_rs::ErrorKind::Interrupted => {
                return Err(Error::bpf("polling the ring buffer", e));
            }
            _ => {}
        }
        self.drain()
    }

    /// Reads what is left in the buffer without waiting.
    pub(crate) fn drain(&self) -> Result<()> {
        self.ring
            .consume()
            .map_err(|e| Error::bpf("reading the ring buffer", e))
            .map(|_| ())
    }

    pub(crate) fn take(&self) -> Vec<Sample> {
        std::mem::take(&mut *self.inbox.borrow_mut())
    }
}

/// A distinct stack's count, per process.
#[derive(Debug, Default, Clone)]
struct PerStack {
    count: u64,
    processes: HashMap<Process, u64>,
}

/// Counts per distinct stack and process, for the interval and for the run.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    interval: HashMap<Stack, PerStack>,
    run: HashMap<Stack, PerStack>,
    /// Of those, the background sampler's: this interval's, the run's.
    pub(crate) background: (u64, u64),
}

/// Stacks by count, most frequent first (ties in stack order), their
/// total, and the processes of all of them, most first.
fn ranked(map: &HashMap<Stack, PerStack>) -> (u64, Vec<StackCount>, Vec<ProcessCount>) {
    let mut all: HashMap<Process, u64> = HashMap::new();
    let mut v: Vec<StackCount> = map
        .iter()
        .map(|(s, per)| {
            for (p, n) in &per.processes {
                *all.entry(p.clone()).or_default() += n;
            }
            StackCount {
                stack: s.clone(),
                count: per.count,
                processes: rank_processes(per.processes.iter().map(|(p, &n)| (p.clone(), n))),
            }
        })
        .collect();
    v.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.stack.cmp(&b.stack)));
    (v.iter().map(|s| s.count).sum(), v, rank_processes(all))
}

impl Tally {
    /// A stack; `background`: the background sampler's.
    pub(crate) fn add(&mut self, stack: Stack, process: Process, background: bool) {
        if background {
            self.background.0 += 1;
            self.background.1 += 1;
        }
        for map in [&mut self.interval, &mut self.run] {
            let per = map.entry(stack.clone()).or_default();
            per.count += 1;
            *per.processes.entry(process.clone()).or_default() += 1;
        }
    }

    /// The interval's stacks, their total and their processes; starts a
    /// new interval.
    pub(crate) fn end_interval(&mut self) -> (u64, Vec<StackCount>, Vec<ProcessCount>) {
        let out = ranked(&self.interval);
        self.interval.clear();
        self.background.0 = 0;
        out
    }

    /// The run's stacks, their total and their processes.
    pub(crate) fn run(&self) -> (u64, Vec<StackCount>, Vec<ProcessCount>) {
        ranked(&self.run)
    }

    /// The run's stacks taken by capture (not the background sampler's),
    /// counted without ranking them.
    pub(crate) fn run_captured(&self) -> u64 {
        let total: u64 = self.run.values().map(|p| p.count).sum();
        total - self.background.1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stack(k: &[&str]) -> Stack {
        Stack {
            kernel: k.iter().map(|s| s.to_string()).collect(),
            user: vec![],
        }
    }

    #[test]
    fn frames_above_the_entry_frame_are_kept() {
        let func = 0xffffffff81000000;
        let ks = [0xffffffffc0001000, 0xffffffffc0002000, func + 9, 0xa, 0xb];
        assert_eq!(above_entry(&ks, func, 16, 0xa), [0xa, 0xb]);
        assert_eq!(above_entry(&ks, func, 16, 0), [0xa, 0xb]);
        assert_eq!(above_entry(&[0xa, 0xb], func, 16, 0xa), [0xa, 0xb]);
        // A jumped-to trampoline: no entry frame, the stack starts at the
        // caller the BPF side found.
        let jmp = [0xffffffffc0001000, 0xffffffffc0002000, 0xa, 0xb];
        assert_eq!(above_entry(&jmp, func, 16, 0xa), [0xa, 0xb]);
        assert_eq!(above_entry(&jmp, func, 16, 0), jmp);
    }

    #[test]
    fn a_caller_the_unwind_missed_is_put_first() {
        // arm64 kprobe: FUNC+0, then the caller's caller; the caller was in
        // the link register only.
        let func = 0xffff800080000000;
        let ks = [func, 0xb, 0xc];
        assert_eq!(above_entry(&ks, func, 16, 0xa), [0xa, 0xb, 0xc]);
        assert_eq!(above_entry(&[func], func, 16, 0xa), [0xa]);
        // No entry frame: kept whole, nothing added.
        assert_eq!(above_entry(&[0xb, 0xc], func, 16, 0xa), [0xb, 0xc]);
    }

    fn proc(comm: &str, pid: u32) -> Process {
        Process {
            comm: comm.into(),
            pid,
        }
    }

    #[test]
    fn tally_counts_per_interval_and_run() {
        let mut t = Tally::default();
        let a = stack(&["zap_pte_range+0x1", "unmap_page_range+0x2"]);
        let b = stack(&["do_huge_pmd_anonymous_page+0x3"]);
        t.add(a.clone(), proc("thp", 7), false);
        t.add(a.clone(), proc("thp", 7), false);
        t.add(b.clone(), proc("thp", 7), true);
        assert_eq!(t.background, (1, 1));
        let (n, rows, procs) = t.end_interval();
        assert_eq!(n, 3);
        assert_eq!(t.background, (0, 1));
        assert_eq!((rows[0].count, &rows[0].stack), (2, &a));
        assert_eq!(rows[1].count, 1);
        assert_eq!((procs.len(), procs[0].count), (1, 3));
        t.add(b.clone(), proc("cc1", 9), false);
        let (n, rows, _) = t.end_interval();
        assert_eq!((n, rows.len(), rows[0].count), (1, 1, 1));
        let (n, rows, procs) = t.run();
        assert_eq!(n, 4);
        assert_eq!(procs.len(), 2);
        assert_eq!((rows[0].count, rows[1].count), (2, 2));
        // Equal counts: in stack order, so output is stable.
        assert_eq!(rows[0].stack, b);
    }

    #[test]
    fn processes_are_counted_per_stack_and_per_reason() {
        let mut t = Tally::default();
        let a = stack(&["a"]);
        let b = stack(&["b"]);
        for (s, p) in [
            (&a, proc("thp", 7)),
            (&a, proc("thp", 8)),
            (&a, proc("thp", 8)),
            (&b, proc("thp", 7)),
            (&b, proc("kworker/0:1", 12)),
        ] {
            t.add(s.clone(), p, false);
        }
        let (_, rows, procs) = t.run();
        let text = |v: &[ProcessCount]| {
            v.iter()
                .map(|p| format!("{} {}", p.process, p.count))
                .collect::<Vec<_>>()
        };
        assert_eq!(text(&rows[0].processes), ["thp[8] 2", "thp[7] 1"]);
        // Ties: by name, then pid.
        assert_eq!(text(&rows[1].processes), ["kworker/0:1[12] 1", "thp[7] 1"]);
        assert_eq!(text(&procs), ["thp[7] 2", "thp[8] 2", "kworker/0:1[12] 1"]);
    }
}
