//! The maps the counting program shares with user space, as handles that
//! work the same for an object this process loaded and for one pinned in
//! bpffs by another: reading counts and pending call sites, resolving
//! sites, naming reason slots. Steering through the shared global data is
//! `ctl`'s.

use std::os::fd::{AsFd, AsRawFd};
use std::path::Path;

use libbpf_rs::{MapCore, MapFlags, MapHandle};

use crate::bpf::abi;
use crate::bpf::ctl::{Captured, Control};
use crate::bpf::deep::Deep;
use crate::bpf::percpu::{self, Pending, PerCpu};
use crate::bpf::skel::{types, TopdownSkel};
use crate::error::{Error, Result};
use crate::reasons::{Claim, NameTable, ProcessCode};

const ZERO_KEY: [u8; 4] = 0u32.to_ne_bytes();
const NAME_LEN: usize = types::td_abi::TD_NAME_LEN.0 as usize;
const META_LEN: usize = types::td_abi::TD_META_LEN.0 as usize;

/// The maps a pinned instance keeps, by the file name of their pins.
pub(crate) const PINNED_MAPS: [&str; 13] = [
    "counts", "sites", "pending", "fresh", "stats", "budget", "samples", "names", "meta", "data",
    "bss", "rstacks", "pool",
];

pub(crate) struct Maps {
    counts: MapHandle,
    sites: MapHandle,
    pending: MapHandle,
    /// Each CPU's direct-mapped table of new sites' first calls (td_fresh):
    /// None where the program does not use it (only a pinned instance's
    /// does), so that no poll reads it.
    fresh: Option<MapHandle>,
    /// New sites' pool slots (td_pool): the return address of each.
    pool: MapHandle,
    /// Calls counted before the deeper-frame rules were filled in (None
    /// for a pinned instance, whose rules are filled in before load).
    early: Option<MapHandle>,
    stats: MapHandle,
    /// Each reason's stack path counters (td_rstack).
    rstacks: MapHandle,
    budget: MapHandle,
    samples: MapHandle,
    names: MapHandle,
    meta: MapHandle,
    data: MapHandle,
    bss: MapHandle,
    /// The pid filter's map (None for a pinned instance, which has none).
    pids: Option<MapHandle>,
    /// A uprobe's sites and pending sites, keyed by (tgid, return
    /// address), and FUNC's address in each process: None unless the
    /// object was loaded for a uprobe.
    user: Option<(MapHandle, MapHandle, MapHandle)>,
    /// A tracepoint's learned frame distances (td_frame_cache; None for a
    /// pinned instance: not pinned, its program keeps it).
    frames: Option<MapHandle>,
    /// The global data as mapped into this process, and what this
    /// reader steers through it.
    ctl: Control,
}

fn meta_text(meta: &MapHandle) -> Result<String> {
    let v = meta
        .lookup(&ZERO_KEY, MapFlags::ANY)
        .map_err(|e| Error::bpf("reading the meta map", e))?
        .unwrap_or_default();
    Ok(c_str(&v))
}

fn handle(m: &libbpf_rs::MapMut<'_>, what: &str) -> Result<MapHandle> {
    MapHandle::try_from(m).map_err(|e| Error::bpf(&format!("opening the {what} map"), e))
}

/// Reads `key`'s per-CPU value in `map` into `out`, in the kernel's layout
/// (see PerCpu), reusing its buffer; a missing key reads as zeros.
fn lookup_percpu(
    map: &MapHandle,
    key: &[u8],
    out: &mut PerCpu,
) -> std::result::Result<(), libbpf_rs::Error> {
    if key.len() != map.key_size() as usize {
        return Err(std::io::Error::from(std::io::ErrorKind::InvalidInput).into());
    }
    out.stride = (map.value_size() as usize).div_ceil(8);
    out.words
        .resize(out.stride * libbpf_rs::num_possible_cpus()?, 0);
    // SAFETY: key has the map's key size; words has room for a value of
    // the map's value size, rounded up to 8 bytes, per possible CPU.
    let rc = unsafe {
        libbpf_sys::bpf_map_lookup_elem(
            map.as_fd().as_raw_fd(),
            key.as_ptr().cast(),
            out.words.as_mut_ptr().cast(),
        )
    };
    match -rc {
        0 => Ok(()),
        libc::ENOENT => {
            out.words.fill(0);
            Ok(())
        }
        e => Err(std::io::Error::from_raw_os_error(e).into()),
    }
}

