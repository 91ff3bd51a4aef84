//! The kernel side: the BPF programs (`topdown.bpf.c`, the `.bpf.h`
//! headers it includes, and `topdown.h`; `iter.bpf.c`, the pinned files),
//! their generated skeletons, and
//! the Rust that loads, attaches and reads them.
//! `abi` mirrors the header, and `deep`, `percpu` and `sample` decode
//! what the maps hold; `probe` is the loaded object; `attach` chooses
//! fentry or a kprobe and explains refusals; `log` keeps the verifier's
//! reason for them.

pub(crate) mod abi;
pub(crate) mod attach;
pub(crate) mod ctl;
pub(crate) mod deep;
pub(crate) mod iter;
pub(crate) mod log;
pub(crate) mod maps;
pub(crate) mod percpu;
pub(crate) mod pin;
pub(crate) mod probe;
pub(crate) mod sample;
#[cfg(test)]
mod tests;

#[allow(clippy::all, unused_imports, dead_code, missing_docs, unreachable_pub)]
pub(crate) mod skel {
    include!(concat!(env!("OUT_DIR"), "/topdown.skel.rs"));
}
