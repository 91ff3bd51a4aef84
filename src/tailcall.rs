//! Who really called FUNC: the call instruction before a return address.
//!
//! A return address names the function the call returns into, not the one
//! that entered FUNC. When G ends in a jump to FUNC (a tail call), FUNC
//! returns straight into G's caller, whose call instruction names G, not
//! FUNC: so a direct call before the return address whose target is not
//! FUNC (nor its padding, where call-depth thunks, CFI and IBT preambles
//! live) says G jumped to FUNC. An indirect call names no target: it is a
//! tail call only where the pointer it went through can be read and is not
//! FUNC; otherwise the call may well have been to FUNC through a function
//! pointer, and the caller is named as it is.

use std::fs::File;
use std::os::unix::fs::FileExt;

use crate::kallsyms::{base_name, Kallsyms};

/// Bytes read before a return address: the longest call form decoded
/// (REX, opcode, ModRM, SIB, disp32) fits.
pub(crate) const BEFORE: usize = 8;

/// The call instruction that ends right before a return address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Decoded {
    /// x86 `call rel32` or arm64 `bl`: its target.
    pub(crate) direct: Option<u64>,
    /// An indirect call; with the address of the pointer it loads where
    /// that is fixed (x86 `call *disp32(%rip)`).
    pub(crate) indirect: Option<Option<u64>>,
}

/// Decodes the x86-64 call ending at `ret` from the `BEFORE` bytes before
/// it. Several forms can end there (a `call rel32` whose offset happens to
/// end in `ff d0` also ends like `call *%rax`): each is reported, and the
/// caller keeps the direct one only if it lands on a function.
pub(crate) fn decode_x86(b: &[u8; BEFORE], ret: u64) -> Decoded {
    let mut d = Decoded::default();
    if b[BEFORE - 5] == 0xe8 {
        let rel = i32::from_le_bytes(b[BEFORE - 4..].try_into().unwrap());
        d.direct = Some(ret.wrapping_add(rel as i64 as u64));
    }
    // `call *r/m` (FF /2), with or without a REX prefix, of every length
    // from 2 (`call *%rax`) to 8 (REX + `call *disp32(base,index)`).
    for len in 2..=BEFORE {
        let i = &b[BEFORE - len..];
        let (rex, rest) = match i[0] {
            0x40..=0x4f => (true, &i[1..]),
            _ => (false, i),
        };
        if rest.len() < 2 || rest[0] != 0xff || (rest[1] >> 3) & 7 != 2 {
            continue;
        }
        let _ = rex;
        let (md, rm) = (rest[1] >> 6, rest[1] & 7);
        let sib = md != 3 && rm == 4;
        let base5 = sib && rest.len() > 2 && rest[2] & 7 == 5;
        let disp = match md {
            0 if rm == 5 || base5 => 4,
            1 => 1,
            2 => 4,
            _ => 0,
        };
        if rest.len() != 2 + sib as usize + disp {
            continue;
        }
        let rip = md == 0 && rm == 5;
        let at = rip.then(|| {
            let rel = i32::from_le_bytes(b[BEFORE - 4..].try_into().unwrap());
            ret.wrapping_add(rel as i64 as u64)
        });
        // The fixed pointer is the better fact: keep it over a register form.
        if d.indirect.is_none() || at.is_some() {
            d.indirect = Some(at);
        }
    }
    d
}

/// Decodes the arm64 instruction before `ret`: `bl imm26`, or `blr`
/// (and its pointer-authenticating forms).
pub(crate) fn decode_arm64(insn: u32, ret: u64) -> Decoded {
    let at = ret.wrapping_sub(4);
    let mut d = Decoded::default();
    if insn & 0xfc00_0000 == 0x9400_0000 {
        // imm26, sign-extended, in words.
        let imm = ((insn << 6) as i32 >> 6) as i64 * 4;
        d.direct = Some(at.wrapping_add(imm as u64));
    } else if insn & 0xffff_fc1f == 0xd63f_0000
        || insn & 0xffff_fc1f == 0xd63f_081f
        || insn & 0xffff_fc1f == 0xd63f_0c1f
        || insn & 0xffff_f800 == 0xd73f_0800
    {
        d.indirect = Some(None);
    }
    d
}

/// What the instruction before a return address says about who called.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Caller {
    /// FUNC was called from the function the return address lies in.
    Plain,
    /// FUNC was entered by a jump from this function (its base name).
    Tail(String),
    /// An indirect call whose pointer was not FUNC: some function jumped
    /// to FUNC, which one is not known.
    IndirectTail,
    /// An indirect call: to FUNC through a pointer, or to a function that
    /// jumped to FUNC. Named by its caller.
    Indirect,
    /// No call instruction recognised (or the text could not be read).
    Unknown,
}

