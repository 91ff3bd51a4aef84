//! The maps the counting program shares with user space, as handles that
//! work the same for an object this process loaded and for one pinned in
//! bpffs by another: reading counts and pending call sites, resolving
//! sites, naming reason slots. Steering through the shared global data is
//! `ctl`'s. Methods by part: `sites` (the site table and its cache),
//! `user` (a uprobe's sites), `capture` (tier 2's statistics, budgets and
//! switch).

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

mod capture;
mod drill;
mod sites;
mod user;

const ZERO_KEY: [u8; 4] = 0u32.to_ne_bytes();
const NAME_LEN: usize = types::td_abi::TD_NAME_LEN.0 as usize;
const META_LEN: usize = types::td_abi::TD_META_LEN.0 as usize;

/// The maps a pinned instance keeps, by the file name of their pins.
pub(crate) const PINNED_MAPS: [&str; 15] = [
    "counts", "sites", "pending", "fresh", "stats", "budget", "samples", "names", "meta", "data",
    "bss", "rstacks", "pool", "by_name", "routes",
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
    /// Every named slot by name, and a profile's caller routes: what the
    /// programs name new sites with (td_kres).
    by_name: MapHandle,
    routes: MapHandle,
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
    /// --drill's calls by path, and those the full table left out, by
    /// reason (None unless the object was loaded to drill).
    paths: Option<MapHandle>,
    paths_full: Option<MapHandle>,
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
            by_name: handle(&m.by_name, "by_name")?,
            routes: handle(&m.routes, "routes")?,
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
            // Sized to one entry where the run does not drill.
            paths: Some(handle(&m.paths, "paths")?).filter(|p| p.max_entries() > 1),
            paths_full: Some(handle(&m.paths_full, "paths_full")?),
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
            by_name: open("by_name")?,
            routes: open("routes")?,
            meta: open("meta")?,
            pids: None,
            user: None,
            frames: None,
            paths: None,
            paths_full: None,
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
            ("by_name", &mut self.by_name),
            ("routes", &mut self.routes),
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

    /// Callers the programs merged into `slot` (OTHER): the names
    /// `by_name` indexes under it, but its own.
    fn merged_into(&self, slot: u32) -> Result<Vec<String>> {
        let own = self
            .names
            .lookup(&slot.to_ne_bytes(), MapFlags::ANY)
            .map_err(|e| Error::bpf("reading the reason names", e))?
            .map(|v| c_str(&v));
        let mut out = Vec::new();
        for key in self.by_name.keys() {
            let held = self
                .by_name
                .lookup(&key, MapFlags::ANY)
                .map_err(|e| Error::bpf("reading the reason index", e))?;
            let name = c_str(&key);
            if held.as_deref() == Some(&slot.to_ne_bytes()[..]) && Some(&name) != own.as_ref() {
                out.push(name);
            }
        }
        Ok(out)
    }

    /// Records `name` for `slot` unless another process named it first.
    fn claim_name(&self, slot: u32, name: &str) -> Result<Claim> {
        let value = name_value(name);
        match self
            .names
            .update(&slot.to_ne_bytes(), &value, MapFlags::NO_EXIST)
        {
            Ok(()) => self.index_name(slot, &value),
            Err(e) if e.kind() == libbpf_rs::ErrorKind::AlreadyExists => {
                let held = self
                    .names
                    .lookup(&slot.to_ne_bytes(), MapFlags::ANY)
                    .map_err(|e| Error::bpf("reading the reason names", e))?
                    .map(|v| c_str(&v))
                    .unwrap_or_default();
                if held == c_str(&value) {
                    self.index_name(slot, &value)
                } else {
                    Ok(Claim::Taken(held))
                }
            }
            Err(e) => Err(Error::bpf("naming a reason slot", e)),
        }
    }
}

impl Maps {
    /// Indexes slot `slot`'s name (`value`, as stored) in `by_name`, where
    /// the programs look a new reason up: if the programs or another
    /// reader gave the name another slot first, that one is the name's, and
    /// `slot` is given back.
    fn index_name(&self, slot: u32, value: &[u8]) -> Result<Claim> {
        match self
            .by_name
            .update(value, &slot.to_ne_bytes(), MapFlags::NO_EXIST)
        {
            Ok(()) => Ok(Claim::Ours),
            Err(e) if e.kind() == libbpf_rs::ErrorKind::AlreadyExists => {
                let held = self
                    .by_name
                    .lookup(value, MapFlags::ANY)
                    .map_err(|e| Error::bpf("reading the reason index", e))?
                    .and_then(|v| <[u8; 4]>::try_from(v.as_slice()).ok())
                    .map(u32::from_ne_bytes);
                match held {
                    Some(other) if other != slot => {
                        delete_quietly(&self.names, &slot.to_ne_bytes())?;
                        Ok(Claim::Elsewhere(other))
                    }
                    _ => Ok(Claim::Ours),
                }
            }
            Err(e) => Err(Error::bpf("indexing a reason's name", e)),
        }
    }

    /// Lets the programs name new sites themselves (td_kres): the profile's
    /// routes (caller function, slot) and every name given so far go in
    /// first, then the first free slot and the switch. `tail`: tail calls
    /// are told apart, as user space does where it can read the kernel's
    /// text, so that both name a site alike.
    pub(crate) fn start_resolving(
        &self,
        func: u64,
        tail: bool,
        routes: &[(String, u32)],
    ) -> Result<()> {
        for (caller, slot) in routes {
            self.routes
                .update(&name_value(caller), &slot.to_ne_bytes(), MapFlags::ANY)
                .map_err(|e| Error::bpf("writing the caller routes", e))?;
        }
        let mut next = abi::FIRST_REASON;
        for (slot, name) in self.names()? {
            if let Claim::Elsewhere(s) = self.index_name(slot, &name_value(&name))? {
                return Err(Error::msg(format!(
                    "reason {name} has slots {slot} and {s} in the names map"
                )));
            }
            next = next.max(slot + 1);
        }
        self.ctl.start_resolving(func, tail, next);
        Ok(())
    }

    /// Whether the programs name new sites themselves (start_resolving).
    pub(crate) fn resolves_in_kernel(&self) -> bool {
        self.ctl.resolving()
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
