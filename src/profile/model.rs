//! What a validated profile is: the types every stage of `profile` shares.

/// The profile format version this code reads.
pub(crate) const VERSION: u32 = 1;
/// Frames searched above the caller when a rule gives no `depth`.
pub(crate) const DEFAULT_DEPTH: u32 = 8;

/// A validated profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Profile {
    /// Where it came from, for messages: a path, `built-in profile NAME` or
    /// `--rules`.
    pub origin: String,
    /// The traced function it was written for (none for the inline form).
    pub function: Option<String>,
    pub description: String,
    pub reasons: Vec<Reason>,
    /// Settings that can change the counts (files under /proc/sys or
    /// /sys), recorded with a saved result.
    pub knobs: Vec<String>,
}

/// One named reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reason {
    pub name: String,
    pub description: String,
    /// Caller functions (base names).
    pub callers: Vec<String>,
    /// None: the reason is the default of its callers; Some: a rule.
    pub within: Option<Within>,
}

/// A rule's condition: a frame within `depth` frames above the caller lies
/// in one of `functions`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Within {
    pub functions: Vec<String>,
    pub depth: u32,
}
