//! One error type: a one-line message for the user.

use std::fmt;

#[derive(Debug)]
pub struct Error {
    msg: String,
    errno: Option<i32>,
    /// A usage error (exit status 2): the command line, or a file or value
    /// it names, is wrong.
    usage: bool,
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub(crate) fn msg(msg: impl Into<String>) -> Self {
        Error {
            msg: msg.into(),
            errno: None,
            usage: false,
        }
    }

    /// A usage error: the command line asks for what cannot be done,
    /// whatever the system (exit status 2).
    pub(crate) fn usage(msg: impl Into<String>) -> Self {
        Error {
            usage: true,
            ..Error::msg(msg)
        }
    }

    /// The same error, as a usage error: it comes from what the user gave.
    pub(crate) fn into_usage(self) -> Self {
        Error {
            usage: true,
            ..self
        }
    }

    /// Whether this is a usage error.
    pub fn is_usage(&self) -> bool {
        self.usage
    }

    /// A libbpf error with what we were doing when it happened.
    pub(crate) fn bpf(context: &str, e: libbpf_rs::Error) -> Self {
        Error {
            msg: format!("{context}: {}", one_line(&e)),
            errno: errno_of(&e),
            usage: false,
        }
    }

    /// An I/O error with what we were doing when it happened.
    pub(crate) fn io(context: &str, e: std::io::Error) -> Self {
        Error {
            msg: format!("{context}: {e}"),
            errno: e.raw_os_error(),
            usage: false,
        }
    }

    /// The OS error number behind the error, if there is one.
    pub fn errno(&self) -> Option<i32> {
        self.errno
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.msg)
    }
}

impl std::error::Error for Error {}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error {
            msg: e.to_string(),
            errno: e.raw_os_error(),
            usage: false,
        }
    }
}

/// The errno at the bottom of a libbpf-rs error chain.
pub(crate) fn errno_of(e: &libbpf_rs::Error) -> Option<i32> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            if let Some(n) = io.raw_os_error() {
                return Some(n);
            }
        }
        cur = err.source();
    }
    // libbpf-rs (0.27) keeps the io::Error in a private type that its
    // source() steps over, and its ErrorKind cannot tell apart the errnos
    // attach needs (EPERM and EACCES are one kind; ESRCH, EBUSY and
    // ENOTSUPP are all Other): the errno is left only in the Display
    // text, which ends in "(os error N)".
    let text = format!("{e:#}");
    let tail = &text[text.rfind("(os error ")? + "(os error ".len()..];
    tail[..tail.find(')')?].parse().ok()
}

/// libbpf-rs's alternate Display prints the whole chain; keep it on one line.
fn one_line(e: &libbpf_rs::Error) -> String {
    format!("{e:#}").replace('\n', " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_is_found_under_context() {
        use libbpf_rs::ErrorExt as _;
        let e: libbpf_rs::Result<()> = Err(libbpf_rs::Error::from_raw_os_error(libc::EPERM));
        let e = e.context("load").unwrap_err();
        assert_eq!(errno_of(&e), Some(libc::EPERM));
        assert_eq!(Error::bpf("x", e).errno(), Some(libc::EPERM));
    }
}
