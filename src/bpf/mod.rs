//! The kernel side: the BPF programs (`topdown.bpf.c`, `topdown.h`), their
//! generated skeleton, and the Rust that loads, attaches and reads them.
//! `abi` mirrors the header; `probe` is the loaded object; `attach`
//! chooses fentry or a kprobe and explains refusals; `log` keeps the
//! verifier's reason for them.

pub(crate) mod abi;
pub(crate) mod attach;
pub(crate) mod log;
pub(crate) mod maps;
pub(crate) mod pin;
pub(crate) mod probe;
#[cfg(test)]
mod tests;

#[allow(clippy::all, unused_imports, dead_code, missing_docs, unreachable_pub)]
pub(crate) mod skel {
    include!(concat!(env!("OUT_DIR"), "/topdown.skel.rs"));
}
