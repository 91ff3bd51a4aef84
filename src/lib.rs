//! topdown: which caller path of a kernel function dominates, and its stacks.
//!
//! The pipeline, one module per stage: `cli` (flags) → `plan` (the flags
//! validated into one job) → `host` (what the kernel allows) → `profile`
//! (reasons resolved on this kernel and compiled for BPF) → `bpf` (load,
//! attach, read the maps) → `session` (the interval loop and its
//! decisions) → `report` (text, JSON, folded stacks, OpenMetrics). `jobs`
//! wires the stages for each job; `main.rs` only dispatches. `bpf::pin`
//! keeps tier 1 in bpffs for `pin`, `show`, `unpin` and `serve` (the HTTP
//! side of which is `serve`). `system` reads the settings a saved result
//! records beside its counts (`--save`).

mod bpf;
pub mod cli;
mod error;
mod filter;
mod host;
pub mod jobs;
mod kallsyms;
pub mod plan;
mod profile;
mod reasons;
mod report;
mod serve;
mod session;
mod symbolize;
mod system;
mod version;

pub use bpf::log::route_libbpf_messages;
pub use error::{Error, Result};
