//! Attaching a loaded object's programs beyond the counting one, and
//! pinning it: the links a `Probe` keeps.

use std::os::fd::{AsFd, AsRawFd};

use super::{counting, Companion, Mode, Owner, Probe};
use crate::error::{Error, Result};

impl Probe<'_> {
    /// Attaches the companion program (loaded only if asked for).
    pub(crate) fn attach_companion(&mut self, kind: Companion) -> Result<()> {
        let prog = self
            .companion_prog(kind)
            .ok_or_else(|| Error::msg("a pinned instance takes no companion program"))?;
        let link = match (kind, self.mode) {
            (Companion::Bare, Mode::Kprobe) => prog.attach_kprobe(false, &self.func),
            (Companion::Bare, Mode::RawTp) => prog.attach_raw_tracepoint(&self.func),
            (_, Mode::Uprobe) => {
                return Err(Error::msg(
                    "a uprobe's companion is attached with attach_uprobes",
                ))
            }
            _ => prog.attach_trace(),
        }
        .map_err(|e| Error::bpf("attaching the companion program", e))?;
        if let Owner::Loaded { companion, .. } = &mut self.owner {
            *companion = Some((kind, link));
        }
        Ok(())
    }

    /// Pins the counting program's link and the maps into `dir`, so that
    /// they outlive this process; from then on they are the pin's.
    pub(crate) fn pin(&mut self, dir: &std::path::Path) -> Result<()> {
        let Owner::Loaded {
            link: Some(link), ..
        } = &mut self.owner
        else {
            return Err(Error::msg("nothing attached to pin"));
        };
        link.pin(dir.join("link")).map_err(|e| {
            Error::bpf(
                "pinning the program's link (kprobe links need kernel 5.15 or later)",
                e,
            )
        })?;
        self.maps.pin(dir)?;
        // The program too: a reader opens it for its run statistics with
        // no CAP_SYS_ADMIN (finding it by id would take it).
        let Owner::Loaded { skel, which, .. } = &self.owner else {
            unreachable!("matched above")
        };
        let path = std::ffi::CString::new(dir.join("prog").into_os_string().into_encoded_bytes())
            .map_err(|_| Error::msg("a pin path with a NUL byte"))?;
        let fd = counting(skel, Some(self.mode), *which).as_fd().as_raw_fd();
        // SAFETY: a plain syscall wrapper, with a valid fd and path.
        if unsafe { libbpf_sys::bpf_obj_pin(fd, path.as_ptr()) } != 0 {
            let e = std::io::Error::last_os_error();
            return Err(Error::msg(format!("cannot pin the counting program: {e}")));
        }
        let Owner::Loaded {
            link: Some(link), ..
        } = &mut self.owner
        else {
            unreachable!("matched above")
        };
        // The pin holds the link now: dropping ours must not detach it.
        link.disconnect();
        Ok(())
    }

    /// Attaches the uprobe program (and the bare counter if it was loaded)
    /// at `offset` in `path`: once for every process (pid -1), or once
    /// per pid, so that other processes do not even trap.
    pub(crate) fn attach_uprobes(
        &mut self,
        path: &std::path::Path,
        offset: usize,
        pids: &[i32],
        bare: bool,
    ) -> Result<()> {
        let Owner::Loaded {
            skel,
            link,
            companion,
            more,
            ..
        } = &mut self.owner
        else {
            return Err(Error::msg("a pinned instance is attached already"));
        };
        let all = [-1];
        let pids = if pids.is_empty() { &all[..] } else { pids };
        for &pid in pids {
            let l = skel
                .progs
                .td_uprobe
                .attach_uprobe(false, pid, path, offset)
                .map_err(|e| Error::bpf("attaching the uprobe", e))?;
            if link.is_none() {
                *link = Some(l);
            } else {
                more.push(l);
            }
            if bare {
                let b = skel
                    .progs
                    .td_bare_uprobe
                    .attach_uprobe(false, pid, path, offset)
                    .map_err(|e| Error::bpf("attaching the bare uprobe counter", e))?;
                match companion {
                    None => *companion = Some((Companion::Bare, b)),
                    Some(_) => more.push(b),
                }
            }
        }
        Ok(())
    }
}
