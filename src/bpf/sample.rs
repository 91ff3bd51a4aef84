//! The stack ring buffer's records (td_sample), decoded.

use crate::bpf::skel::types;

// SAFETY: td_sample is a repr(C) struct of integers and arrays: any bytes
// of its size are a valid value.
unsafe impl plain::Plain for types::td_sample {}

/// One captured sample, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Sample {
    /// CLOCK_MONOTONIC nanoseconds of the call.
    pub(crate) ts: u64,
    pub(crate) reason: u32,
    /// Taken by the background sampler, not by a capture.
    pub(crate) background: bool,
    /// The thread group (process) and thread that made the call, the CPU
    /// it ran on, and the thread's command name.
    pub(crate) pid: u32,
    pub(crate) tid: u32,
    pub(crate) cpu: u32,
    pub(crate) comm: String,
    /// The caller's return address the BPF side found (0: not found).
    pub(crate) caller: u64,
    pub(crate) kstack: Vec<u64>,
    pub(crate) ustack: Vec<u64>,
}

fn frames_of(stack: &[u64], bytes: i32) -> Vec<u64> {
    let n = (bytes.max(0) as usize / 8).min(stack.len());
    stack[..n].iter().copied().take_while(|&a| a != 0).collect()
}

/// A kernel command name: up to the first NUL, bytes not UTF-8 replaced.
/// The skeleton types `char` as i8 on every architecture (c_char is u8
/// on arm64).
fn comm_of(raw: &[i8]) -> String {
    let bytes: Vec<u8> = raw
        .iter()
        .map(|&c| c as u8)
        .take_while(|&b| b != 0)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

impl Sample {
    /// Decodes one ring buffer record; None if it is too short.
    pub(crate) fn decode(bytes: &[u8]) -> Option<Sample> {
        let mut raw = types::td_sample::default();
        plain::copy_from_bytes(&mut raw, bytes).ok()?;
        Some(Sample {
            ts: raw.ts,
            reason: raw.reason,
            background: raw.background != 0,
            pid: raw.pid,
            tid: raw.tid,
            cpu: raw.cpu,
            comm: comm_of(&raw.comm),
            caller: raw.caller,
            kstack: frames_of(&raw.kstack, raw.kstack_bytes),
            ustack: frames_of(&raw.ustack, raw.ustack_bytes),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_reads_sizes_and_stops_at_zero_frames() {
        let mut raw = types::td_sample {
            pid: 42,
            tid: 43,
            cpu: 1,
            reason: 5,
            caller: 7,
            background: 1,
            kstack_bytes: 3 * 8,
            ustack_bytes: -14,
            ..Default::default()
        };
        raw.kstack[0] = 1;
        raw.kstack[1] = 2;
        raw.kstack[2] = 0;
        for (d, c) in raw.comm.iter_mut().zip(b"thp\0junk") {
            *d = *c as _;
        }
        // SAFETY: reading a repr(C) value's bytes.
        let bytes = unsafe { plain::as_bytes(&raw) };
        let s = Sample::decode(bytes).unwrap();
        assert_eq!((s.pid, s.reason, s.caller, s.background), (42, 5, 7, true));
        assert_eq!((s.tid, s.cpu, s.comm.as_str()), (43, 1, "thp"));
        assert_eq!(s.kstack, vec![1, 2]);
        assert!(s.ustack.is_empty());
        assert!(Sample::decode(&bytes[..10]).is_none());
    }
}
