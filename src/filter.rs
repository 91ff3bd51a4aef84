//! The --pid, --cgroup and --cpu filters: checked against this machine
//! before anything is loaded (a filter that can never match is an error),
//! described for the header and the reports, and watched while running (a
//! process that exits stops counting; its pid is taken out of the filter
//! so that a new process given the same pid is not counted).

use std::fs;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::bpf::{limits::MAX_CPUS, Filters};
use crate::error::{Error, Result};

const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;
const CGROUP_SUPER_MAGIC: i64 = 0x0027_e0eb;

/// A process of the --pid filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Proc {
    /// Its pid: the thread group's id, as the kernel's tgid.
    pub(crate) pid: u32,
    pub(crate) comm: String,
    /// Its start time (clock ticks since boot, /proc/PID/stat): tells it
    /// from a later process given the same pid.
    start: u64,
}

/// The --cgroup filter: a cgroup v2 directory, open.
#[derive(Debug, Clone)]
pub(crate) struct Cgroup {
    pub(crate) path: PathBuf,
    /// Put into the BPF side's cgroup array.
    pub(crate) fd: Arc<OwnedFd>,
}

/// Which calls count: all, unless a filter is set.
#[derive(Debug, Clone, Default)]
pub(crate) struct Filter {
    /// Empty: every process.
    pub(crate) pids: Vec<Proc>,
    pub(crate) cgroup: Option<Cgroup>,
    /// None: every CPU. Sorted, no duplicates.
    pub(crate) cpus: Option<Vec<u32>>,
}

/// A CPU list as taskset(1) and cpusets write it: `0-3,8,10-11`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuList(pub Vec<u32>);

/// Parses a CPU list (clap value parser).
pub(crate) fn cpu_list(s: &str) -> std::result::Result<CpuList, String> {
    let bad = || format!("'{s}' is not a CPU list (such as 0-3,8)");
    let mut cpus = Vec::new();
    for part in s.split(',') {
        let part = part.trim();
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (a.trim(), b.trim()),
            None => (part, part),
        };
        let lo: u32 = lo.parse().map_err(|_| bad())?;
        let hi: u32 = hi.parse().map_err(|_| bad())?;
        if lo > hi || hi - lo >= MAX_CPUS {
            return Err(bad());
        }
        cpus.extend(lo..=hi);
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(CpuList(cpus))
}

/// CPUs as a compact list: `0-3,8`.
pub(crate) fn cpus_text(cpus: &[u32]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        parts.push(if j == i {
            cpus[i].to_string()
        } else {
            format!("{}-{}", cpus[i], cpus[j])
        });
        i = j + 1;
    }
    parts.join(",")
}

/// The value of `key:` in a /proc/PID/status text.
fn status_field<'a>(status: &'a str, key: &str) -> Option<&'a str> {
    status.lines().find_map(|l| {
        l.strip_prefix(key)
            .and_then(|v| v.strip_prefix(':'))
            .map(str::trim)
    })
}

/// The start time in a /proc/PID/stat text (field 22, counted after the
/// command name, which may hold spaces and parentheses).
fn start_time(stat: &str) -> Option<u64> {
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(19)?.parse().ok()
}

fn read_proc(pid: u32) -> Option<(String, String)> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    Some((status, stat))
}

impl Proc {
    /// The running process `pid`, or why it cannot be filtered on.
    fn find(pid: u32) -> Result<Proc> {
        let (status, stat) =
            read_proc(pid).ok_or_else(|| Error::msg(format!("--pid {pid}: no such process")))?;
        let tgid: Option<u32> = status_field(&status, "Tgid").and_then(|v| v.parse().ok());
        if let Some(tgid) = tgid.filter(|&t| t != pid) {
            return Err(Error::msg(format!(
                "--pid {pid}: a thread of process {tgid}; --pid takes processes (thread groups): give {tgid}"
            )));
        }
        Ok(Proc {
            pid,
            comm: status_field(&status, "Name").unwrap_or("?").to_string(),
            start: start_time(&stat).unwrap_or(0),
        })
    }

    /// Whether the process still runs (and its pid is not a newer one's).
    pub(crate) fn alive(&self) -> bool {
        // Read every poll for each process: its stat only, not its status.
        fs::read_to_string(format!("/proc/{}/stat", self.pid))
            .is_ok_and(|stat| start_time(&stat).unwrap_or(0) == self.start)
    }
}

fn fs_type(path: &Path) -> std::io::Result<i64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: statfs with a valid path and out-pointer.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(st.f_type as i64)
}

