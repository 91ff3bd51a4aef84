//! `-c CMD` and `-- CMD ARGS`, as bpftrace's `-c` and `perf record -- CMD`:
//! the command is started and held before its first instruction until the
//! program counts, its calls and its children's are counted (a cgroup of
//! its own, the --cgroup filter), and the run ends when it exits.

use std::ffi::CString;
use std::fs;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::filter::{self, Filter};

/// A started command, held before exec until `release`.
pub(super) struct Command {
    pid: libc::pid_t,
    /// The write end of the pipe the child waits on: a byte lets it exec,
    /// closing it without one makes it exit.
    go: Option<OwnedFd>,
    /// Its cgroup, made for it (None: only its own process is counted).
    cgroup: Option<PathBuf>,
    /// Its wait status once it has exited (the waiter thread's).
    status: Arc<Mutex<Option<i32>>>,
    waiter: Option<std::thread::JoinHandle<()>>,
}

/// The program `name` runs: itself if it has a slash, else the first
/// executable file of that name in PATH.
fn program(name: &str) -> Result<PathBuf> {
    if name.contains('/') {
        return Ok(PathBuf::from(name));
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/sbin:/usr/bin:/sbin:/bin".into());
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| is_executable(p))
        .ok_or_else(|| {
            Error::usage(format!(
                "-c: no program '{name}' in PATH: give its path, or the command line as -c 'CMD ARGS'"
            ))
        })
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn c_string(s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| Error::usage(format!("-c: '{s}' holds a NUL byte")))
}

impl Command {
    /// Forks `argv`'s process, held before exec, and puts it in a cgroup
    /// of its own (where cgroup v2 can be written); the filter counts
    /// that cgroup, else the process alone, on `given`'s CPUs.
    pub(super) fn start(argv: &[String], given: &Filter) -> Result<(Command, Filter)> {
        let Some(first) = argv.first() else {
            return Err(Error::usage("-c: an empty command".to_string()));
        };
        let path = c_string(&program(first)?.to_string_lossy())?;
        let args = argv
            .iter()
            .map(|a| c_string(a))
            .collect::<Result<Vec<_>>>()?;
        let mut ptrs: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
        ptrs.push(std::ptr::null());
        let mut fds = [0; 2];
        // SAFETY: pipe2 fills the two descriptors, owned from here on.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(Error::msg(format!(
                "-c: pipe: {}",
                std::io::Error::last_os_error()
            )));
        }
        // SAFETY: both are open descriptors of this process.
        let (wait_end, go) =
            unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // SAFETY: the child calls only async-signal-safe functions (close,
        // read, execv, _exit) on memory made before the fork.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(Error::msg(format!(
                "-c: fork: {}",
                std::io::Error::last_os_error()
            )));
        }
        if pid == 0 {
            // SAFETY: see above.
            unsafe {
                libc::close(go.as_raw_fd());
                let mut b = 0u8;
                while libc::read(wait_end.as_raw_fd(), (&mut b as *mut u8).cast(), 1) < 0 {}
                if b == 1 {
                    libc::execv(path.as_ptr(), ptrs.as_ptr());
                    libc::_exit(127);
                }
                libc::_exit(126);
            }
        }
        drop(wait_end);
        let mut cmd = Command {
            pid,
            go: Some(go),
            cgroup: None,
            status: Arc::default(),
            waiter: None,
        };
        let (pids, cgroup): (Vec<u32>, Option<PathBuf>) = match cmd.own_cgroup() {
            Ok(dir) => (Vec::new(), Some(dir)),
            Err(why) => {
                eprintln!(
                    "topdown: notice: -c: no cgroup of its own for the command ({why}): its \
                     process is counted, not its children"
                );
                (vec![pid as u32], None)
            }
        };
        cmd.cgroup = cgroup;
        let f = Filter {
            cpus: given.cpus.clone(),
            ..Filter::check(&pids, cmd.cgroup.as_deref(), None)?
        };
        Ok((cmd, f))
    }

    /// A cgroup v2 directory for the command, at the top of the hierarchy
    /// (where no controller's rule forbids a process), the child moved in.
    fn own_cgroup(&self) -> std::result::Result<PathBuf, String> {
        let top = filter::cgroup2_mount().ok_or("cgroup v2 is not mounted")?;
        let dir = top.join(format!("topdown-c-{}", std::process::id()));
        fs::create_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        if let Err(e) = fs::write(dir.join("cgroup.procs"), self.pid.to_string()) {
            let _ = fs::remove_dir(&dir);
            return Err(format!("{}: {e}", dir.join("cgroup.procs").display()));
        }
        Ok(dir)
    }

    pub(super) fn pid(&self) -> u32 {
        self.pid as u32
    }

    /// Lets the command run (the program counts by now), and sets `stop`
    /// once it has exited.
    pub(super) fn release(&mut self, stop: Arc<AtomicBool>) -> Result<()> {
        let go = self
            .go
            .take()
            .ok_or_else(|| Error::msg("-c: released twice"))?;
        let pid = self.pid;
        let status = Arc::clone(&self.status);
        self.waiter = Some(std::thread::spawn(move || {
            let mut st = 0;
            // SAFETY: waits for this process's own child.
            while unsafe { libc::waitpid(pid, &mut st, 0) } < 0
                && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)
            {}
            *status.lock().unwrap_or_else(|p| p.into_inner()) = Some(st);
            stop.store(true, Ordering::Relaxed);
        }));
        // SAFETY: writes one byte from a valid buffer to an open pipe.
        if unsafe { libc::write(go.as_raw_fd(), [1u8].as_ptr().cast(), 1) } != 1 {
            return Err(Error::msg(format!(
                "-c: starting the command: {}",
                std::io::Error::last_os_error()
            )));
        }
        Ok(())
    }

    /// How it ended, in words (None: it has not).
    pub(super) fn ended(&self) -> Option<String> {
        let st = (*self.status.lock().unwrap_or_else(|p| p.into_inner()))?;
        Some(if libc::WIFEXITED(st) {
            format!("exited with status {}", libc::WEXITSTATUS(st))
        } else {
            format!("was killed by signal {}", libc::WTERMSIG(st))
        })
    }
}

