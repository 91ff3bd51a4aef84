//! The control protocol: what user space writes into the object's global
//! data (.data, .bss), mapped into this process, while the BPF side reads
//! the same memory on every call. Steering (the own tgid and stack
//! capture, under a pinned reader's lease), the deeper-frame tables, the
//! site cache and the new-site flag.
//!
//! Every shared word is an atomic in the mapping. SeqCst, as the fences
//! it replaces: each store is a release, so the BPF side never sees a
//! field before the ones the protocol (td_control in topdown.h) writes
//! ahead of it.

use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering::SeqCst};
use std::sync::Mutex;
use std::time::Duration;

use libbpf_rs::MapHandle;

use crate::bpf::abi::{self, MAX_STACK_RANGES, SLOT_NOT_FOUND};
use crate::bpf::skel::types;
use crate::error::{Error, Result};

/// The system's page size: the unit of mappings and of BPF ring buffers.
pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize
}

/// CLOCK_MONOTONIC in nanoseconds: the clock of bpf_ktime_get_ns.
pub(crate) fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid timespec to write.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// How long a pinned instance's shared state outlives its reader's last
/// touch. The reader touches it at least every 50 ms tick while it holds
/// any; the margin covers a slow symbolization under load.
pub(crate) const LEASE: Duration = Duration::from_secs(3);

/// lease_ns while the BPF side puts a run-out lease's state back
/// (TD_LEASE_TAKING): a time never reached.
const LEASE_TAKING: u64 = u64::MAX;

/// How long a reader waits for the BPF side to finish taking its lease
/// back (a few stores; longer only if that program was preempted).
const TAKING_WAIT: Duration = Duration::from_millis(100);

/// The lease's value once the BPF side is not taking it back, or after
/// TAKING_WAIT whatever it is.
fn settled(lease: &AtomicU64) -> u64 {
    let start = std::time::Instant::now();
    loop {
        let v = lease.load(SeqCst);
        if v != LEASE_TAKING || start.elapsed() >= TAKING_WAIT {
            return v;
        }
        std::thread::sleep(Duration::from_micros(100));
    }
}

/// The shared u32 at `p`.
///
/// # Safety
/// `p` must point to an aligned u32 of a mapping that outlives the use.
unsafe fn u32_at<'a>(p: *mut u32) -> &'a AtomicU32 {
    AtomicU32::from_ptr(p)
}

/// The shared u64 at `p`.
///
/// # Safety
/// As u32_at, for an aligned u64.
unsafe fn u64_at<'a>(p: *mut u64) -> &'a AtomicU64 {
    AtomicU64::from_ptr(p)
}

/// A global-data map (.data, .bss) mapped into this process: the BPF side
/// reads and writes the same memory directly.
struct Section<T> {
    ptr: *mut T,
    len: usize,
}

impl<T> Section<T> {
    fn map(map: &MapHandle, what: &str) -> Result<Self> {
        let page = page_size();
        let len = std::mem::size_of::<T>().div_ceil(page) * page;
        // SAFETY: mapping a BPF array map's fd (created mmapable by libbpf
        // for global data) shared, at offset 0, for the size of its value.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                map.as_fd().as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            let e = std::io::Error::last_os_error();
            return Err(Error::msg(format!("mapping the {what} map: {e}")));
        }
        Ok(Section {
            ptr: ptr.cast(),
            len,
        })
    }
}