/// Where cgroup v2 is mounted (the first such mount in /proc/self/mounts).
pub(crate) fn cgroup2_mount() -> Option<PathBuf> {
    let mounts = fs::read_to_string("/proc/self/mounts").ok()?;
    mounts.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.len() > 2 && f[2] == "cgroup2").then(|| PathBuf::from(f[1].replace("\\040", " ")))
    })
}

impl Cgroup {
    /// The cgroup v2 directory `given`: a path, or one relative to where
    /// cgroup v2 is mounted (`system.slice/foo.service`).
    fn open(given: &Path) -> Result<Cgroup> {
        let fail = |why: String| Error::msg(format!("--cgroup {}: {why}", given.display()));
        let path = if given.exists() {
            given.to_path_buf()
        } else {
            let rel = given.strip_prefix("/").unwrap_or(given);
            match cgroup2_mount().map(|m| m.join(rel)).filter(|p| p.exists()) {
                Some(p) => p,
                None => return Err(fail("no such cgroup directory".into())),
            }
        };
        if !path.is_dir() {
            return Err(fail("not a directory".into()));
        }
        match fs_type(&path) {
            Ok(CGROUP2_SUPER_MAGIC) => {}
            Ok(CGROUP_SUPER_MAGIC) => {
                return Err(fail(
                    "a cgroup v1 directory; --cgroup takes cgroup v2 ones".into(),
                ))
            }
            Ok(_) => return Err(fail("not a cgroup v2 directory".into())),
            Err(e) => return Err(fail(e.to_string())),
        }
        use std::os::unix::ffi::OsStrExt;
        let c = std::ffi::CString::new(path.as_os_str().as_bytes())
            .map_err(|_| fail("not a path".into()))?;
        // SAFETY: open with a valid path; the fd is checked, then owned.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(fail(std::io::Error::last_os_error().to_string()));
        }
        Ok(Cgroup {
            path,
            // SAFETY: a new fd we own.
            fd: Arc::new(unsafe { OwnedFd::from_raw_fd(fd) }),
        })
    }
}

impl Filter {
    /// The filters asked for, checked against this machine: every pid a
    /// running process, the cgroup a cgroup v2 directory, every CPU one
    /// of this machine's possible CPUs.
    pub(crate) fn check(
        pids: &[u32],
        cgroup: Option<&Path>,
        cpus: Option<&CpuList>,
    ) -> Result<Filter> {
        let mut distinct: Vec<u32> = Vec::new();
        for &pid in pids {
            if !distinct.contains(&pid) {
                distinct.push(pid);
            }
        }
        let max = crate::bpf::limits::MAX_PIDS;
        if distinct.len() > max {
            return Err(Error::msg(format!(
                "--pid: {} processes given, at most {max} can be filtered on \
                 (put them in a cgroup and give --cgroup instead)",
                distinct.len()
            )));
        }
        let procs = distinct
            .into_iter()
            .map(Proc::find)
            .collect::<Result<Vec<Proc>>>()?;
        let cpus = match cpus {
            Some(list) => {
                let possible = libbpf_rs::num_possible_cpus()
                    .map_err(|e| Error::bpf("counting the possible CPUs", e))?
                    as u32;
                check_cpus(&list.0, possible)?;
                Some(list.0.clone())
            }
            None => None,
        };
        Ok(Filter {
            pids: procs,
            cgroup: cgroup.map(Cgroup::open).transpose()?,
            cpus,
        })
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.pids.is_empty() && self.cgroup.is_none() && self.cpus.is_none()
    }

    /// The pids, as the BPF side's map holds them.
    pub(crate) fn tgids(&self) -> Vec<u32> {
        self.pids.iter().map(|p| p.pid).collect()
    }

    /// Which calls are counted, in words: `of pid 12 (thp), in cgroup /x
    /// or below, on CPUs 0-1`; None without a filter.
    pub(crate) fn describe(&self) -> Option<String> {
        let mut parts = Vec::new();
        if !self.pids.is_empty() {
            let procs: Vec<String> = self
                .pids
                .iter()
                .map(|p| format!("{} ({})", p.pid, p.comm))
                .collect();
            let s = if procs.len() == 1 { "" } else { "s" };
            parts.push(format!("of pid{s} {}", procs.join(", ")));
        }
        if let Some(c) = &self.cgroup {
            parts.push(format!("in cgroup {} or below", c.path.display()));
        }
        if let Some(cpus) = &self.cpus {
            let s = if cpus.len() == 1 { "" } else { "s" };
            parts.push(format!("on CPU{s} {}", cpus_text(cpus)));
        }
        (!parts.is_empty()).then(|| parts.join(", "))
    }

