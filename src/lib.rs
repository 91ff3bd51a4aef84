//! topdown: which caller path of a kernel function dominates, and its stacks.
//!
//! Data flows one way: the BPF programs (`src/bpf/`) count calls per reason
//! slot; `probe` reads the maps, `poll` turns them into per-reason totals,
//! `rates` into interval figures, and `output` into tables or JSON.

pub mod attach;
pub mod cli;
pub mod error;
pub mod kallsyms;
pub mod output;
pub mod plan;
pub mod poll;
pub mod probe;
pub mod profile;
pub mod rates;
pub mod reasons;
pub mod session;
pub mod stacks;
pub mod symbolize;
pub mod trigger;
pub mod version;

#[allow(clippy::all, unused_imports, dead_code, missing_docs)]
pub mod skel {
    include!(concat!(env!("OUT_DIR"), "/topdown.skel.rs"));
}
