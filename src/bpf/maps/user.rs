//! A uprobe's call sites, keyed by (tgid, return address): its pending
//! calls, its resolved sites and where each process had its code.

use super::*;

impl Maps {
    /// Whether the object counts a uprobe's calls, by (tgid, return address).
    pub(crate) fn has_user_sites(&self) -> bool {
        self.user.is_some()
    }

    /// Reads a uprobe's pending table: keys of two u64s, the tgid (in the
    /// first word's low half) and the return address.
    pub(crate) fn read_upending(&self, out: &mut Pending) -> Result<()> {
        let Some((_, upending, _)) = &self.user else {
            out.clear(1, percpu::USER_KEY_WORDS);
            return Ok(());
        };
        read_batch(upending, percpu::USER_KEY_WORDS, out).map_err(|e| match e {
            BatchError::Layout(key, value) => Error::msg(format!(
                "the upending map has {key}-byte keys and {value}-byte values, not 16 and 8"
            )),
            BatchError::Bpf(e) => Error::bpf("reading the user pending sites", e),
        })
    }

    /// Records the slot of user site (tgid, ret), and returns the slot the
    /// table holds; a full table leaves the site pending (not an error).
    pub(crate) fn add_user_site(&self, tgid: u32, ret: u64, slot: u32) -> Result<u32> {
        let Some((usites, _, _)) = &self.user else {
            return Ok(slot);
        };
        let key = percpu::user_key(tgid, ret);
        match usites.update(&key, &slot.to_ne_bytes(), MapFlags::NO_EXIST) {
            Ok(()) => Ok(slot),
            Err(e) if e.kind() == libbpf_rs::ErrorKind::AlreadyExists => Ok(usites
                .lookup(&key, MapFlags::ANY)
                .ok()
                .flatten()
                .and_then(|v| Some(u32::from_ne_bytes(v.get(..4)?.try_into().ok()?)))
                .unwrap_or(slot)),
            Err(e) if e.kind() == libbpf_rs::ErrorKind::TooBig => Ok(slot),
            Err(e) => Err(Error::bpf("updating the user site table", e)),
        }
    }

    /// Removes user site (tgid, ret) from the site and pending tables (a
    /// process that has exited: nothing counts there any more).
    pub(crate) fn remove_user_site(&self, tgid: u32, ret: u64) -> Result<()> {
        let Some((usites, upending, _)) = &self.user else {
            return Ok(());
        };
        let key = percpu::user_key(tgid, ret);
        delete_quietly(usites, &key)?;
        delete_quietly(upending, &key)
    }

    /// Forgets where FUNC was in process `tgid` (exited; its sites are
    /// removed one by one, this once).
    pub(crate) fn forget_user_process(&self, tgid: u32) -> Result<()> {
        match &self.user {
            Some((_, _, ufuncs)) => delete_quietly(ufuncs, &tgid.to_ne_bytes()),
            None => Ok(()),
        }
    }

    /// Where process `tgid` had its code, as the uprobe found it at a
    /// call from a site not resolved yet (see ufuncs in uprobe.bpf.h).
    pub(crate) fn user_process(&self, tgid: u32) -> Option<ProcessCode> {
        let (_, _, ufuncs) = self.user.as_ref()?;
        let v = ufuncs.lookup(&tgid.to_ne_bytes(), MapFlags::ANY).ok()??;
        let p = plain::from_bytes::<types::td_uproc>(&v).ok()?;
        let name: Vec<u8> = p
            .exe_name
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        Some(ProcessCode {
            func_at: p.func_ip,
            start_code: p.start_code,
            end_code: p.end_code,
            exe_dev: p.exe_dev,
            exe_ino: p.exe_ino,
            exe_name: String::from_utf8_lossy(&name).into_owned(),
        })
    }
}
