//! One function per job, each wiring the pipeline's stages in order:
//! host checks, the profile resolved and compiled, the BPF side attached,
//! the session run, the report written.
//!
//! `start` brings the counting program up, `trace` runs a session on it,
//! `output` writes a run's files, `pinned` and `serve` are the jobs on
//! pinned instances; `common` holds what several of them share.

mod command;
mod common;
mod list;
mod output;
mod pinned;
mod serve;
mod start;
mod trace;

pub use common::Status;
pub use list::{list_profiles, list_reasons, list_targets};
pub use pinned::{pin, show, sync, unpin};
pub use serve::serve;
pub use trace::trace;
