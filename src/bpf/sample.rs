//! The stack ring buffer's records (td_sample), decoded.

use crate::bpf::skel::types;

// SAFETY: td_sample is a repr(C) struct of integers and arrays: any bytes
// of its size are a valid value.
unsafe impl plain::Plain for types::td_sample {}
// SAFETY: integers and a byte array, as the BPF side writes them.
unsafe impl plain::Plain for types::td_uproc {}

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
    pub(crate) ustack: Vec<UserFrame>,
}

/// A user stack frame as the kernel gave it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum UserFrame {
    /// An address in the process: named through its memory maps, while
    /// they can be read.
    Addr(u64),
    /// An offset in the file of this build ID (zero-padded to 20 bytes):
    /// named from the file, after the process has gone too.
    File { build_id: [u8; 20], offset: u64 },
}

impl UserFrame {
    /// The address (a frame the kernel gave a build ID for has none).
    pub(crate) fn addr(self) -> Option<u64> {
        match self {
            UserFrame::Addr(a) => Some(a),
            UserFrame::File { .. } => None,
        }
    }
}

fn frames_of(stack: &[u64], bytes: i32) -> Vec<u64> {
    let n = (bytes.max(0) as usize / 8).min(stack.len());
    stack[..n].iter().copied().take_while(|&a| a != 0).collect()
}

/// struct bpf_stack_build_id's status: no frame, then one with a build ID,
/// then one the kernel could give only the address of.
const BUILD_ID_VALID: i32 = 1;
const BUILD_ID_IP: i32 = 2;
const BUILD_ID_FRAME: usize = 32;

/// The build ID frames of `bytes` bytes of `stack`, up to the first empty
/// one.
fn build_id_frames_of(stack: &[u64], bytes: i32) -> Vec<UserFrame> {
    // SAFETY: u64s' bytes are valid u8s.
    let raw = unsafe { plain::as_bytes(stack) };
    let n = (bytes.max(0) as usize).min(raw.len()) / BUILD_ID_FRAME;
    raw.chunks_exact(BUILD_ID_FRAME)
        .take(n)
        .map_while(|f| {
            let status = i32::from_ne_bytes(f[..4].try_into().unwrap());
            let word = u64::from_ne_bytes(f[24..].try_into().unwrap());
            match status {
                BUILD_ID_VALID => Some(UserFrame::File {
                    build_id: f[4..24].try_into().unwrap(),
                    offset: word,
                }),
                BUILD_ID_IP if word != 0 => Some(UserFrame::Addr(word)),
                _ => None,
            }
        })
        .collect()
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
        // A record without user frames ends before them (see emit()).
        let mut raw = types::td_sample::default();
        let head = std::mem::size_of_val(&raw) - std::mem::size_of_val(&raw.ustack);
        if bytes.len() < head {
            return None;
        }
        // SAFETY: any bytes are a valid td_sample (see the Plain impl).
        let dst = unsafe { plain::as_mut_bytes(&mut raw) };
        let n = bytes.len().min(dst.len());
        dst[..n].copy_from_slice(&bytes[..n]);
        let ustack = match raw.ustack_build_id {
            0 => frames_of(&raw.ustack, raw.ustack_bytes)
                .into_iter()
                .map(UserFrame::Addr)
                .collect(),
            _ => build_id_frames_of(&raw.ustack, raw.ustack_bytes),
        };
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
            ustack,
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
        // A record without user frames ends where they would begin.
        let head = std::mem::size_of_val(&raw) - std::mem::size_of_val(&raw.ustack);
        assert_eq!(Sample::decode(&bytes[..head]), Some(s));
    }

    #[test]
    fn decode_reads_build_id_frames_and_address_ones() {
        let mut raw = types::td_sample {
            ustack_build_id: 1,
            ustack_bytes: 4 * 32,
            ..Default::default()
        };
        // Frame i: words 4i (status, then the build ID's first 4 bytes),
        // 4i+1..4i+3 (the rest of the build ID, then the offset or address).
        let frame = |raw: &mut types::td_sample, i: usize, status: i32, id: u8, word: u64| {
            let mut f = [0u8; 32];
            f[..4].copy_from_slice(&status.to_ne_bytes());
            f[4..24].fill(id);
            f[24..].copy_from_slice(&word.to_ne_bytes());
            for (w, c) in raw.ustack[4 * i..4 * i + 4].iter_mut().zip(f.chunks(8)) {
                *w = u64::from_ne_bytes(c.try_into().unwrap());
            }
        };
        frame(&mut raw, 0, 1, 0xab, 0x1234);
        frame(&mut raw, 1, 2, 0, 0x7f00_0000_1000);
        frame(&mut raw, 2, 0, 0, 0);
        frame(&mut raw, 3, 1, 0xcd, 0x10);
        // SAFETY: reading a repr(C) value's bytes.
        let s = Sample::decode(unsafe { plain::as_bytes(&raw) }).unwrap();
        assert_eq!(
            s.ustack,
            vec![
                UserFrame::File {
                    build_id: [0xab; 20],
                    offset: 0x1234
                },
                UserFrame::Addr(0x7f00_0000_1000),
            ]
        );
        // Only as many bytes as the kernel wrote are read.
        raw.ustack_bytes = 32;
        let s = Sample::decode(unsafe { plain::as_bytes(&raw) }).unwrap();
        assert_eq!(s.ustack.len(), 1);
    }
}
