//! A pinned instance's `cat`-able files: BPF iterators over its counts map
//! (iter.bpf.c), pinned beside its maps as `reasons` (the seed's debugfs
//! table) and `metrics` (Prometheus text; bpffs refuses the dot of a
//! `.prom` name, so node_exporter reads it through a symlink).

use std::mem::MaybeUninit;
use std::os::fd::AsFd;
use std::path::Path;

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::OpenObject;

use crate::error::{Error, Result};

#[allow(clippy::all, unused_imports, dead_code, missing_docs, unreachable_pub)]
mod skel {
    include!(concat!(env!("OUT_DIR"), "/iter.skel.rs"));
}

/// The files' pin names: removed with the instance's other pins.
pub(crate) const FILES: [&str; 2] = ["reasons", "metrics"];

const NAME_LEN: usize = crate::bpf::skel::types::td_abi::TD_NAME_LEN.0 as usize;

/// `func` as the programs' NUL-terminated name field (a kernel symbol's
/// name is ASCII and far shorter; cut to fit all the same).
fn name_field(func: &str) -> [u8; NAME_LEN] {
    let mut out = [0u8; NAME_LEN];
    let n = func.len().min(NAME_LEN - 1);
    out[..n].copy_from_slice(&func.as_bytes()[..n]);
    out
}

/// Whether the iterators' map `name` is the pinned instance's: not one
/// of their global data's (named OBJECT.rodata and the like; a map
/// defined in C has no dot in its name).
fn reused(name: &str) -> bool {
    !name.contains('.')
}

/// Loads the iterators on the maps pinned in `dir` (an instance being
/// pinned) and pins them there as `FILES`. An error says why the kernel
/// cannot (before 5.19, the load fails); nothing is pinned then.
pub(crate) fn pin_files(dir: &Path, func: &str) -> Result<()> {
    let done = load_and_pin(dir, func);
    if done.is_err() {
        // Both files or neither.
        for name in FILES {
            let _ = std::fs::remove_file(dir.join(name));
        }
    }
    done
}

/// An error of libbpf's while doing `what`.
fn bpf(what: &str) -> impl FnOnce(libbpf_rs::Error) -> Error + '_ {
    move |e| Error::bpf(what, e)
}

fn load_and_pin(dir: &Path, func: &str) -> Result<()> {
    let cpus = libbpf_rs::num_possible_cpus().map_err(bpf("counting the possible CPUs"))?;
    let mut storage = MaybeUninit::<OpenObject>::uninit();
    let mut open = skel::IterSkelBuilder::default()
        .open(&mut storage)
        .map_err(bpf("opening the file iterators"))?;
    // Every map of theirs is the instance's (shared_maps.bpf.h), by name,
    // but their own settings: one left out would be a new, empty map,
    // and the files would read it as no calls.
    for mut map in open.open_object_mut().maps_mut() {
        let name = map.name().to_string_lossy().into_owned();
        if reused(&name) {
            map.reuse_pinned_map(dir.join(&name))
                .map_err(bpf(&format!("reusing the {name} map")))?;
        }
    }
    let ro = open
        .maps
        .rodata_data
        .as_deref_mut()
        .expect("iter.bpf.c has rodata");
    ro.nr_cpus = u32::try_from(cpus).unwrap_or(u32::MAX);
    for (to, from) in ro.func_name.iter_mut().zip(name_field(func)) {
        *to = from as _;
    }
    let skel = open
        .load()
        .map_err(|e| match crate::bpf::log::take_verifier_reason() {
            Some(why) => Error::msg(format!("loading the file iterators: {why}")),
            None => Error::bpf("loading the file iterators", e),
        })?;
    let counts = skel.maps.counts.as_fd();
    for (name, prog) in [
        (FILES[0], &skel.progs.reasons_file),
        (FILES[1], &skel.progs.metrics_file),
    ] {
        let mut link = prog
            .attach_iter(counts)
            .map_err(bpf(&format!("attaching the {name} iterator")))?;
        link.pin(dir.join(name))
            .map_err(bpf(&format!("pinning {name}")))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The iterators reuse every map they share with the counting
    /// programs, each pinned by the same name.
    #[test]
    fn the_iterators_reuse_every_shared_map_by_its_pinned_name() {
        let mut storage = MaybeUninit::<OpenObject>::uninit();
        let open = skel::IterSkelBuilder::default().open(&mut storage).unwrap();
        let mut reused: Vec<String> = open
            .open_object()
            .maps()
            .map(|m| m.name().to_string_lossy().into_owned())
            .filter(|n| super::reused(n))
            .collect();
        reused.sort();
        assert_eq!(
            reused,
            ["counts", "fresh", "names", "pending", "pool", "sites"]
        );
        for name in &reused {
            assert!(
                crate::bpf::maps::PINNED_MAPS.contains(&name.as_str()),
                "{name}"
            );
        }
    }

    #[test]
    fn the_name_field_is_nul_terminated() {
        let f = name_field("deferred_split_folio");
        assert_eq!(&f[..21], b"deferred_split_folio\0");
        assert!(f[21..].iter().all(|&b| b == 0));
        let long = "x".repeat(NAME_LEN + 5);
        let f = name_field(&long);
        assert_eq!(f[NAME_LEN - 1], 0);
        assert!(f[..NAME_LEN - 1].iter().all(|&b| b == b'x'));
    }
}
