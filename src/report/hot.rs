//! When a reason is hot: the threshold and the test.

/// The --threshold default: the share at which a reason is hot.
pub(crate) const DEFAULT_THRESHOLD: f64 = 80.0;

/// Whether a reason with `share` percent of the calls is hot: at or above
/// the threshold (--threshold). The one definition, for the summary's
/// "hot reason" and the verdict's (the trigger asks the same of the last
/// second, with confidence bounds for its small samples).
pub(crate) fn is_hot(share: f64, threshold: f64) -> bool {
    share >= threshold
}

/// "hot reason" or "top reason", as the share makes it.
pub(crate) fn top_label(share: f64, threshold: f64) -> &'static str {
    if is_hot(share, threshold) {
        "hot reason"
    } else {
        "top reason"
    }
}
