//! Standard output for a run whose reader may go away (`topdown ... |
//! head`): printing stops, the run goes on to its normal end, and its
//! files and exit status are as if nothing had happened.

use std::io::{self, Write};

/// A writer that turns EPIPE into the end of printing: what follows is
/// dropped. Any other error is returned.
pub struct Stdout<W: Write> {
    inner: W,
    closed: bool,
}

impl<W: Write> Stdout<W> {
    pub fn new(inner: W) -> Self {
        Stdout {
            inner,
            closed: false,
        }
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
                Ok(())
            }
            r => r,
        }
    }
}

impl<W: Write> Write for Stdout<W> {
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

    #[test]
    fn a_closed_pipe_ends_printing_not_the_run() {
        let mut out = Stdout::new(Failing {
            ok: 4,
            kind: io::ErrorKind::BrokenPipe,
            got: Vec::new(),
        });
        out.write_all(b"abc").unwrap();
        assert!(!out.closed());
        out.write_all(b"defg").unwrap();
        assert!(out.closed());
        out.write_all(b"h").unwrap();
        out.flush().unwrap();
        assert_eq!(out.inner.got, b"abc");
    }

    #[test]
    fn other_errors_are_errors() {
        let mut out = Stdout::new(Failing {
            ok: 0,
            kind: io::ErrorKind::StorageFull,
            got: Vec::new(),
        });
        let e = out.write_all(b"x").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::StorageFull);
        assert!(!out.closed());
    }
}
