//! topdown: which caller path of a kernel function dominates, and its stacks.
//!
//! The pipeline, one module per stage: `cli` (flags) → `plan` (the flags
//! validated into one job) → `host` (what the kernel allows) → `profile`
//! (reasons resolved on this kernel and compiled for BPF) → `bpf` (load,
//! attach, read the maps) → `session` (the interval loop and its
//! decisions) → `report` (text, JSON, folded stacks). `jobs` wires the
//! stages for each job; `main.rs` only dispatches.

mod bpf;
pub mod cli;
mod error;
mod host;
pub mod jobs;
mod kallsyms;
pub mod plan;
mod profile;
mod reasons;
mod report;
mod session;
mod symbolize;
mod version;

pub use error::{Error, Result};
