//! The version string: topdown's own and the libbpf it carries.

use std::ffi::CStr;
use std::sync::OnceLock;

pub(crate) fn long() -> &'static str {
    static LONG: OnceLock<String> = OnceLock::new();
    LONG.get_or_init(|| {
        // SAFETY: libbpf returns a pointer to a static NUL-terminated string.
        let libbpf = unsafe { CStr::from_ptr(libbpf_sys::libbpf_version_string()) };
        format!(
            "{} (libbpf {})",
            env!("CARGO_PKG_VERSION"),
            libbpf.to_string_lossy().trim_start_matches('v')
        )
    })
}
