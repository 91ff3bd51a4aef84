//! Which file a build ID names. The kernel gives a user frame as a build ID
//! and an offset in that file (BPF_F_USER_BUILD_ID), so that the frame can
//! be named after its process has gone, with the file's symbols. The files
//! are those topdown has met: a uprobe's binary, and the files mapped by the
//! processes whose stacks it has seen while they lived.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

/// A build ID as the kernel gives it: zero-padded to 20 bytes.
pub(crate) type BuildId = [u8; 20];

/// `id` zero-padded to 20 bytes; None if it is longer.
fn padded(id: &[u8]) -> Option<BuildId> {
    let mut out = [0u8; 20];
    out.get_mut(..id.len())?.copy_from_slice(id);
    Some(out)
}

/// A build ID in hex, without the padding.
pub(crate) fn hex(id: &BuildId) -> String {
    let end = id.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    id[..end].iter().map(|b| format!("{b:02x}")).collect()
}

/// The files a /proc/PID/maps text maps, each once: absolute paths only
/// (not [heap], [vdso], nor a file deleted since it was mapped).
pub(crate) fn mapped_files(maps: &str) -> Vec<PathBuf> {
    let mut seen = HashSet::new();
    maps.lines()
        // address perms offset dev inode path: the path may hold spaces.
        .filter_map(|l| l.splitn(6, char::is_whitespace).nth(5))
        .map(str::trim_start)
        .filter(|p| p.starts_with('/') && !p.ends_with(" (deleted)"))
        .filter(|p| seen.insert(*p))
        .map(PathBuf::from)
        .collect()
}

#[derive(Default)]
pub(crate) struct BuildIds {
    by_id: HashMap<BuildId, PathBuf>,
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

    /// Notes the files process `pid` maps, while it lives.
    pub(crate) fn note_process(&mut self, pid: u32) {
        if let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) {
            for p in mapped_files(&maps) {
                self.note(&p);
            }
        }
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
    fn maps_give_each_file_once_and_nothing_else() {
        let maps = "\
55d0c0000000-55d0c0001000 r--p 00000000 fe:01 131 /usr/bin/my prog
55d0c0001000-55d0c0002000 r-xp 00001000 fe:01 131 /usr/bin/my prog
55d0c1000000-55d0c1021000 rw-p 00000000 00:00 0                          [heap]
7f0000000000-7f0000001000 r-xp 00000000 fe:01 77   /usr/lib/libc.so.6
7f0000002000-7f0000003000 r-xp 00000000 fe:01 78   /tmp/gone.so (deleted)
7f0000004000-7f0000005000 rw-p 00000000 00:00 0
7ffd00000000-7ffd00002000 r-xp 00000000 00:00 0                          [vdso]
";
        assert_eq!(
            mapped_files(maps),
            vec![
                PathBuf::from("/usr/bin/my prog"),
                PathBuf::from("/usr/lib/libc.so.6")
            ]
        );
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
