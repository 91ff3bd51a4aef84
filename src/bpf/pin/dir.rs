//! A directory of bpffs opened by descriptor: what pinning removes and
//! renames is looked up from it, never through a symlink.

use std::fs;
use std::os::fd::AsRawFd;

/// Where pinned instances live.
pub(super) const ROOT: &str = "/sys/fs/bpf/topdown";
pub(super) const BPF_FS_MAGIC: i64 = 0xcafe4a11;

/// A directory opened by descriptor, without following symlinks, so that
/// what is removed in it is in it.
pub(super) struct Dir(std::os::fd::OwnedFd);

impl Dir {
    pub(super) fn open_at(at: libc::c_int, name: &str) -> std::io::Result<Dir> {
        use std::os::fd::FromRawFd;
        let c = std::ffi::CString::new(name)
            .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
        // SAFETY: openat with a valid descriptor (or AT_FDCWD) and a
        // NUL-terminated name; the descriptor returned is owned here.
        let fd = unsafe {
            libc::openat(
                at,
                c.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: fd was just opened and is owned by nothing else.
        Ok(Dir(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) }))
    }

    /// The root, if it exists: a directory (no symlink) in bpffs.
    pub(super) fn open_root() -> std::io::Result<Option<Dir>> {
        let root = match Dir::open_at(libc::AT_FDCWD, ROOT) {
            Ok(d) => d,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(None),
            Err(e) => return Err(e),
        };
        // SAFETY: fstatfs on an open descriptor with a valid out-pointer.
        let mut st: libc::statfs = unsafe { std::mem::zeroed() };
        if unsafe { libc::fstatfs(root.0.as_raw_fd(), &mut st) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if st.f_type as i64 != BPF_FS_MAGIC {
            return Err(std::io::Error::other(format!("{ROOT} is not in bpffs")));
        }
        Ok(Some(root))
    }

    pub(super) fn open_dir(&self, name: &str) -> std::io::Result<Dir> {
        Dir::open_at(self.0.as_raw_fd(), name)
    }

    /// Whether `name` in this directory is a regular file (a pin), not
    /// following a symlink.
    pub(super) fn is_file(&self, name: &str) -> std::io::Result<bool> {
        let c = std::ffi::CString::new(name)
            .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
        // SAFETY: fstatat on an open descriptor, a NUL-terminated name and
        // a valid out-pointer.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        let rc = unsafe {
            libc::fstatat(
                self.0.as_raw_fd(),
                c.as_ptr(),
                &mut st,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(st.st_mode & libc::S_IFMT == libc::S_IFREG)
    }

    pub(super) fn unlink(&self, name: &str, dir: bool) -> std::io::Result<()> {
        let c = std::ffi::CString::new(name)
            .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
        let flags = if dir { libc::AT_REMOVEDIR } else { 0 };
        // SAFETY: unlinkat on an open descriptor and a NUL-terminated name.
        if unsafe { libc::unlinkat(self.0.as_raw_fd(), c.as_ptr(), flags) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// The names in this directory.
    pub(super) fn names(&self) -> std::io::Result<Vec<String>> {
        let path = format!("/proc/self/fd/{}", self.0.as_raw_fd());
        Ok(fs::read_dir(path)?
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect())
    }
}