/// How far before a function a call may land and still be that function's:
/// its padding, where call-depth-tracking thunks and CFI/IBT preambles
/// (`__pfx_`, `__cfi_`) sit on x86; none on arm64.
fn padding(arm64: bool) -> u64 {
    if arm64 {
        0
    } else {
        32
    }
}

/// The function a call to `t` enters: the symbol starting at `t`, or the
/// one `t` is in the padding of (kallsyms lists no `__pfx_` symbol here;
/// a `__cfi_` one is the preamble of the function after it).
fn entered(ksyms: &Kallsyms, t: u64, arm64: bool) -> Option<(u64, String)> {
    let mut s = ksyms.at_or_after(t)?;
    while s.name.starts_with("__cfi_") {
        s = ksyms.at_or_after(s.addr + 1)?;
    }
    (s.addr - t <= padding(arm64)).then(|| (s.addr, s.name.clone()))
}

/// Retpoline and related thunks: a call to one is an indirect call. Newer
/// kernels give each thunk a `__pi_` alias at the same address, which
/// kallsyms may name first.
fn is_indirect_thunk(name: &str) -> bool {
    let name = name.strip_prefix("__pi_").unwrap_or(name);
    name.starts_with("__x86_indirect_thunk_")
        || name.starts_with("__x86_indirect_call_thunk_")
        || name.starts_with("__x86_indirect_its_thunk_")
}

/// Reads kernel memory: the running kernel's text.
pub(crate) trait Text: Send {
    fn read(&self, addr: u64, buf: &mut [u8]) -> bool;
}

/// Who called FUNC (at `func`) from the site returning to `ret`.
pub(crate) fn caller(
    text: &dyn Text,
    ksyms: &Kallsyms,
    func: u64,
    ret: u64,
    arm64: bool,
) -> Caller {
    let d = if arm64 {
        let mut w = [0u8; 4];
        if !text.read(ret.wrapping_sub(4), &mut w) {
            return Caller::Unknown;
        }
        decode_arm64(u32::from_le_bytes(w), ret)
    } else {
        let mut b = [0u8; BEFORE];
        if !text.read(ret.wrapping_sub(BEFORE as u64), &mut b) {
            return Caller::Unknown;
        }
        decode_x86(&b, ret)
    };
    judge(&d, text, ksyms, func, arm64)
}

/// The verdict on a decoded call to a function at `func`.
pub(crate) fn judge(
    d: &Decoded,
    text: &dyn Text,
    ksyms: &Kallsyms,
    func: u64,
    arm64: bool,
) -> Caller {
    if let Some((addr, name)) = d.direct.and_then(|t| entered(ksyms, t, arm64)) {
        if addr == func {
            return Caller::Plain;
        }
        if is_indirect_thunk(&name) {
            return Caller::Indirect;
        }
        return Caller::Tail(base_name(&name).to_string());
    }
    match d.indirect {
        Some(Some(at)) => {
            let mut p = [0u8; 8];
            if !text.read(at, &mut p) {
                return Caller::Indirect;
            }
            let target = u64::from_le_bytes(p);
            match entered(ksyms, target, arm64) {
                Some((addr, _)) if addr == func => Caller::Plain,
                Some(_) => Caller::IndirectTail,
                None => Caller::Indirect,
            }
        }
        Some(None) => Caller::Indirect,
        None => Caller::Unknown,
    }
}

/// Call sites judged so far, by verdict (--verify-caller reports them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub(crate) struct Sites {
    /// Direct calls to another function, which jumped to FUNC.
    pub(crate) tail_call_sites: u64,
    /// Indirect calls through a pointer that was not FUNC.
    pub(crate) indirect_tail_call_sites: u64,
    /// Indirect calls: to FUNC, or to a function that jumped to FUNC.
    pub(crate) indirect_sites: u64,
    /// Sites whose instruction could not be read or decoded.
    pub(crate) undecoded_sites: u64,
}

/// The tail-call check of one traced function's new call sites.
pub(crate) struct TailCalls {
    text: Box<dyn Text>,
    func: u64,
    arm64: bool,
    pub(crate) sites: Sites,
}

impl std::fmt::Debug for TailCalls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TailCalls")
            .field("func", &self.func)
            .field("sites", &self.sites)
            .finish()
    }
}

impl TailCalls {
    /// The check of calls to the function at `func`, reading the running
    /// kernel's text; None where /proc/kcore cannot be read.
    pub(crate) fn open(func: u64) -> std::io::Result<Self> {
        Ok(Self::with(
            Box::new(Kcore::open()?),
            func,
            cfg!(target_arch = "aarch64"),
        ))
    }

    pub(crate) fn with(text: Box<dyn Text>, func: u64, arm64: bool) -> Self {
        TailCalls {
            text,
            func,
            arm64,
            sites: Sites::default(),
        }
    }

