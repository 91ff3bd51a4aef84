//! topdown: which caller path of a kernel function dominates, and its stacks.
//!
//! The pipeline, one module per stage: `cli` (flags) → `plan` (the flags
//! validated into one job) → `host` (what the kernel allows) → `profile`
//! (reasons resolved on this kernel and compiled for BPF) → `bpf` (load,
//! attach, read the maps) → `session` (the interval loop and its
//! decisions) → `report` (text, JSON, folded stacks, OpenMetrics). `jobs`
//! wires the stages for each job; `main.rs` only dispatches. `bpf::pin`
//! keeps tier 1 in bpffs for `pin`, `show`, `unpin` and `serve` (the HTTP
//! side of which is `serve`); `declared` reads the pins `pin --sync` keeps
//! in place. `system` reads the settings a saved result records beside its
//! counts (`--save`).

// Standard error may be a pipe whose reader went away: std's eprintln!
// and eprint! panic then, and the run would end without its summary, its
// files and its exit status. These drop the message instead; they shadow
// std's in every module below.
// (Under test, std's, whose output the test harness captures.)
#[cfg(not(test))]
macro_rules! eprintln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}
#[cfg(not(test))]
macro_rules! eprint {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stderr(), $($arg)*);
    }};
}

mod bpf;
mod build_ids;
pub mod cli;
mod declared;
mod error;
mod filter;
mod funcname;
#[cfg(test)]
mod fuzz;
mod host;
mod input;
pub mod jobs;
mod kallsyms;
pub mod listen;
mod output;
pub mod plan;
mod profile;
mod reasons;
mod report;
mod serve;
mod session;
mod symbolize;
mod system;
mod tailcall;
#[cfg(test)]
mod testing;
#[cfg_attr(test, allow(dead_code))]
mod tracepoint;
pub mod usage;
mod user;
mod version;

pub use bpf::log::route_libbpf_messages;
pub use error::{Error, Result};