/// The bytes of a NUL-terminated string field.
fn c_str(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// A name as the names map stores it: truncated to fit, NUL-padded.
fn name_value(name: &str) -> Vec<u8> {
    let mut v = vec![0u8; NAME_LEN];
    let mut n = name.len().min(NAME_LEN - 1);
    while !name.is_char_boundary(n) {
        n -= 1;
    }
    v[..n].copy_from_slice(&name.as_bytes()[..n]);
    v
}

enum BatchError {
    /// The map's key and value sizes, not those asked for.
    Layout(u32, u32),
    Bpf(libbpf_rs::Error),
}

/// Reads a per-CPU hash of u64 counts with keys of `key_words` u64s into
/// `out`, with batch lookups: one bpf() call for the whole table where the
/// last read's room holds it, against two per key for listing keys and
/// looking each up. A batch walks the hash bucket by bucket, and nothing
/// deletes keys or moves them between buckets, so every key present when
/// the read starts is read exactly once (a key added meanwhile may be read
/// now or on the next poll).
fn read_batch(
    map: &MapHandle,
    key_words: usize,
    out: &mut Pending,
) -> std::result::Result<(), BatchError> {
    let (key, value) = (map.key_size(), map.value_size());
    if (key as usize, value) != (key_words * 8, 8) {
        return Err(BatchError::Layout(key, value));
    }
    // Room for the keys the last read found, and some new ones.
    let mut room = out.len() + 64;
    out.clear(
        libbpf_rs::num_possible_cpus().map_err(BatchError::Bpf)?,
        key_words,
    );
    let opts = libbpf_sys::bpf_map_batch_opts {
        sz: std::mem::size_of::<libbpf_sys::bpf_map_batch_opts>() as _,
        ..Default::default()
    };
    let fd = map.as_fd().as_raw_fd();
    // The hash's batch position is a u32 bucket index; u64s leave room.
    let (mut at, mut next) = (None::<u64>, 0u64);
    loop {
        let (keys, values) = out.spare(room);
        let mut n = (keys.len() / key_words) as u32;
        // SAFETY: keys has room for n keys of key_words u64s (the map's
        // key size, checked above) and values for n values of 8 bytes per
        // possible CPU; the batch positions are u64s, the options
        // initialized.
        let rc = unsafe {
            libbpf_sys::bpf_map_lookup_batch(
                fd,
                at.as_mut()
                    .map_or(std::ptr::null_mut(), |b| (b as *mut u64).cast()),
                (&mut next as *mut u64).cast(),
                keys.as_mut_ptr().cast(),
                values.as_mut_ptr().cast(),
                &mut n,
                &opts,
            )
        };
        out.filled(n as usize);
        at = Some(next);
        match -rc {
            0 => {}
            // The whole table is read.
            libc::ENOENT => return Ok(()),
            // One hash bucket holds more keys than there was room for.
            libc::ENOSPC => room *= 2,
            e => return Err(BatchError::Bpf(std::io::Error::from_raw_os_error(e).into())),
        }
    }
}

impl Maps {
    /// The maps of an object this process loaded.
    pub(crate) fn of_skel(skel: &TopdownSkel<'_>) -> Result<Self> {
        let m = &skel.maps;
        let data = handle(&m.data, ".data")?;
        let bss = handle(&m.bss, ".bss")?;
        Ok(Maps {
            counts: handle(&m.counts, "counts")?,
            sites: handle(&m.sites, "sites")?,
            pending: handle(&m.pending, "pending")?,
            fresh: Some(handle(&m.fresh, "fresh")?)
                .filter(|_| m.rodata_data.is_some_and(|r| r.cfg.fresh != 0)),
            pool: handle(&m.pool, "pool")?,
            // Sized to one entry where it cannot be used: no read per poll.
            early: Some(handle(&m.early, "early")?).filter(|e| e.max_entries() > 1),
            stats: handle(&m.stats, "stats")?,
            rstacks: handle(&m.rstacks, "rstacks")?,
            budget: handle(&m.budget, "budget")?,
            samples: handle(&m.samples, "samples")?,
            names: handle(&m.names, "names")?,
            meta: handle(&m.meta, "meta")?,
            pids: Some(handle(&m.pids, "pids")?),
            // Sized to one entry where they cannot be used: no read per poll.
            user: Some((
                handle(&m.usites, "usites")?,
                handle(&m.upending, "upending")?,
                handle(&m.ufuncs, "ufuncs")?,
            ))
            .filter(|(s, _, _)| s.max_entries() > 1),
            frames: Some(handle(&m.frame_cache, "frame_cache")?),
            ctl: Control::map(&data, &bss, false)?,
            data,
            bss,
        })
    }

    /// The maps pinned in `dir`.
    pub(crate) fn open(dir: &Path) -> Result<Self> {
        let open = |name: &str| {
            MapHandle::from_pinned_path(dir.join(name))
                .map_err(|e| Error::bpf(&format!("opening {}", dir.join(name).display()), e))
        };
        let data = open("data")?;
        let bss = open("bss")?;
        Ok(Maps {
            counts: open("counts")?,
            sites: open("sites")?,
            pending: open("pending")?,
            fresh: Some(open("fresh")?),
            pool: open("pool")?,
            early: None,
            stats: open("stats")?,
            rstacks: open("rstacks")?,
            budget: open("budget")?,
            samples: open("samples")?,
            names: open("names")?,
            meta: open("meta")?,
            pids: None,
            user: None,
            frames: None,
            // A pinned instance's reader steers under a lease.
            ctl: Control::map(&data, &bss, true)?,
            data,
            bss,
        })
    }

    /// Pins every map of `PINNED_MAPS` into `dir`.
    pub(crate) fn pin(&mut self, dir: &Path) -> Result<()> {
        // A pinned instance's program counts its new sites there (see td_fresh).
        let fresh = self.fresh.as_mut().ok_or_else(|| {
            Error::msg("the counting program was loaded without its fresh table: not pinnable")
        })?;
        for (name, m) in [
            ("counts", &mut self.counts),
            ("sites", &mut self.sites),
            ("pending", &mut self.pending),
            ("stats", &mut self.stats),
            ("budget", &mut self.budget),
            ("samples", &mut self.samples),
            ("names", &mut self.names),
            ("meta", &mut self.meta),
            ("data", &mut self.data),
            ("bss", &mut self.bss),
            ("rstacks", &mut self.rstacks),
            ("fresh", fresh),
            ("pool", &mut self.pool),
        ] {
            m.pin(dir.join(name))
                .map_err(|e| Error::bpf(&format!("pinning the {name} map"), e))?;
        }
        Ok(())
    }

    /// Reads the per-CPU counters into `out`.
    pub(crate) fn read_counts(&self, out: &mut PerCpu) -> Result<()> {
        lookup_percpu(&self.counts, &ZERO_KEY, out)
            .map_err(|e| Error::bpf("reading the counters", e))
    }

    /// Per-slot counts summed over all possible CPUs.
    #[cfg(test)]
    pub(crate) fn counts(&self) -> Result<Vec<u64>> {
        let mut c = PerCpu::default();
        self.read_counts(&mut c)?;
        Ok(percpu::counts_of(&c)[..abi::NR_SLOTS].to_vec())
    }

    /// Reads the pending calls (return addresses not yet in the site
    /// table, with their counts) into `out`: the pending table's per-CPU
    /// counts, then the fresh tables' sites, one entry each summed over
    /// the CPUs. An address can be in both (or in one CPU's fresh table
    /// and another's pending table): its entries are added up.
    pub(crate) fn read_pending(&self, out: &mut Pending) -> Result<()> {
        read_batch(&self.pending, 1, out).map_err(|e| match e {
            BatchError::Layout(key, value) => Error::msg(format!(
                "the pending map has {key}-byte keys and {value}-byte values, not 8 and 8"
            )),
            BatchError::Bpf(e) => Error::bpf("reading the pending sites", e),
        })?;
        out.add_summed(&self.fresh()?);
        Ok(())
    }

    /// The return address of each pool slot taken (td_pool), by slot: 0
    /// where the BPF side has taken the slot and not yet written it.
    pub(crate) fn read_pool(&self) -> Result<Vec<u64>> {
        let v = self
            .pool
            .lookup(&ZERO_KEY, MapFlags::ANY)
            .map_err(|e| Error::bpf("reading the pool slots", e))?
            .unwrap_or_default();
        Ok(percpu::pool_sites(&v))
    }

    /// The fresh tables' sites (td_fresh), each with its calls summed over
    /// the CPUs, by address.
    fn fresh(&self) -> Result<Vec<(u64, u64)>> {
        let Some(fresh) = &self.fresh else {
            return Ok(Vec::new());
        };
        let mut v = PerCpu::default();
        lookup_percpu(fresh, &ZERO_KEY, &mut v)
            .map_err(|e| Error::bpf("reading the fresh sites", e))?;
        Ok(percpu::fresh_sites(&v))
    }

    /// Reads the calls counted before the deeper-frame rules were filled
    /// in (td_early_key, with per-CPU counts) into `out`: left empty where
    /// there is no such table.
    pub(crate) fn read_early(&self, out: &mut Pending) -> Result<()> {
        let Some(early) = &self.early else {
            out.clear(1, percpu::EARLY_KEY_WORDS);
            return Ok(());
        };
        read_batch(early, percpu::EARLY_KEY_WORDS, out).map_err(|e| match e {
            BatchError::Layout(key, value) => Error::msg(format!(
                "the early map has {key}-byte keys and {value}-byte values, not {} and 8",
                percpu::EARLY_KEY_WORDS * 8
            )),
            BatchError::Bpf(e) => Error::bpf("reading the early counts", e),
        })
    }

    /// Fills in the deeper-frame rules and marks them ready (see
    /// `Control::set_deep`).
    pub(crate) fn set_deep(&self, deep: &Deep) {
        self.ctl.set_deep(deep.tables());
    }

    /// Return addresses counted as new sites (pending, fresh, pooled),
    /// with their counts.
    #[cfg(test)]
    pub(crate) fn pending(&self) -> Result<Vec<(u64, u64)>> {
        let mut p = Pending::default();
        self.read_pending(&mut p)?;
        let mut c = PerCpu::default();
        self.read_counts(&mut c)?;
        p.add_summed(&percpu::pooled(&self.read_pool()?, &percpu::counts_of(&c)));
        // by address, as a reader sums them
        let mut by = std::collections::BTreeMap::new();
        for (ret, n) in p.sums() {
            *by.entry(ret).or_insert(0) += n;
        }
        Ok(by.into_iter().collect())
    }

    /// Whether some pending call site has no slot yet (resolving it needs
    /// the kernel's symbols).
    pub(crate) fn unresolved(&self) -> Result<bool> {
        for key in self.pending.keys() {
            let Ok(k) = <[u8; 8]>::try_from(key.as_slice()) else {
                continue;
            };
            if self.site(u64::from_ne_bytes(k))?.is_none() {
                return Ok(true);
            }
        }
        for (ret, _) in self.fresh()? {
            if self.site(ret)?.is_none() {
                return Ok(true);
            }
        }
        for ret in self.read_pool()? {
            if ret != 0 && self.site(ret)?.is_none() {
                return Ok(true);
            }
        }
        Ok(false)
    }

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

    /// Whether the object counts a uprobe's calls, by (tgid, return address).
    pub(crate) fn has_user_sites(&self) -> bool {
        self.user.is_some()
    }

    /// Reads a uprobe's pending table: keys of two u64s, the tgid (in the
    /// first word's low half) and the return address.
    pub(crate) fn read_upending(&self, out: &mut Pending) -> Result<()> {
        let Some((_, upending, _)) = &self.user else {
            out.clear(1, percpu::USER_KEY_WORDS);
            return Ok(());
        };
        read_batch(upending, percpu::USER_KEY_WORDS, out).map_err(|e| match e {
            BatchError::Layout(key, value) => Error::msg(format!(
                "the upending map has {key}-byte keys and {value}-byte values, not 16 and 8"
            )),
            BatchError::Bpf(e) => Error::bpf("reading the user pending sites", e),
        })
    }

    /// Records the slot of user site (tgid, ret), and returns the slot the
    /// table holds; a full table leaves the site pending (not an error).
    pub(crate) fn add_user_site(&self, tgid: u32, ret: u64, slot: u32) -> Result<u32> {
        let Some((usites, _, _)) = &self.user else {
            return Ok(slot);
        };
        let key = percpu::user_key(tgid, ret);
        match usites.update(&key, &slot.to_ne_bytes(), MapFlags::NO_EXIST) {
            Ok(()) => Ok(slot),
            Err(e) if e.kind() == libbpf_rs::ErrorKind::AlreadyExists => Ok(usites
                .lookup(&key, MapFlags::ANY)
                .ok()
                .flatten()
                .and_then(|v| Some(u32::from_ne_bytes(v.get(..4)?.try_into().ok()?)))
                .unwrap_or(slot)),
            Err(e) if e.kind() == libbpf_rs::ErrorKind::TooBig => Ok(slot),
            Err(e) => Err(Error::bpf("updating the user site table", e)),
        }
    }

    /// Removes user site (tgid, ret) from the site and pending tables (a
    /// process that has exited: nothing counts there any more).
    pub(crate) fn remove_user_site(&self, tgid: u32, ret: u64) -> Result<()> {
        let Some((usites, upending, _)) = &self.user else {
            return Ok(());
        };
        let key = percpu::user_key(tgid, ret);
        delete_quietly(usites, &key)?;
        delete_quietly(upending, &key)
    }

    /// Forgets where FUNC was in process `tgid` (exited; its sites are
    /// removed one by one, this once).
    pub(crate) fn forget_user_process(&self, tgid: u32) -> Result<()> {
        match &self.user {
            Some((_, _, ufuncs)) => delete_quietly(ufuncs, &tgid.to_ne_bytes()),
            None => Ok(()),
        }
    }

    /// Where process `tgid` had its code, as the uprobe found it at a
    /// call from a site not resolved yet (see ufuncs in uprobe.bpf.h).
    pub(crate) fn user_process(&self, tgid: u32) -> Option<ProcessCode> {
        let (_, _, ufuncs) = self.user.as_ref()?;
        let v = ufuncs.lookup(&tgid.to_ne_bytes(), MapFlags::ANY).ok()??;
        let p = plain::from_bytes::<types::td_uproc>(&v).ok()?;
        let name: Vec<u8> = p
            .exe_name
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        Some(ProcessCode {
            func_at: p.func_ip,
            start_code: p.start_code,
            end_code: p.end_code,
            exe_dev: p.exe_dev,
            exe_ino: p.exe_ino,
            exe_name: String::from_utf8_lossy(&name).into_owned(),
        })
    }

    /// The meta map's text (empty if never written).
    pub(crate) fn meta(&self) -> Result<String> {
        meta_text(&self.meta)
    }

    /// The meta text of the instance pinned in `dir`, with none of its
    /// other maps opened: an instance of another layout may lack some.
    pub(crate) fn pinned_meta(dir: &Path) -> Result<String> {
        let at = dir.join("meta");
        let m = MapHandle::from_pinned_path(&at)
            .map_err(|e| Error::bpf(&format!("opening {}", at.display()), e))?;
        meta_text(&m)
    }

    pub(crate) fn set_meta(&self, text: &str) -> Result<()> {
        if text.len() >= META_LEN {
            return Err(Error::msg(format!(
                "the instance's description is {} bytes, more than the {META_LEN} its map holds",
                text.len()
            )));
        }
        let mut v = vec![0u8; META_LEN];
        v[..text.len()].copy_from_slice(text.as_bytes());
        self.meta
            .update(&ZERO_KEY, &v, MapFlags::ANY)
            .map_err(|e| Error::bpf("writing the meta map", e))
    }

    /// The statistics, read on their own (a poll takes the stack
    /// counters from the counter array it read: Poller::stats).
    #[cfg(test)]
    pub(crate) fn stats(&self) -> Result<percpu::Stats> {
        let (mut stats, mut counts) = (PerCpu::default(), PerCpu::default());
        self.read_stats(&mut stats)?;
        self.read_counts(&mut counts)?;
        Ok(percpu::Stats::from_percpu(
            &stats,
            &percpu::counts_of(&counts),
        ))
    }

    /// Reads the per-CPU statistics array into `out` (the stack path's
    /// counters are in the counter array).
    pub(crate) fn read_stats(&self, out: &mut PerCpu) -> Result<()> {
        lookup_percpu(&self.stats, &ZERO_KEY, out)
            .map_err(|e| Error::bpf("reading the statistics", e))
    }

    /// Each reason's stack path counters summed over the CPUs, by slot
    /// (index NR_SLOTS: untagged calls from sites not resolved yet), each
    /// indexed by StackStat; `slots`: which to read (the others are 0).
    pub(crate) fn reason_stacks(
        &self,
        slots: impl IntoIterator<Item = u32>,
    ) -> Result<Vec<[u64; abi::NR_STACK_STATS]>> {
        let mut out = vec![[0; abi::NR_STACK_STATS]; abi::NR_SLOTS + 1];
        let mut buf = PerCpu::default();
        for slot in slots {
            let Some(row) = out.get_mut(slot as usize) else {
                continue;
            };
            lookup_percpu(&self.rstacks, &slot.to_ne_bytes(), &mut buf)
                .map_err(|e| Error::bpf("reading the stack counters of a reason", e))?;
            *row = buf.sum::<{ abi::NR_STACK_STATS }>();
        }
        Ok(out)
    }

    /// Lets each CPU send up to `per_cpu` more stacks of reason `slot`
    /// (SLOT_NONE: a uprobe's untagged calls, their allowance, of which a
    /// site's later calls leave `keep`: see td_budget). The budget is
    /// replaced, not added to: what a CPU did not use is gone.
    pub(crate) fn refill(&self, slot: u32, per_cpu: u64, keep: u64) -> Result<()> {
        let cpus = libbpf_rs::num_possible_cpus()
            .map_err(|e| Error::bpf("counting the possible CPUs", e))?;
        // td_budget: left, then keep (abi.rs checks its size).
        let value = [per_cpu.to_ne_bytes(), keep.to_ne_bytes()].concat();
        let values = vec![value; cpus];
        let key = abi::stack_index(slot).to_ne_bytes();
        self.budget
            .update_percpu(&key, &values, MapFlags::ANY)
            .map_err(|e| Error::bpf("refilling the stack budget", e))
    }

    /// Refills every reason's budget (and the untagged calls' allowance).
    #[cfg(test)]
    pub(crate) fn refill_every(&self, per_cpu: u64) -> Result<()> {
        (0..abi::NR_SLOTS as u32)
            .chain([abi::SLOT_NONE])
            .try_for_each(|slot| self.refill(slot, per_cpu, 0))
    }

    /// A handle on the sample ring buffer.
    pub(crate) fn samples(&self) -> Result<MapHandle> {
        MapHandle::try_from(&self.samples)
            .map_err(|e| Error::bpf("opening the sample ring buffer", e))
    }

    /// Captures no reason's stacks from now on.
    pub(crate) fn stop_capture(&self) -> Result<()> {
        self.capture_set(&[])
    }

    /// Captures the stacks of the reasons in `set` from now on (see
    /// `Control::capture`), their cached sites flagged: their calls leave
    /// the common path for the stack gate, and no other reason's do.
    pub(crate) fn capture_set(&self, set: &[Captured]) -> Result<()> {
        self.ctl.capture(set)?;
        let slots: Vec<u32> = set.iter().map(|c| c.slot).collect();
        self.flag_sites(&slots, false);
        Ok(())
    }

    /// Leaves out the calls of process `tgid` (see `Control::own`).
    pub(crate) fn own(&self, tgid: u32) {
        self.ctl.own(tgid);
    }

    /// Whether a call site was first counted as pending since the last
    /// call (see `Control::take_new_sites`).
    pub(crate) fn take_new_sites(&self) -> bool {
        self.ctl.take_new_sites()
    }

    /// Takes `pid` out of the pid filter: its process exited, and a new one
    /// given the same pid must not count.
    pub(crate) fn drop_pid(&self, pid: u32) -> Result<()> {
        let Some(m) = &self.pids else { return Ok(()) };
        let fail = |e| Error::bpf("updating the pid filter", e);
        let list = m.lookup(&ZERO_KEY, MapFlags::ANY).map_err(fail)?;
        match list.and_then(|l| abi::pid_dropped(&l, pid)) {
            Some(v) => m.update(&ZERO_KEY, &v, MapFlags::ANY).map_err(fail),
            None => Ok(()),
        }
    }

    /// The reasons whose stacks are being captured, by slot.
    pub(crate) fn capturing(&self) -> Vec<u32> {
        self.ctl.capturing()
    }

    /// See `Control::site_cell_ptr`.
    #[cfg(test)]
    pub(crate) fn site_cell_ptr(&self, ret: u64, slot: u32) -> (*mut u64, u64) {
        self.ctl.site_cell_ptr(ret, slot)
    }

    /// Steers as a pinned instance's reader does: under a lease.
    #[cfg(test)]
    pub(crate) fn take_leases(&mut self) {
        self.ctl.take_leases();
    }

    /// The raw control block and watch key (see `Control::control_ptr`).
    #[cfg(test)]
    pub(crate) fn control_ptr(&self) -> (*mut types::td_control, *mut types::td_watch) {
        self.ctl.control_ptr()
    }
}

impl NameTable for Maps {
    /// Every slot's name recorded so far.
    fn names(&self) -> Result<Vec<(u32, String)>> {
        let mut out = Vec::new();
        for key in self.names.keys() {
            let Ok(k) = <[u8; 4]>::try_from(key.as_slice()) else {
                continue;
            };
            if let Some(v) = self
                .names
                .lookup(&k, MapFlags::ANY)
                .map_err(|e| Error::bpf("reading the reason names", e))?
            {
                out.push((u32::from_ne_bytes(k), c_str(&v)));
            }
        }
        out.sort();
        Ok(out)
    }

    /// Records `name` for `slot` unless another process named it first.
    fn claim_name(&self, slot: u32, name: &str) -> Result<Claim> {
        let value = name_value(name);
        match self
            .names
            .update(&slot.to_ne_bytes(), &value, MapFlags::NO_EXIST)
        {
            Ok(()) => Ok(Claim::Ours),
            Err(e) if e.kind() == libbpf_rs::ErrorKind::AlreadyExists => {
                let held = self
                    .names
                    .lookup(&slot.to_ne_bytes(), MapFlags::ANY)
                    .map_err(|e| Error::bpf("reading the reason names", e))?
                    .map(|v| c_str(&v))
                    .unwrap_or_default();
                Ok(if held == c_str(&value) {
                    Claim::Ours
                } else {
                    Claim::Taken(held)
                })
            }
            Err(e) => Err(Error::bpf("naming a reason slot", e)),
        }
    }
}

/// Deletes `key` from a user table; an entry already gone is no error.
fn delete_quietly(map: &MapHandle, key: &[u8]) -> Result<()> {
    match map.delete(key) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == libbpf_rs::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::bpf("pruning the user site tables", e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_stored_truncated_and_read_back() {
        assert_eq!(c_str(&name_value("ZAP")), "ZAP");
        let long = "x".repeat(NAME_LEN + 10);
        assert_eq!(c_str(&name_value(&long)).len(), NAME_LEN - 1);
        // Never cut inside a character.
        let wide = "é".repeat(NAME_LEN);
        assert!(c_str(&name_value(&wide)).chars().all(|c| c == 'é'));
    }
}
