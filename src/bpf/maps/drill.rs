//! --drill through the maps: each captured reason's calls by path, and
//! the calls the full path table could not hold (see `bpf::drilled`).

use super::*;
use crate::bpf::drilled::{path_of, Drilled, PATH_KEY_WORDS};

impl Maps {
    /// Whether this object counts drilled paths (`--drill`).
    pub(crate) fn drills(&self) -> bool {
        self.paths.is_some()
    }

    /// Every path counted so far, and the calls the full table left out.
    pub(crate) fn drilled(&self) -> Result<Drilled> {
        let (Some(map), Some(full_map)) = (&self.paths, &self.paths_full) else {
            return Ok(Drilled::default());
        };
        let mut table = Pending::default();
        read_batch(map, PATH_KEY_WORDS, &mut table).map_err(|e| match e {
            BatchError::Layout(key, value) => Error::msg(format!(
                "the path map has {key}-byte keys and {value}-byte values, not {} and 8",
                PATH_KEY_WORDS * 8
            )),
            BatchError::Bpf(e) => Error::bpf("reading the drilled paths", e),
        })?;
        let paths = table
            .entries()
            .filter_map(|(k, n)| path_of(k, n))
            .filter(|p| p.calls > 0)
            .collect();
        let mut full = Vec::new();
        let mut buf = PerCpu::default();
        for slot in 0..abi::NR_SLOTS as u32 {
            lookup_percpu(full_map, &slot.to_ne_bytes(), &mut buf)
                .map_err(|e| Error::bpf("reading the full path table's calls", e))?;
            let n = buf.sum::<1>()[0];
            if n > 0 {
                full.push((slot, n));
            }
        }
        Ok(Drilled { paths, full })
    }
}
