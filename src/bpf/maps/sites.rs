//! The site table and its cache: a kernel call site's slot read, added
//! and forgotten, the deeper frames learned, and cached sites flagged for
//! the stack gate and the background sampler.

use super::*;

impl Maps {
    /// The slot the site table gives a return address, if any.
    pub(crate) fn site(&self, ret: u64) -> Result<Option<u32>> {
        let v = self
            .sites
            .lookup(&ret.to_ne_bytes(), MapFlags::ANY)
            .map_err(|e| Error::bpf("reading the site table", e))?;
        Ok(v.and_then(|b| Some(u32::from_ne_bytes(b.get(..4)?.try_into().ok()?))))
    }

    /// Tells the BPF side which slot a return address counts in, unless it
    /// already has one (another process resolved it first): returns the
    /// slot the table holds. A full site table is not an error: the site's
    /// calls then stay pending and are added under its reason by user
    /// space.
    pub(crate) fn add_site(&self, ret: u64, slot: u32) -> Result<u32> {
        let slot =
            match self
                .sites
                .update(&ret.to_ne_bytes(), &slot.to_ne_bytes(), MapFlags::NO_EXIST)
            {
                Ok(()) => slot,
                Err(e) if e.kind() == libbpf_rs::ErrorKind::AlreadyExists => {
                    self.site(ret)?.unwrap_or(slot)
                }
                Err(e) if e.kind() == libbpf_rs::ErrorKind::TooBig => return Ok(slot),
                Err(e) => return Err(Error::bpf("updating the site table", e)),
            };
        self.ctl.cache_site(ret, slot);
        Ok(slot)
    }

    /// Reads and removes `ret`'s entry in the pending table: its calls
    /// summed over the CPUs. For a site resolved a while ago, whose calls
    /// no longer come here, so none is lost between the two.
    pub(crate) fn take_pending(&self, ret: u64) -> Result<u64> {
        let key = ret.to_ne_bytes();
        let mut v = PerCpu::default();
        lookup_percpu(&self.pending, &key, &mut v)
            .map_err(|e| Error::bpf("reading a pending site", e))?;
        let n = v.words.iter().fold(0u64, |a, &b| a.wrapping_add(b));
        match self.pending.delete(&key) {
            Ok(()) => Ok(n),
            Err(e) if e.kind() == libbpf_rs::ErrorKind::NotFound => Ok(0),
            Err(e) => Err(Error::bpf("pruning the pending table", e)),
        }
    }

    /// The sites in the site table that `pick` picks (return address,
    /// slot): those the programs named themselves included.
    pub(crate) fn sites_where(&self, pick: impl Fn(u64, u32) -> bool) -> Result<Vec<(u64, u32)>> {
        let mut out = Vec::new();
        for key in self.sites.keys() {
            let Ok(k) = <[u8; 8]>::try_from(key.as_slice()) else {
                continue;
            };
            let ret = u64::from_ne_bytes(k);
            if let Some(slot) = self.site(ret)? {
                if pick(ret, slot) {
                    out.push((ret, slot));
                }
            }
        }
        Ok(out)
    }

    /// Takes the resolved site `ret` (of `slot`) out of the site table and
    /// the cache: its module was unloaded. Its next calls, if the address
    /// is reused, are pending until resolved anew.
    pub(crate) fn forget_site(&self, ret: u64, slot: u32) -> Result<()> {
        self.ctl.uncache_site(ret, slot);
        match self.sites.delete(&ret.to_ne_bytes()) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == libbpf_rs::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::bpf("forgetting an unloaded module's call site", e)),
        }
    }

    /// Empties the tracepoint's learned frame distances (see
    /// tp_quick_frames): a module was unloaded, and the next loaded may
    /// reuse its addresses with frames of other sizes. The program learns
    /// them again from its next unwinds.
    pub(crate) fn forget_frames(&self) -> Result<()> {
        let Some(frames) = &self.frames else {
            return Ok(());
        };
        let zeros = vec![0u8; frames.value_size() as usize];
        frames
            .update(&ZERO_KEY, &zeros, MapFlags::ANY)
            .map_err(|e| Error::bpf("emptying the learned frames", e))
    }

    /// The learned frame cache's entries, as u64s.
    #[cfg(test)]
    fn frame_entries(&self) -> Vec<u64> {
        let frames = self.frames.as_ref().expect("a loaded object's frame cache");
        let v = frames
            .lookup(&ZERO_KEY, MapFlags::ANY)
            .unwrap()
            .expect("its one value");
        v.chunks_exact(8)
            .map(|w| u64::from_ne_bytes(w.try_into().unwrap()))
            .collect()
    }

    /// The learned frame entries that are not empty.
    #[cfg(test)]
    pub(crate) fn learned_frames(&self) -> usize {
        self.frame_entries().iter().filter(|&&e| e != 0).count()
    }

    /// Sets learned frame entry `at` to `e`, as the BPF side would.
    #[cfg(test)]
    pub(crate) fn set_learned_frame(&self, at: usize, e: u64) {
        let mut v = self.frame_entries();
        v[at] = e;
        let bytes: Vec<u8> = v.iter().flat_map(|w| w.to_ne_bytes()).collect();
        let frames = self.frames.as_ref().expect("a loaded object's frame cache");
        frames.update(&ZERO_KEY, &bytes, MapFlags::ANY).unwrap();
    }

    /// Flags the cached sites (see `Control::flag_sites`) of every reason
    /// for the background sampler, else of the `captured` ones; once a
    /// tick, as another reader of a pinned instance may have cleared them.
    pub(crate) fn flag_sites(&self, captured: &[u32], background: bool) {
        if !background && captured.is_empty() {
            return;
        }
        // Read only if the cache holds a pool entry: once a run's sites
        // are resolved it holds none, and each tick is spared a bpf() call.
        let pool = std::cell::OnceCell::new();
        self.ctl.flag_sites(
            |slot| background || captured.contains(&slot),
            |ret| self.site(ret).ok().flatten(),
            |k| {
                pool.get_or_init(|| self.read_pool().unwrap_or_default())
                    .get(k)
                    .copied()
            },
        );
    }
}