impl<T> Drop for Section<T> {
    fn drop(&mut self) {
        // SAFETY: ptr and len are what mmap returned.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// A reason whose stacks are captured, and the address ranges of its
/// caller functions, for calls from sites not resolved yet.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Captured {
    pub(crate) slot: u32,
    pub(crate) callers: Vec<(u64, u64)>,
}

/// The bits of `set`'s reasons, as td_control.captured holds them.
fn captured_words(set: &[Captured]) -> [u64; CAPTURED_WORDS] {
    let mut words = [0u64; CAPTURED_WORDS];
    for c in set {
        if let Some(w) = words.get_mut(c.slot as usize / 64) {
            *w |= 1 << (c.slot % 64);
        }
    }
    words
}

/// u64s of td_control.captured.
const CAPTURED_WORDS: usize = abi::NR_SLOTS / 64;

/// Captures the stacks of the reasons in `set` (empty: none), in the order
/// the BPF side relies on (see td_control in topdown.h): the bits of the
/// reasons that leave cleared, no ranges, the ranges of every reason in
/// the set, their count, the new bits, then how many reasons are captured.
/// The reasons' cached sites are flagged apart (Maps::capture); calls with
/// no caller found are sent to the stack gate through td_watch.
///
/// # Safety
/// `ctl` and `watch` must point to the mmap'ed td_control and td_watch of
/// a loaded object.
pub(crate) unsafe fn publish(
    ctl: *mut types::td_control,
    watch: *mut types::td_watch,
    set: &[Captured],
) {
    use std::ptr::addr_of_mut;
    let words = captured_words(set);
    for (i, &w) in words.iter().enumerate() {
        u64_at(addr_of_mut!((*ctl).captured[i])).fetch_and(w, SeqCst);
    }
    u32_at(addr_of_mut!((*ctl).nr_ranges)).store(0, SeqCst);
    let ranges = set
        .iter()
        .flat_map(|c| c.callers.iter().map(move |&r| (c.slot, r)));
    let mut n = 0;
    for (i, (slot, (lo, hi))) in ranges.take(MAX_STACK_RANGES).enumerate() {
        let r = addr_of_mut!((*ctl).ranges[i]);
        u64_at(addr_of_mut!((*r).lo)).store(lo, SeqCst);
        u64_at(addr_of_mut!((*r).hi)).store(hi, SeqCst);
        u32_at(addr_of_mut!((*r).reason)).store(slot, SeqCst);
        n = i as u32 + 1;
    }
    u32_at(addr_of_mut!((*ctl).nr_ranges)).store(n, SeqCst);
    for (i, &w) in words.iter().enumerate() {
        u64_at(addr_of_mut!((*ctl).captured[i])).store(w, SeqCst);
    }
    let count = words.iter().map(|w| w.count_ones()).sum::<u32>();
    u32_at(addr_of_mut!((*ctl).nr_captured)).store(count, SeqCst);
    set_watch(
        watch,
        WATCH_STACKS,
        set.iter().any(|c| c.slot == SLOT_NOT_FOUND),
    );
}

const WATCH_OWN: usize = types::td_watch_byte::TD_WATCH_OWN.0 as usize;
const WATCH_STACKS: usize = types::td_watch_byte::TD_WATCH_STACKS.0 as usize;

/// Sets or clears one byte of the watch key: a byte store, so that the
/// other bytes are never undone.
///
/// # Safety
/// As publish.
unsafe fn set_watch(watch: *mut types::td_watch, byte: usize, on: bool) {
    let b = std::ptr::addr_of_mut!((*watch).why[byte]);
    AtomicU8::from_ptr(b).store(on.into(), SeqCst);
}

/// What a reader set in a pinned instance: the own tgid, and capture.
#[derive(Default)]
struct Steer {
    tgid: u32,
    captures: Vec<Captured>,
}

impl Steer {
    fn holds(&self) -> bool {
        self.tgid != 0 || !self.captures.is_empty()
    }
}

/// The object's global data as mapped into this process, and what this
/// reader steers through it.
pub(crate) struct Control {
    data: Section<types::data>,
    bss: Section<types::bss>,
    /// A pinned instance's shared state as this reader set it, under a
    /// lease (None for an object this process loaded: it dies with it).
    lease: Option<Mutex<Steer>>,
    /// The site cache's entries as they are unflagged (see flag_sites):
    /// 0 where none is known, NO_ENTRY where the cell holds no site.
    shadow: Mutex<Vec<u64>>,
    /// Whether this reader flagged the cache (and so clears it when done).
    flagged: AtomicBool,
}

/// A shadow cell whose entry could not be told apart: never flagged.
const NO_ENTRY: u64 = u64::MAX;

/// Whether cache entry `e` is `ret`'s pool slot (td_pool), flagged or
/// not, put there by the BPF side for a new site's calls.
fn pooled(e: u64, ret: u64) -> bool {
    e != 0
        && [e, e ^ 1].into_iter().any(|e| {
            let (at, slot) = abi::site_cache_site(e);
            at == ret && slot as usize >= abi::NR_SLOTS
        })
}

impl Drop for Control {
    fn drop(&mut self) {
        self.unflag_sites();
    }
}

impl Control {
    /// Maps the .data and .bss maps; `leased`: steers under a lease, as a
    /// pinned instance's reader.
    pub(crate) fn map(data: &MapHandle, bss: &MapHandle, leased: bool) -> Result<Self> {
        Ok(Control {
            data: Section::map(data, ".data")?,
            bss: Section::map(bss, ".bss")?,
            lease: leased.then(|| Mutex::new(Steer::default())),
            shadow: Mutex::new(vec![0; abi::SITE_CACHE]),
            flagged: AtomicBool::new(false),
        })
    }

