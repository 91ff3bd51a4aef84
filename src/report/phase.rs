//! How far a run got, and how a comparison ended.

/// How far the run got: counting, stack capture, and with --baseline the
/// verdict on the fix instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    Counting,
    StackCapture,
    FixVerified,
    NotVerified,
    Inconclusive,
}

impl Phase {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Phase::Counting => "counting",
            Phase::StackCapture => "stack capture",
            Phase::FixVerified => "fix verified",
            Phase::NotVerified => "not verified",
            Phase::Inconclusive => "inconclusive",
        }
    }
}

/// How a comparison ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Verified,
    NotVerified,
    /// Too few calls to say either.
    Inconclusive,
}

impl Outcome {
    pub(crate) fn phase(self) -> Phase {
        match self {
            Outcome::Verified => Phase::FixVerified,
            Outcome::NotVerified => Phase::NotVerified,
            Outcome::Inconclusive => Phase::Inconclusive,
        }
    }
}
