//! The programs' kernel-side run statistics.

use std::os::fd::AsFd;

use super::{counting, Companion, Owner, Probe, ProgStats};

impl Probe<'_> {
    /// Run statistics of the companion program, if one is attached.
    pub(crate) fn companion_stats(&self) -> Option<(Companion, ProgStats)> {
        let Owner::Loaded {
            companion: Some((kind, _)),
            ..
        } = &self.owner
        else {
            return None;
        };
        Some((*kind, prog_stats(self.companion_prog(*kind)?.as_fd())))
    }

    /// Run statistics of the counting program (run_cnt and run_time_ns
    /// need kernel.bpf_stats_enabled=1).
    pub(crate) fn prog_stats(&self) -> ProgStats {
        match &self.owner {
            Owner::Loaded { skel, which, .. } => {
                prog_stats(counting(skel, Some(self.mode), *which).as_fd())
            }
            Owner::Pinned { prog, .. } => prog.as_ref().map_or_else(
                || {
                    unknown_stats("the pinned link's program cannot be opened");
                    ProgStats::default()
                },
                |fd| prog_stats(fd.as_fd()),
            ),
        }
    }
}

/// Says, once, that the program's run statistics cannot be read: its cost
/// and recursion misses are then unknown, not none.
fn unknown_stats(why: &str) {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
        eprintln!(
            "topdown: warning: cannot read the BPF program's run statistics ({why}): \
             its cost and recursion misses are unknown, and shown as 0"
        );
    }
}

fn prog_stats(fd: std::os::fd::BorrowedFd<'_>) -> ProgStats {
    use std::os::fd::AsRawFd;
    let mut info = libbpf_sys::bpf_prog_info::default();
    let mut len = std::mem::size_of::<libbpf_sys::bpf_prog_info>() as u32;
    // SAFETY: info is a zeroed bpf_prog_info and len its size; the kernel
    // writes at most len bytes.
    let rc = unsafe { libbpf_sys::bpf_prog_get_info_by_fd(fd.as_raw_fd(), &mut info, &mut len) };
    if rc != 0 {
        unknown_stats(&std::io::Error::from_raw_os_error(-rc).to_string());
        return ProgStats::default();
    }
    ProgStats {
        run_cnt: info.run_cnt,
        run_time_ns: info.run_time_ns,
        recursion_misses: info.recursion_misses,
    }
}