    /// The filter as the BPF side takes it.
    pub(crate) fn for_bpf(&self) -> Filters {
        Filters {
            tgids: self.tgids(),
            cgroup: self.cgroup.as_ref().map(|c| c.fd.clone()),
            cpus: self.cpus.clone(),
            syscall: None,
        }
    }
}

fn check_cpus(cpus: &[u32], possible: u32) -> Result<()> {
    if let Some(&c) = cpus.iter().find(|&&c| c >= possible.min(MAX_CPUS)) {
        let why = if c >= MAX_CPUS && possible > MAX_CPUS {
            format!("beyond the {MAX_CPUS} CPUs a filter can name")
        } else {
            format!("no such CPU (this machine has CPUs 0-{})", possible - 1)
        };
        return Err(Error::msg(format!("--cpu {c}: {why}")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_parse_as_taskset_writes_them() {
        assert_eq!(cpu_list("0-3,8,2").unwrap().0, [0, 1, 2, 3, 8]);
        assert_eq!(cpu_list(" 1 ").unwrap().0, [1]);
        for bad in ["", "x", "3-1", "1,", "-1", "0-99999"] {
            assert!(cpu_list(bad).is_err(), "{bad}");
        }
        assert_eq!(cpus_text(&[0, 1, 2, 3, 8, 10, 11]), "0-3,8,10-11");
        assert_eq!(cpus_text(&[5]), "5");
    }

    #[test]
    fn cpus_beyond_the_machine_are_refused() {
        assert!(check_cpus(&[0, 1], 2).is_ok());
        assert_eq!(
            check_cpus(&[0, 2], 2).unwrap_err().to_string(),
            "--cpu 2: no such CPU (this machine has CPUs 0-1)"
        );
        assert_eq!(
            check_cpus(&[MAX_CPUS], MAX_CPUS + 8)
                .unwrap_err()
                .to_string(),
            format!("--cpu {MAX_CPUS}: beyond the {MAX_CPUS} CPUs a filter can name")
        );
    }

    #[test]
    fn proc_texts_are_read() {
        let status = "Name:\tthp\nTgid:\t42\nPid:\t43\n";
        assert_eq!(status_field(status, "Tgid"), Some("42"));
        assert_eq!(status_field(status, "Name"), Some("thp"));
        let stat = "43 (a b) c) S 1 43 43 0 -1 4194560 97 0 0 0 0 0 0 0 20 0 1 0 12345 2269184 180";
        assert_eq!(start_time(stat), Some(12345));
    }

    #[test]
    fn this_process_is_found_and_missing_ones_are_refused() {
        let me = std::process::id();
        let f = Filter::check(&[me, me], None, None).unwrap();
        assert_eq!(f.tgids(), [me]);
        assert!(f.pids[0].alive());
        assert!(f.describe().unwrap().starts_with(&format!("of pid {me} (")));
        let many: Vec<u32> = (1..=65).collect();
        assert_eq!(
            Filter::check(&many, None, None).unwrap_err().to_string(),
            "--pid: 65 processes given, at most 64 can be filtered on \
             (put them in a cgroup and give --cgroup instead)"
        );
        // The limit is on processes, not on how often one is named.
        assert_eq!(Filter::check(&[me; 100], None, None).unwrap().tgids(), [me]);
        // pid_max is at most 2^22: this one never exists.
        let e = Filter::check(&[1 << 23], None, None).unwrap_err();
        assert_eq!(e.to_string(), format!("--pid {}: no such process", 1 << 23));
        // A thread that is not the leader names its process.
        let (tx, rx) = std::sync::mpsc::channel();
        let t = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            tx.send(unsafe { libc::gettid() } as u32).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(200));
        });
        let tid = rx.recv().unwrap();
        let e = Filter::check(&[tid], None, None).unwrap_err().to_string();
        t.join().unwrap();
        assert_eq!(
            e,
            format!("--pid {tid}: a thread of process {me}; --pid takes processes (thread groups): give {me}")
        );
    }

    #[test]
    fn a_cgroup_must_be_a_cgroup_v2_directory() {
        let e = |p: &str| {
            Filter::check(&[], Some(Path::new(p)), None)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            e("/no/such/dir"),
            "--cgroup /no/such/dir: no such cgroup directory"
        );
        assert_eq!(e("/proc"), "--cgroup /proc: not a cgroup v2 directory");
        assert_eq!(
            e("/proc/self/stat"),
            "--cgroup /proc/self/stat: not a directory"
        );
        match cgroup2_mount() {
            Some(m) => {
                let f = Filter::check(&[], Some(&m), None).unwrap();
                assert_eq!(f.cgroup.unwrap().path, m);
            }
            None => crate::testing::skip("its cgroup v2 case: no cgroup v2 mount"),
        }
        assert!(Filter::default().describe().is_none());
    }
}