    /// Who called from the new site returning to `ret`, counted.
    pub(crate) fn judge_site(&mut self, ksyms: &Kallsyms, ret: u64) -> Caller {
        let c = caller(self.text.as_ref(), ksyms, self.func, ret, self.arm64);
        let s = &mut self.sites;
        match c {
            Caller::Tail(_) => s.tail_call_sites += 1,
            Caller::IndirectTail => s.indirect_tail_call_sites += 1,
            Caller::Indirect => s.indirect_sites += 1,
            Caller::Unknown => s.undecoded_sites += 1,
            Caller::Plain => {}
        }
        c
    }
}

/// The running kernel's memory through /proc/kcore (an ELF core file).
pub(crate) struct Kcore {
    file: File,
    /// (virtual address, file offset, size) of each loadable segment.
    segs: Vec<(u64, u64, u64)>,
}

impl Kcore {
    pub(crate) fn open() -> std::io::Result<Self> {
        let file = File::open("/proc/kcore")?;
        let mut eh = [0u8; 64];
        file.read_exact_at(&mut eh, 0)?;
        let bad = || std::io::Error::new(std::io::ErrorKind::InvalidData, "not an ELF64 core");
        if &eh[..4] != b"\x7fELF" || eh[4] != 2 {
            return Err(bad());
        }
        let u16_at = |o: usize| u16::from_le_bytes([eh[o], eh[o + 1]]) as u64;
        let phoff = u64::from_le_bytes(eh[0x20..0x28].try_into().unwrap());
        let (phentsize, phnum) = (u16_at(0x36), u16_at(0x38));
        if phentsize < 56 {
            return Err(bad());
        }
        let mut segs = Vec::new();
        for i in 0..phnum {
            let mut ph = [0u8; 56];
            file.read_exact_at(&mut ph, phoff + i * phentsize)?;
            let w = |o: usize| u64::from_le_bytes(ph[o..o + 8].try_into().unwrap());
            if u32::from_le_bytes(ph[..4].try_into().unwrap()) == 1 {
                segs.push((w(16), w(8), w(32)));
            }
        }
        Ok(Kcore { file, segs })
    }
}

