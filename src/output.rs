//! Standard output for a run whose reader may go away (`topdown ... |
//! head`): printing stops and, as bcc, bpftrace and perf do, the run ends
//! as Ctrl-C ends it: its files are written and its exit status is kept.

use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};

/// Standard output's width in columns: the terminal's, else $COLUMNS;
/// none for a file or a pipe, which get whole names.
pub fn terminal_width() -> Option<usize> {
    // SAFETY: TIOCGWINSZ fills the winsize it is given, on any fd.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    if unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut ws) } == 0 && ws.ws_col > 0
    {
        return Some(usize::from(ws.ws_col));
    }
    std::env::var("COLUMNS")
        .ok()?
        .parse()
        .ok()
        .filter(|&c| c > 0)
}

/// A writer that turns EPIPE into the end of printing: what follows is
/// dropped, and the flag given to `ending` is set. Any other error is
/// returned.
pub struct Stdout<'a, W: Write> {
    inner: W,
    closed: bool,
    stop: Option<&'a AtomicBool>,
}

impl<'a, W: Write> Stdout<'a, W> {
    pub fn new(inner: W) -> Self {
        Stdout {
            inner,
            closed: false,
            stop: None,
        }
    }

    /// Sets `stop` when the reader goes away: the run's own stop flag,
    /// the one Ctrl-C sets.
    pub fn ending(mut self, stop: &'a AtomicBool) -> Self {
        self.stop = Some(stop);
        self
    }

    /// Whether the reader went away.
    #[cfg(test)]
    pub fn closed(&self) -> bool {
        self.closed
    }

    fn check(&mut self, r: io::Result<()>) -> io::Result<()> {
        match r {
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {
                self.closed = true;
                if let Some(stop) = self.stop {
                    stop.store(true, Ordering::Relaxed);
                }
                Ok(())
            }
            r => r,
        }
    }
}

impl<W: Write> Write for Stdout<'_, W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.closed {
            return Ok(buf.len());
        }
        let r = self.inner.write_all(buf);
        self.check(r).map(|()| buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.closed {
            return Ok(());
        }
        let r = self.inner.flush();
        self.check(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Takes `ok` bytes, then fails every call with `kind`.
    struct Failing {
        ok: usize,
        kind: io::ErrorKind,
        got: Vec<u8>,
    }

    impl Write for Failing {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if self.got.len() + buf.len() > self.ok {
                return Err(io::Error::from(self.kind));
            }
            self.got.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn failing(ok: usize, kind: io::ErrorKind) -> Failing {
        Failing {
            ok,
            kind,
            got: Vec::new(),
        }
    }

    #[test]
    fn a_closed_pipe_ends_printing() {
        let mut out = Stdout::new(failing(4, io::ErrorKind::BrokenPipe));
        out.write_all(b"abc").unwrap();
        assert!(!out.closed());
        out.write_all(b"defg").unwrap();
        assert!(out.closed());
        out.write_all(b"h").unwrap();
        out.flush().unwrap();
        assert_eq!(out.inner.got, b"abc");
    }

    #[test]
    fn a_closed_pipe_ends_the_run_as_ctrl_c_does() {
        let stop = AtomicBool::new(false);
        let mut out = Stdout::new(failing(4, io::ErrorKind::BrokenPipe)).ending(&stop);
        out.write_all(b"abc").unwrap();
        assert!(!stop.load(Ordering::Relaxed));
        out.write_all(b"defg").unwrap();
        assert!(stop.load(Ordering::Relaxed));
        // The summary that follows is dropped, not an error.
        out.write_all(b"summary").unwrap();
        out.flush().unwrap();
    }

    #[test]
    fn other_errors_are_errors() {
        let stop = AtomicBool::new(false);
        let mut out = Stdout::new(failing(0, io::ErrorKind::StorageFull)).ending(&stop);
        let e = out.write_all(b"x").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::StorageFull);
        assert!(!out.closed());
        assert!(!stop.load(Ordering::Relaxed));
    }
}