impl Drop for Command {
    /// A command not let run is told to exit; one still running when the
    /// run ends (Ctrl-C, -d, an error) is ended, TERM then KILL; its
    /// cgroup is removed, what it left running moved out first.
    fn drop(&mut self) {
        let held = self.go.take().is_some();
        if !held && self.ended().is_none() {
            eprintln!(
                "topdown: the command (pid {}) still runs as the run ends: sent SIGTERM",
                self.pid
            );
        }
        if held || self.ended().is_none() {
            // SAFETY: signals this process's own child.
            unsafe { libc::kill(self.pid, if held { libc::SIGKILL } else { libc::SIGTERM }) };
        }
        match self.waiter.take() {
            Some(w) => {
                let deadline = Instant::now() + Duration::from_secs(2);
                while !w.is_finished() && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(10));
                }
                if !w.is_finished() {
                    // SAFETY: as above.
                    unsafe { libc::kill(self.pid, libc::SIGKILL) };
                }
                let _ = w.join();
            }
            None => {
                let mut st = 0;
                // SAFETY: reaps this process's own child.
                unsafe { libc::waitpid(self.pid, &mut st, 0) };
            }
        }
        if let Some(dir) = self.cgroup.take() {
            remove_cgroup(&dir);
        }
    }
}

/// Removes the command's cgroup; processes it left behind (daemons) go to
/// its parent first, as a cgroup with processes cannot be removed.
fn remove_cgroup(dir: &Path) {
    if let (Ok(procs), Some(parent)) = (fs::read_to_string(dir.join("cgroup.procs")), dir.parent())
    {
        for pid in procs.split_whitespace() {
            let _ = fs::write(parent.join("cgroup.procs"), pid);
        }
    }
    if let Err(e) = fs::remove_dir(dir) {
        eprintln!("topdown: warning: -c: cannot remove {}: {e}", dir.display());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_is_its_path_or_found_in_path() {
        assert_eq!(program("/no/such/x").unwrap(), PathBuf::from("/no/such/x"));
        let sh = program("sh").unwrap();
        assert!(sh.is_absolute() && sh.ends_with("sh"), "{}", sh.display());
        let e = program("no-such-program-here").unwrap_err().to_string();
        assert!(
            e.starts_with("-c: no program 'no-such-program-here' in PATH"),
            "{e}"
        );
        assert!(c_string("a\0b").is_err());
    }
}
