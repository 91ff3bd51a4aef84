//! Which file a build ID names. The kernel gives a user frame as a build ID
//! and an offset in that file (BPF_F_USER_BUILD_ID), so that the frame can
//! be named after its process has gone, with the file's symbols. The files
//! are those topdown has met: a uprobe's binary, and the files mapped by the
//! processes whose stacks it has seen while they lived.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};

/// A build ID as the kernel gives it: zero-padded to 20 bytes.
pub(crate) type BuildId = [u8; 20];

/// `id` zero-padded to 20 bytes; None if it is longer.
pub(crate) fn padded(id: &[u8]) -> Option<BuildId> {
    let mut out = [0u8; 20];
    out.get_mut(..id.len())?.copy_from_slice(id);
    Some(out)
}

/// A build ID in hex, without the padding.
pub(crate) fn hex(id: &BuildId) -> String {
    let end = id.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    id[..end].iter().map(|b| format!("{b:02x}")).collect()
}

/// Processes whose maps are kept: a run that meets many short-lived ones
/// keeps a bounded part of them (their files' build IDs stay known).
pub(crate) const MAX_PROCESSES: usize = 1024;

/// A file-backed mapping of a process: addresses [start, end) map the file
/// from `offset` on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mapping {
    pub(crate) start: u64,
    pub(crate) end: u64,
    pub(crate) offset: u64,
    pub(crate) path: PathBuf,
}

/// The file-backed mappings of a /proc/PID/maps text: absolute paths only
/// (not [heap], [vdso], nor a file deleted since it was mapped).
pub(crate) fn mappings(maps: &str) -> Vec<Mapping> {
    maps.lines()
        .filter_map(|l| {
            // address perms offset dev inode path: the path may hold spaces.
            let mut f = l.splitn(6, char::is_whitespace);
            let (range, _, offset) = (f.next()?, f.next()?, f.next()?);
            let path = f.nth(2)?.trim_start();
            if !path.starts_with('/') || path.ends_with(" (deleted)") {
                return None;
            }
            let (start, end) = range.split_once('-')?;
            Some(Mapping {
                start: u64::from_str_radix(start, 16).ok()?,
                end: u64::from_str_radix(end, 16).ok()?,
                offset: u64::from_str_radix(offset, 16).ok()?,
                path: PathBuf::from(path),
            })
        })
        .collect()
}

#[derive(Default)]
pub(crate) struct BuildIds {
    by_id: HashMap<BuildId, PathBuf>,
    /// Each process's file-backed mappings, as read while it lived: of
    /// the last MAX_PROCESSES processes noted, oldest first in `order`.
    maps: HashMap<u32, Vec<Mapping>>,
    order: VecDeque<u32>,
    /// Paths noted, read or not.
    known: HashSet<PathBuf>,
    /// Paths noted whose build IDs have not been read: read when a build
    /// ID is looked for and not found, so that noting a process costs
    /// only its maps (the file outlives the process; its maps do not).
    unread: Vec<PathBuf>,
}

impl BuildIds {
    /// Notes the ELF file at `path`, once per path, to be read by `path`.
    pub(crate) fn note(&mut self, path: &Path) {
        if self.known.insert(path.to_path_buf()) {
            self.unread.push(path.to_path_buf());
        }
    }

    /// Reads the build IDs of the files noted since the last read. A path
    /// a process in another mount namespace mapped may name another file
    /// here, or none: it is then filed under that file's own build ID, or
    /// not at all, never under the process's.
    fn read_noted(&mut self) {
        for path in std::mem::take(&mut self.unread) {
            if let Ok(Some(id)) = blazesym::helper::read_elf_build_id(&path) {
                if let Some(id) = padded(&id) {
                    // Its own name, not a link's: busybox's applets are links.
                    let file = std::fs::canonicalize(&path).unwrap_or(path);
                    self.by_id.entry(id).or_insert(file);
                }
            }
        }
    }