impl Text for Kcore {
    fn read(&self, addr: u64, buf: &mut [u8]) -> bool {
        let len = buf.len() as u64;
        self.segs
            .iter()
            .find(|&&(va, _, sz)| addr >= va && addr.wrapping_sub(va) + len <= sz)
            .is_some_and(|&(va, off, _)| self.file.read_exact_at(buf, off + (addr - va)).is_ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RET: u64 = 0xffff_ffff_8100_1000;

    /// `bytes` ending at RET, padded in front with int3.
    fn x86(bytes: &[u8]) -> Decoded {
        let mut b = [0xccu8; BEFORE];
        b[BEFORE - bytes.len()..].copy_from_slice(bytes);
        decode_x86(&b, RET)
    }

    #[test]
    fn x86_direct_calls() {
        // call rel32 forward and backward
        assert_eq!(x86(&[0xe8, 0x10, 0, 0, 0]).direct, Some(RET + 0x10));
        assert_eq!(
            x86(&[0xe8, 0xf0, 0xff, 0xff, 0xff]).direct,
            Some(RET - 0x10)
        );
        assert_eq!(x86(&[0xe8, 0x10, 0, 0, 0]).indirect, None);
        // not a call: a jmp rel32, a nop
        assert_eq!(x86(&[0xe9, 0x10, 0, 0, 0]), Decoded::default());
        assert_eq!(x86(&[0x0f, 0x1f, 0x44, 0, 0]), Decoded::default());
    }

    #[test]
    fn x86_indirect_calls() {
        // call *%rax, call *%r11 (REX.B), lfence; call *%rax (a patched retpoline)
        assert_eq!(x86(&[0xff, 0xd0]).indirect, Some(None));
        assert_eq!(x86(&[0x41, 0xff, 0xd3]).indirect, Some(None));
        assert_eq!(x86(&[0x0f, 0xae, 0xe8, 0xff, 0xd0]).indirect, Some(None));
        // call *0x8(%rax) (disp8), call *0x100(%rbx) (disp32), call *(%rax)
        assert_eq!(x86(&[0xff, 0x50, 0x08]).indirect, Some(None));
        assert_eq!(x86(&[0xff, 0x93, 0, 1, 0, 0]).indirect, Some(None));
        assert_eq!(x86(&[0xff, 0x10]).indirect, Some(None));
        // call *0x10(%rax,%rcx,8) (SIB, disp8)
        assert_eq!(x86(&[0xff, 0x54, 0xc8, 0x10]).indirect, Some(None));
        // call *0x20(%rip): the pointer's address is known
        assert_eq!(
            x86(&[0xff, 0x15, 0x20, 0, 0, 0]).indirect,
            Some(Some(RET + 0x20))
        );
        // jmp *%rax (FF /4) is no call
        assert_eq!(x86(&[0xff, 0xe0]).indirect, None);
        // A retpoline thunk call decodes as direct; judge() names it.
        assert!(x86(&[0xe8, 0, 0, 0, 0]).direct.is_some());
        // call rel32 whose offset ends like call *%rax: both reported
        let d = x86(&[0xe8, 0x11, 0x22, 0xff, 0xd0]);
        assert!(d.direct.is_some() && d.indirect == Some(None));
    }

    #[test]
    fn arm64_calls() {
        let ret = 0xffff_8000_8001_0000u64;
        // bl +0x100 from ret-4; bl -0x8
        assert_eq!(decode_arm64(0x9400_0040, ret).direct, Some(ret - 4 + 0x100));
        assert_eq!(decode_arm64(0x97ff_fffe, ret).direct, Some(ret - 4 - 8));
        // blr x8, blraaz x8
        assert_eq!(decode_arm64(0xd63f_0100, ret).indirect, Some(None));
        assert_eq!(decode_arm64(0xd63f_091f, ret).indirect, Some(None));
        // b (no link) and br x8 are no calls
        assert_eq!(decode_arm64(0x1400_0040, ret), Decoded::default());
        assert_eq!(decode_arm64(0xd61f_0100, ret), Decoded::default());
    }

    /// Kernel memory as a map of 8-byte words.
    struct Words(Vec<(u64, u64)>);
    impl Text for Words {
        fn read(&self, addr: u64, buf: &mut [u8]) -> bool {
            match self.0.iter().find(|(a, _)| *a == addr) {
                Some((_, v)) if buf.len() == 8 => {
                    buf.copy_from_slice(&v.to_le_bytes());
                    true
                }
                _ => false,
            }
        }
    }

    const KSYMS: &str = "\
ffffffff81000000 T caller_a
ffffffff81000100 T __pfx_func
ffffffff81000110 T func
ffffffff81000110 T func_alias
ffffffff81000200 T __cfi_jumper
ffffffff81000210 T jumper.isra.0
ffffffff81000300 T __x86_indirect_thunk_rax
ffffffff81000340 T __pi___x86_indirect_thunk_rdx
ffffffff81000400 T other
";

    #[test]
    fn judging_direct_and_indirect_calls() {
        let k = Kallsyms::parse(KSYMS);
        let func = 0xffff_ffff_8100_0110;
        let none = Words(vec![]);
        let j = |direct: Option<u64>, indirect: Option<Option<u64>>, text: &Words| {
            judge(&Decoded { direct, indirect }, text, &k, func, false)
        };
        assert_eq!(j(Some(func), None, &none), Caller::Plain);
        // FUNC's padding (a call-depth thunk, __pfx_): still FUNC
        assert_eq!(j(Some(func - 16), None, &none), Caller::Plain);
        // Another function, or its CFI preamble: a tail call from it
        assert_eq!(
            j(Some(0xffff_ffff_8100_0210), None, &none),
            Caller::Tail("jumper".into())
        );
        assert_eq!(
            j(Some(0xffff_ffff_8100_0200), None, &none),
            Caller::Tail("jumper".into())
        );
        // A retpoline thunk: indirect, named by its caller
        assert_eq!(
            j(Some(0xffff_ffff_8100_0300), None, &none),
            Caller::Indirect
        );
        // ... also under its position-independent alias (7.x)
        assert_eq!(
            j(Some(0xffff_ffff_8100_0340), None, &none),
            Caller::Indirect
        );
        // A direct decode into the middle of a function is a misread: the
        // indirect form behind it counts.
        assert_eq!(
            j(Some(0xffff_ffff_8100_0050), Some(None), &none),
            Caller::Indirect
        );
        assert_eq!(j(Some(0xffff_ffff_8100_0050), None, &none), Caller::Unknown);
        // call *p(%rip): FUNC's address there is a plain call; another
        // function's is a tail call; unreadable stays indirect.
        let p = 0xffff_ffff_8200_0000;
        let to = |v: u64| Words(vec![(p, v)]);
        assert_eq!(j(None, Some(Some(p)), &to(func)), Caller::Plain);
        assert_eq!(
            j(None, Some(Some(p)), &to(0xffff_ffff_8100_0400)),
            Caller::IndirectTail
        );
        assert_eq!(j(None, Some(Some(p)), &none), Caller::Indirect);
        assert_eq!(j(None, None, &none), Caller::Unknown);
        // arm64 has no padding: a bl 16 bytes before FUNC is another function's
        assert_eq!(
            judge(
                &Decoded {
                    direct: Some(func),
                    indirect: None
                },
                &none,
                &k,
                func,
                true
            ),
            Caller::Plain
        );
    }
}
