//! Input files read whole (profiles, declarations, baselines), each with a
//! cap: `--reasons /dev/zero` is one line, not gigabytes of memory.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;
use std::time::Duration;

/// A reason profile or a pin declaration: a small TOML file.
pub(crate) const MAX_PROFILE: u64 = 1 << 20;

/// A result saved by --save: a JSON file with the top stacks.
pub(crate) const MAX_RESULT: u64 = 64 << 20;

/// How long a FIFO given as input may stay without a writer.
const FIFO_WAIT: Duration = Duration::from_secs(5);

/// The text of `path`, or an error if it is longer than `max` bytes (or
/// not UTF-8, or unreadable). A FIFO that nothing writes to is an error
/// after FIFO_WAIT, not a wait for ever (`<(cmd)` has its writer).
pub(crate) fn read_text(path: &Path, max: u64) -> io::Result<String> {
    read_text_waiting(path, max, FIFO_WAIT)
}

fn read_text_waiting(path: &Path, max: u64, wait: Duration) -> io::Result<String> {
    // O_NONBLOCK: the open of a FIFO returns at once, writer or not.
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    if f.metadata()?.file_type().is_fifo() {
        wait_for_writer(&f, wait)?;
    }
    // Reads block again, as for any file.
    blocking(&f);
    read_capped(f, max)
}

/// Takes O_NONBLOCK off `f`, opened with it so that the open of a FIFO
/// does not wait for its other end: its reads and writes then wait as any
/// file's do.
pub(crate) fn blocking(f: &File) {
    // SAFETY: fcntl on a descriptor f owns.
    unsafe {
        let flags = libc::fcntl(f.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(f.as_raw_fd(), libc::F_SETFL, flags & !libc::O_NONBLOCK);
    }
}

/// Waits up to `wait` for the FIFO `f` to have something to read (or a
/// writer that came and went).
fn wait_for_writer(f: &File, wait: Duration) -> io::Result<()> {
    let mut pfd = libc::pollfd {
        fd: f.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = libc::c_int::try_from(wait.as_millis()).unwrap_or(libc::c_int::MAX);
    // SAFETY: one pollfd, valid for the call.
    let n = unsafe { libc::poll(&mut pfd, 1, ms) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if n == 0 {
        return Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "it is a FIFO that nothing wrote to in {} s (give a file, or start its writer first)",
                wait.as_secs()
            ),
        ));
    }
    Ok(())
}

fn read_capped(f: File, max: u64) -> io::Result<String> {
    let mut text = String::new();
    f.take(max + 1).read_to_string(&mut text)?;
    if text.len() as u64 > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("it is larger than {} MiB", max >> 20),
        ));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endless_file_is_refused_at_the_cap() {
        let e = read_text(Path::new("/dev/zero"), MAX_PROFILE).unwrap_err();
        assert_eq!(e.to_string(), "it is larger than 1 MiB");
        let dir = std::env::temp_dir().join(format!("topdown-input-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let at_cap = dir.join("f");
        std::fs::write(&at_cap, vec![b'#'; MAX_PROFILE as usize]).unwrap();
        assert_eq!(read_text(&at_cap, MAX_PROFILE).unwrap().len(), 1 << 20);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_fifo_without_a_writer_is_refused_and_one_with_a_writer_is_read() {
        let dir = std::env::temp_dir().join(format!("topdown-fifo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("f");
        crate::testing::mkfifo(&fifo);
        let e = read_text_waiting(&fifo, MAX_PROFILE, Duration::from_millis(100)).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("it is a FIFO that nothing wrote to"),
            "{e}"
        );
        let writer = {
            let fifo = fifo.clone();
            std::thread::spawn(move || std::fs::write(fifo, "version = 1\n").unwrap())
        };
        let text = read_text_waiting(&fifo, MAX_PROFILE, Duration::from_secs(10)).unwrap();
        writer.join().unwrap();
        assert_eq!(text, "version = 1\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