    fn site_cell(&self, i: usize) -> &AtomicU64 {
        // SAFETY: the .bss mapping is alive as long as self; callers keep
        // i below SITE_CACHE, the array's length.
        unsafe { u64_at(std::ptr::addr_of_mut!((*self.bss.ptr).site_cache[i])) }
    }

    fn shadow(&self) -> std::sync::MutexGuard<'_, Vec<u64>> {
        self.shadow.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Flags the sites in the cache of the reasons `which` picks (by
    /// slot): each entry's lowest bit flipped, so the common path misses
    /// it and its calls reach the stack gate and the background sampler.
    /// The sampler clears a flag once the reason's bucket on the CPU is
    /// empty, so it sees each reason's first calls a tick; a flag of the
    /// captured reason stays while it is captured, and one that neither
    /// wants is cleared at the site's next call. Entries another process
    /// cached are told from flagged ones by the site table (`slot_of`: the
    /// slot it gives a return address). Pool entries are all flagged
    /// (`pool_ret`: the address of pool slot k).
    pub(crate) fn flag_sites(
        &self,
        which: impl Fn(u32) -> bool,
        mut slot_of: impl FnMut(u64) -> Option<u32>,
        pool_ret: impl Fn(usize) -> Option<u64>,
    ) {
        let mut shadow = self.shadow();
        for (i, known) in shadow.iter_mut().enumerate() {
            let cell = self.site_cell(i);
            let now = cell.load(SeqCst);
            if now == 0 {
                continue;
            }
            let slot = abi::site_cache_site(now).1;
            if slot as usize >= abi::NR_SLOTS {
                // A new site's pool slot, its reason not known until it is
                // resolved: flagged whatever is captured, as its calls then
                // reach the gate, which tells its reason by caller range
                // (as a pending site's), and the sampler. Only the entry as
                // made (by the pool's address: a return address may be
                // odd), so never over another site.
                let made = pool_ret(slot as usize - abi::NR_SLOTS)
                    .and_then(|ret| abi::site_cache_entry(ret, slot));
                if made == Some((i, now)) {
                    let _ = cell.compare_exchange(now, now ^ 1, SeqCst, SeqCst);
                }
                continue;
            }
            if *known == 0 {
                *known = [now, now ^ 1]
                    .into_iter()
                    .find(|&e| {
                        let (ret, slot) = abi::site_cache_site(e);
                        abi::site_cache_entry(ret, slot) == Some((i, e))
                            && slot_of(ret) == Some(slot)
                    })
                    .unwrap_or(NO_ENTRY);
            }
            if *known != NO_ENTRY && which(abi::site_cache_site(*known).1) {
                // Only over the entry known: never over another site.
                let _ = cell.compare_exchange(*known, *known ^ 1, SeqCst, SeqCst);
            }
        }
        self.flagged.store(true, SeqCst);
    }

    /// Clears the flags this reader set: no call takes the slow path for
    /// them once it is gone.
    pub(crate) fn unflag_sites(&self) {
        if !self.flagged.swap(false, SeqCst) {
            return;
        }
        for (i, &known) in self.shadow().iter().enumerate() {
            if known != 0 && known != NO_ENTRY {
                let _ = self
                    .site_cell(i)
                    .compare_exchange(known ^ 1, known, SeqCst, SeqCst);
            }
        }
    }

    /// Fills in the deeper-frame rules and marks them ready: the BPF side
    /// then applies them, and stops counting unresolved calls in the early
    /// table. Tables first, then the flag the BPF side reads first.
    pub(crate) fn set_deep(&self, tables: types::td_deep) {
        // SAFETY: the .bss mapping is alive as long as self; td_deep is
        // plain data, and nothing reads the tables before `ready` is set
        // (the release store below orders this write before it).
        unsafe {
            let dst = std::ptr::addr_of_mut!((*self.bss.ptr).deep);
            std::ptr::write_volatile(dst, tables);
            u32_at(std::ptr::addr_of_mut!((*dst).ready)).store(1, SeqCst);
        }
    }

    /// Lets the programs name new sites themselves (td_kres): FUNC's entry,
    /// the first slot they may take, whether they tell tail calls apart,
    /// then the flag they read first.
    pub(crate) fn start_resolving(&self, func: u64, tail: bool, next: u32) {
        // SAFETY: fields of the .bss mapping, alive as long as self; plain
        // integers the BPF side reads only once `ready` is set, and the
        // release store below orders these writes before it.
        unsafe {
            let k = std::ptr::addr_of_mut!((*self.bss.ptr).kres);
            u64_at(std::ptr::addr_of_mut!((*k).func)).store(func, SeqCst);
            u32_at(std::ptr::addr_of_mut!((*k).next)).store(next, SeqCst);
            u32_at(std::ptr::addr_of_mut!((*k).tail)).store(tail.into(), SeqCst);
            u32_at(std::ptr::addr_of_mut!((*k).ready)).store(1, SeqCst);
        }
    }

    /// Whether the programs name new sites themselves (start_resolving).
    pub(crate) fn resolving(&self) -> bool {
        // SAFETY: as in start_resolving.
        unsafe { u32_at(std::ptr::addr_of_mut!((*self.bss.ptr).kres.ready)) }.load(SeqCst) != 0
    }

    /// Puts a resolved site into the direct-mapped cache the BPF side reads
    /// first, unless its entry is taken (the hash then serves it). One
    /// 8-byte store: the BPF side never sees half an entry.
    pub(crate) fn cache_site(&self, ret: u64, slot: u32) {
        let Some((i, entry)) = abi::site_cache_entry(ret, slot) else {
            return;
        };
        // i is in range: site_cache_entry's hash is SITE_CACHE_BITS wide.
        let cell = self.site_cell(i);
        // The captured reason's sites come in flagged: none of their
        // calls passes the stack gate by.
        let flag = u64::from(self.is_captured(slot));
        let mut now = cell.load(SeqCst);
        // Empty, or the site's pool slot (its calls counted there so far,
        // and still summed under its reason): the reason's entry.
        while now == 0 || pooled(now, ret) {
            match cell.compare_exchange(now, entry ^ flag, SeqCst, SeqCst) {
                Ok(_) => {
                    if flag != 0 {
                        self.flagged.store(true, SeqCst);
                    }
                    break;
                }
                Err(e) => now = e,
            }
        }
        // Known now, flagged or not (see flag_sites).
        if cell.load(SeqCst) | 1 == entry | 1 {
            self.shadow()[i] = entry;
        }
    }

    /// Empties `ret`'s cache entry, flagged or not, if it still names the
    /// site (in its reason's slot or its pool slot): its module was
    /// unloaded, and the next one loaded may put another function at that
    /// address. Emptied, the entry may be given to a new site; a resolved
    /// site it was not given to counts as pending meanwhile (see
    /// surely_new), which is right as well.
    pub(crate) fn uncache_site(&self, ret: u64, slot: u32) {
        let Some((i, entry)) = abi::site_cache_entry(ret, slot) else {
            return;
        };
        let cell = self.site_cell(i);
        let now = cell.load(SeqCst);
        let named = [entry, entry ^ 1].contains(&now) || pooled(now, ret);
        if named && cell.compare_exchange(now, 0, SeqCst, SeqCst).is_ok() {
            let mut shadow = self.shadow();
            if shadow[i] == entry {
                shadow[i] = 0;
            }
        }
    }

    /// Captures the stacks of the reasons in `set` from now on (empty:
    /// none), in place of those captured before.
    pub(crate) fn capture(&self, set: &[Captured]) -> Result<()> {
        let ranges: usize = set.iter().map(|c| c.callers.len()).sum();
        if ranges > MAX_STACK_RANGES {
            return Err(Error::msg(format!(
                "the captured reasons have {ranges} caller ranges, more than the {MAX_STACK_RANGES} supported"
            )));
        }
        self.steer(None, Some(set));
        Ok(())
    }

    /// Leaves out the calls of process `tgid` (0: none) while it is awake:
    /// the tgid first, then the calls sent to the slow path, which checks
    /// it (td_watch).
    pub(crate) fn own(&self, tgid: u32) {
        self.steer(Some(tgid), None);
    }

    /// Sets the own tgid and/or capture. For a pinned instance, under this
    /// reader's lease: taken (or renewed) before anything is set, given up
    /// once nothing is. If the BPF side took the state back meanwhile (the
    /// lease ran out: this process stalled), all of it is published again,
    /// once the BPF side is done (see lease_check): the lease is renewed by
    /// compare-and-swap from the value read, so a taking back that comes
    /// between the two is seen.
    fn steer(&self, own: Option<u32>, capture: Option<&[Captured]>) {
        let (ctl, watch) = (self.ctl(), self.watch());
        let leased = self.lease.is_some();
        let mut fresh = Steer::default();
        let mut guard = self
            .lease
            .as_ref()
            .map(|m| m.lock().unwrap_or_else(|e| e.into_inner()));
        let s = guard.as_deref_mut().unwrap_or(&mut fresh);
        // SAFETY (here and below): ctl and watch point into the .data and
        // .bss mappings, alive as long as self.
        let lease = unsafe { u64_at(std::ptr::addr_of_mut!((*ctl).lease_ns)) };
        let held = leased && s.holds();
        let mut seen = settled(lease);
        let mut lost = held && seen == 0;
        if let Some(tgid) = own {
            s.tgid = tgid;
        }
        if let Some(set) = capture {
            s.captures = set.to_vec();
        }
        if leased && s.holds() {
            let until = mono_ns() + LEASE.as_nanos() as u64;
            while lease.compare_exchange(seen, until, SeqCst, SeqCst).is_err() {
                seen = settled(lease);
                lost |= held && seen == 0;
            }
        }
        unsafe {
            if lost || own.is_some() {
                u32_at(std::ptr::addr_of_mut!((*ctl).own_tgid)).store(s.tgid, SeqCst);
                set_watch(watch, WATCH_OWN, s.tgid != 0);
            }
            if lost || capture.is_some() {
                publish(ctl, watch, &s.captures);
            }
        }
        if leased && !s.holds() {
            lease.store(0, SeqCst);
        }
    }

    fn ctl(&self) -> *mut types::td_control {
        // SAFETY: a field of the .data mapping.
        unsafe { std::ptr::addr_of_mut!((*self.data.ptr).ctl) }
    }

    fn watch(&self) -> *mut types::td_watch {
        // SAFETY: a field of the .bss mapping.
        unsafe { std::ptr::addr_of_mut!((*self.bss.ptr).watch) }
    }

    /// Whether a call site was first counted as pending since the last
    /// call (the BPF side sets the flag; this clears it, before the poll
    /// that resolves the site reads the pending counts).
    pub(crate) fn take_new_sites(&self) -> bool {
        // SAFETY: a field of the .bss mapping, alive as long as self; an
        // aligned u32 the BPF side only ever sets to 1.
        let flag = unsafe { u32_at(std::ptr::addr_of_mut!((*self.bss.ptr).new_sites)) };
        flag.swap(0, SeqCst) != 0
    }

    /// Word `i` of td_control.captured: reasons 64 i to 64 i + 63.
    fn captured_word(&self, i: usize) -> u64 {
        assert!(i < CAPTURED_WORDS);
        // SAFETY: as in steer; i is below the array's length.
        unsafe { u64_at(std::ptr::addr_of_mut!((*self.ctl()).captured[i])) }.load(SeqCst)
    }

    /// The reasons whose stacks are being captured, by slot.
    pub(crate) fn capturing(&self) -> Vec<u32> {
        (0..CAPTURED_WORDS)
            .flat_map(|i| {
                let w = self.captured_word(i);
                (0..64)
                    .filter(move |b| w >> b & 1 != 0)
                    .map(move |b| (i * 64 + b) as u32)
            })
            .collect()
    }

    /// Whether `slot`'s stacks are being captured.
    fn is_captured(&self, slot: u32) -> bool {
        let i = slot as usize / 64;
        i < CAPTURED_WORDS && self.captured_word(i) >> (slot % 64) & 1 != 0
    }

    /// Steers as a pinned instance's reader does: under a lease.
    #[cfg(test)]
    pub(crate) fn take_leases(&mut self) {
        self.lease = Some(Mutex::new(Steer::default()));
    }

    /// The site cache's cell of `ret` (cached as `slot`) and its entry
    /// unflagged, for a test that flags it from another thread.
    #[cfg(test)]
    pub(crate) fn site_cell_ptr(&self, ret: u64, slot: u32) -> (*mut u64, u64) {
        let (i, e) = abi::site_cache_entry(ret, slot).expect("a kernel address");
        // SAFETY: a field of the .bss mapping; i is below SITE_CACHE.
        (
            unsafe { std::ptr::addr_of_mut!((*self.bss.ptr).site_cache[i]) },
            e,
        )
    }

    /// The raw control block and watch key, for a test that moves capture
    /// from one thread while another runs the program.
    #[cfg(test)]
    pub(crate) fn control_ptr(&self) -> (*mut types::td_control, *mut types::td_watch) {
        (self.ctl(), self.watch())
    }
}
