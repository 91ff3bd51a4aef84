//! The kernel side: the BPF programs (`topdown.bpf.c`, the `.bpf.h`
//! headers it includes, and `topdown.h`; `iter.bpf.c`, the pinned files),
//! their generated skeletons, and
//! the Rust that loads, attaches and reads them.
//! `abi` mirrors the header, and `deep`, `percpu` and `sample` decode
//! what the maps hold; `probe` is the loaded object; `attach` chooses
//! fentry or a kprobe and explains refusals; `log` keeps the verifier's
//! reason for them.
//!
//! The rest of the program uses what this file offers (`limits`, the
//! `LoadConfig` and `Filters` it hands over, the probe's and maps'
//! methods), not `abi`, `maps`, `ctl`, `skel` or `percpu` by name:
//! tests/modgraph.rs lists the files that still do, and lets none be added.

pub(crate) mod abi;
pub(crate) mod attach;
pub(crate) mod ctl;
pub(crate) mod deep;
pub(crate) mod drilled;
pub(crate) mod iter;
pub(crate) mod log;
pub(crate) mod maps;
pub(crate) mod percpu;
pub(crate) mod pin;
pub(crate) mod probe;
pub(crate) mod sample;
#[cfg(test)]
mod tests;

/// What the rest of the program hands the kernel side, as plain data: the
/// settings a counting program is loaded with and the filters in them.
pub(crate) use abi::{Filters, LoadConfig, NameTables};

/// What the kernel side hands back of --drill, as plain data.
pub(crate) use drilled::Drilled;

/// The capacities of the kernel side's tables, which what the user gives is
/// checked against before anything is loaded.
pub(crate) mod limits {
    pub(crate) use super::abi::{
        MAX_CPUS, MAX_DEEP_CALLERS, MAX_DEEP_RULES, MAX_GLUE, MAX_PIDS, MAX_RULE_DEPTH, MAX_SITES,
        MAX_STACK_FRAMES,
    };
}

#[allow(clippy::all, unused_imports, dead_code, missing_docs, unreachable_pub)]
pub(crate) mod skel;
