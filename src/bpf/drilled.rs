//! --drill's counts as plain data: each path's reason slot, its frames
//! from the caller up and its calls, decoded from the kernel's path keys
//! (td_path_key), and the calls the full table could not hold.

use crate::bpf::abi;
use crate::bpf::skel::types;

/// u64s in a td_path_key: the reason (and padding), then the frames.
pub(crate) const PATH_KEY_WORDS: usize = 1 + abi::DRILL_FRAMES as usize;
const _: () = assert!(std::mem::size_of::<types::td_path_key>() == PATH_KEY_WORDS * 8);

/// One path's calls, summed over the CPUs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DrilledPath {
    pub(crate) slot: u32,
    /// The caller's return address, then those above it, as deep as the
    /// run drills or the stack goes (no zeros).
    pub(crate) frames: Vec<u64>,
    /// The unwind found no caller: `frames` holds the caller alone.
    pub(crate) unwound: bool,
    pub(crate) calls: u64,
}

/// Every drilled path, and by slot the calls the full table left out.
#[derive(Debug, Clone, Default)]
pub(crate) struct Drilled {
    pub(crate) paths: Vec<DrilledPath>,
    pub(crate) full: Vec<(u32, u64)>,
}

impl Drilled {
    /// The calls since `before`, a reading of the same table (counts only
    /// grow): paths and full counts with none left out.
    pub(crate) fn since(&self, before: &Drilled) -> Drilled {
        let was = |p: &DrilledPath| {
            before
                .paths
                .iter()
                .find(|b| b.slot == p.slot && b.unwound == p.unwound && b.frames == p.frames)
                .map_or(0, |b| b.calls)
        };
        let paths = self
            .paths
            .iter()
            .map(|p| DrilledPath {
                calls: p.calls.saturating_sub(was(p)),
                ..p.clone()
            })
            .filter(|p| p.calls > 0)
            .collect();
        let full = self
            .full
            .iter()
            .map(|&(slot, n)| {
                let b = before.full.iter().find(|b| b.0 == slot).map_or(0, |b| b.1);
                (slot, n.saturating_sub(b))
            })
            .filter(|f| f.1 > 0)
            .collect();
        Drilled { paths, full }
    }
}

/// A path key's words as a DrilledPath with `calls`.
pub(crate) fn path_of(words: &[u64], calls: u64) -> Option<DrilledPath> {
    let (&w0, frames) = words.split_first()?;
    // the reason is the key's first 4 bytes in memory
    let slot = u32::from_ne_bytes(w0.to_ne_bytes()[..4].try_into().ok()?);
    let unwound = frames.get(1) != Some(&abi::NO_FRAMES);
    let end = match unwound {
        true => frames.iter().position(|&f| f == 0).unwrap_or(frames.len()),
        false => 1,
    };
    Some(DrilledPath {
        slot,
        frames: frames[..end].to_vec(),
        unwound,
        calls,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(slot: u32, frames: &[u64]) -> Vec<u64> {
        let mut k = vec![0u64; PATH_KEY_WORDS];
        let mut w0 = [0u8; 8];
        w0[..4].copy_from_slice(&slot.to_ne_bytes());
        k[0] = u64::from_ne_bytes(w0);
        k[1..1 + frames.len()].copy_from_slice(frames);
        k
    }

    #[test]
    fn a_path_ends_at_its_first_zero_frame() {
        let p = path_of(&key(7, &[0xa, 0xb, 0xc]), 5).unwrap();
        assert_eq!(
            p,
            DrilledPath {
                slot: 7,
                frames: vec![0xa, 0xb, 0xc],
                unwound: true,
                calls: 5
            }
        );
    }

    #[test]
    fn an_interval_is_the_difference_of_two_readings() {
        let path = |frames: &[u64], calls| DrilledPath {
            slot: 2,
            frames: frames.to_vec(),
            unwound: true,
            calls,
        };
        let before = Drilled {
            paths: vec![path(&[1, 2], 5), path(&[1, 3], 4)],
            full: vec![(2, 1)],
        };
        let now = Drilled {
            paths: vec![path(&[1, 2], 9), path(&[1, 3], 4), path(&[1, 4], 2)],
            full: vec![(2, 3)],
        };
        let d = now.since(&before);
        assert_eq!(d.paths, vec![path(&[1, 2], 4), path(&[1, 4], 2)]);
        assert_eq!(d.full, vec![(2, 2)]);
    }

    #[test]
    fn a_failed_unwind_keeps_the_caller_alone() {
        let p = path_of(&key(3, &[0xa, abi::NO_FRAMES]), 2).unwrap();
        assert_eq!((p.frames, p.unwound), (vec![0xa], false));
    }
}