    /// Notes the files process `pid` maps, and where, while it lives.
    pub(crate) fn note_process(&mut self, pid: u32) {
        if let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) {
            let maps = mappings(&maps);
            for m in &maps {
                self.note(&m.path);
            }
            if self.maps.insert(pid, maps).is_none() {
                self.order.push_back(pid);
            }
            while self.order.len() > MAX_PROCESSES {
                if let Some(old) = self.order.pop_front() {
                    self.maps.remove(&old);
                }
            }
        }
    }

    /// The file address `addr` of process `pid` lay in, and its offset
    /// there, from the process's maps as read while it lived.
    pub(crate) fn locate(&self, pid: u32, addr: u64) -> Option<(&Path, u64)> {
        let m = self
            .maps
            .get(&pid)?
            .iter()
            .find(|m| (m.start..m.end).contains(&addr))?;
        Some((&m.path, m.offset + (addr - m.start)))
    }

    /// Notes the program a process named `comm` may have run, found in
    /// `path` (a PATH value) as the shell would: for a process that had
    /// gone before its maps could be read. Its build ID tells whether it
    /// is the one.
    pub(crate) fn note_command(&mut self, comm: &str, path: &str) {
        if comm.is_empty() || comm.contains('/') {
            return;
        }
        for dir in path.split(':').filter(|d| d.starts_with('/')) {
            let p = Path::new(dir).join(comm);
            if p.is_file() {
                self.note(&p);
            }
        }
    }

    /// A file topdown has met named `name` (its last component) whose
    /// inode is `ino`: a gone process's program, as the uprobe saw it.
    /// The device is not compared: a btrfs subvolume's files show another
    /// than their superblock's, which the kernel side reads.
    pub(crate) fn find(&self, name: &str, ino: u64) -> Option<PathBuf> {
        use std::os::unix::fs::MetadataExt;
        self.known
            .iter()
            .filter(|p| p.file_name().is_some_and(|n| n == name))
            .find(|p| std::fs::metadata(p).is_ok_and(|m| m.ino() == ino))
            .cloned()
    }

    /// The file of build ID `id`, if topdown has met it.
    pub(crate) fn path(&mut self, id: &BuildId) -> Option<&Path> {
        if !self.by_id.contains_key(id) {
            self.read_noted();
        }
        self.by_id.get(id).map(PathBuf::as_path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_give_file_mappings_only() {
        let maps = "\
55d0c0000000-55d0c0001000 r--p 00000000 fe:01 131 /usr/bin/my prog
55d0c0001000-55d0c0002000 r-xp 00001000 fe:01 131 /usr/bin/my prog
55d0c1000000-55d0c1021000 rw-p 00000000 00:00 0                          [heap]
7f0000000000-7f0000001000 r-xp 00028000 fe:01 77   /usr/lib/libc.so.6
7f0000002000-7f0000003000 r-xp 00000000 fe:01 78   /tmp/gone.so (deleted)
7f0000004000-7f0000005000 rw-p 00000000 00:00 0
7ffd00000000-7ffd00002000 r-xp 00000000 00:00 0                          [vdso]
";
        let m = mappings(maps);
        let paths: Vec<&str> = m.iter().map(|m| m.path.to_str().unwrap()).collect();
        assert_eq!(
            paths,
            ["/usr/bin/my prog", "/usr/bin/my prog", "/usr/lib/libc.so.6"]
        );
        assert_eq!(
            m[2],
            Mapping {
                start: 0x7f00_0000_0000,
                end: 0x7f00_0000_1000,
                offset: 0x28000,
                path: "/usr/lib/libc.so.6".into()
            }
        );
        let mut ids = BuildIds::default();
        ids.maps.insert(7, m);
        assert_eq!(
            ids.locate(7, 0x7f00_0000_0010),
            Some((Path::new("/usr/lib/libc.so.6"), 0x28010))
        );
        assert_eq!(ids.locate(7, 0x7f00_0000_1000), None);
        assert_eq!(ids.locate(8, 0x7f00_0000_0010), None);
    }

    #[test]
    fn the_maps_of_only_so_many_processes_are_kept() {
        // This test's own process, noted under as many pids as are kept,
        // and one more: the first is let go.
        let mut ids = BuildIds::default();
        let own = std::fs::read_to_string("/proc/self/maps").unwrap();
        // (Above any real pid: pid_max is at most 2^22.)
        let first = 1 << 30;
        for pid in first..=first + MAX_PROCESSES as u32 {
            ids.maps.insert(pid, mappings(&own));
            ids.order.push_back(pid);
        }
        ids.note_process(std::process::id());
        assert_eq!(ids.maps.len(), MAX_PROCESSES);
        assert!(!ids.maps.contains_key(&first) && !ids.maps.contains_key(&(first + 1)));
        assert!(ids.maps.contains_key(&std::process::id()));
    }

    #[test]
    fn a_command_is_looked_for_along_the_path() {
        let exe = std::env::current_exe().unwrap();
        let (dir, name) = (exe.parent().unwrap(), exe.file_name().unwrap());
        let id = blazesym::helper::read_elf_build_id(&exe).unwrap().unwrap();
        let mut ids = BuildIds::default();
        ids.note_command(
            name.to_str().unwrap(),
            &format!("/nonexistent:relative:{}", dir.display()),
        );
        assert_eq!(ids.path(&padded(&id).unwrap()), Some(exe.as_path()));
        let mut ids = BuildIds::default();
        ids.note_command(
            &format!("../{}", name.to_str().unwrap()),
            &dir.join("x").display().to_string(),
        );
        assert!(ids.known.is_empty());
    }

    #[test]
    fn build_ids_are_padded_and_shown_without_the_padding() {
        let id = padded(&[0xab, 0x01, 0x00, 0x02]).unwrap();
        assert_eq!(id[..5], [0xab, 0x01, 0x00, 0x02, 0x00]);
        assert_eq!(hex(&id), "ab010002");
        assert!(padded(&[1; 21]).is_none());
    }

    #[test]
    fn a_file_is_found_by_its_build_id() {
        // This test's own executable: Debian's toolchain links a build ID
        // in (gcc's --enable-linker-build-id), as it does for every binary
        // topdown meets.
        let exe = std::env::current_exe().unwrap();
        let id = blazesym::helper::read_elf_build_id(&exe).unwrap();
        let id = padded(&id.expect("the test binary has no build ID")).unwrap();
        let mut ids = BuildIds::default();
        ids.note(&exe);
        assert_eq!(ids.path(&id), Some(exe.as_path()));
        assert_eq!(ids.path(&[0x5a; 20]), None);
    }
}
