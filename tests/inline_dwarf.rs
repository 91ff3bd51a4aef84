//! Inlined callers and source files in profiles, matched through DWARF:
//! a small program built here with debug info stands in for a debug
//! vmlinux (the guest kernel has none), and its call sites are classified
//! as topdown classifies a kernel's.

use std::path::{Path, PathBuf};
use std::process::Command;

use topdown::kallsyms::Kallsyms;
use topdown::profile::{self, Profile};
use topdown::reasons::{Mapper, SourceLookup};
use topdown::symbolize::Symbols;

const FIXTURE: &str = r#"
__attribute__((noinline)) int sink(int x) { __asm__ volatile("" ::: "memory"); return x + 1; }
static inline __attribute__((always_inline)) int zap_helper(int x) { return sink(x) * 3; }
__attribute__((noinline)) int outer(int x) { return zap_helper(x) + sink(x + 7); }
int main(int argc, char **argv) { (void)argv; return outer(argc); }
"#;

fn build(dir: &Path) -> PathBuf {
    let src = dir.join("fixture.c");
    let bin = dir.join("fixture");
    std::fs::write(&src, FIXTURE).unwrap();
    let st = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args([
            "-g",
            "-O2",
            "-fno-pie",
            "-no-pie",
            "-fno-omit-frame-pointer",
            "-o",
        ])
        .arg(&bin)
        .arg(&src)
        .status()
        .expect("run cc");
    assert!(st.success(), "cc failed");
    bin
}

/// Return addresses of the calls to `sink` in `outer`, in order, and a
/// kallsyms-like text of the binary's functions (from nm).
fn call_sites(bin: &Path) -> (Vec<u64>, String) {
    let dis = Command::new("objdump")
        .args(["-d", "--no-show-raw-insn"])
        .arg(bin)
        .output()
        .expect("run objdump");
    let text = String::from_utf8_lossy(&dis.stdout);
    let mut rets = Vec::new();
    let mut in_outer = false;
    let mut want_next = false;
    for line in text.lines() {
        if line.ends_with("<outer>:") {
            in_outer = true;
            continue;
        }
        if in_outer && line.trim().is_empty() {
            break;
        }
        if !in_outer {
            continue;
        }
        let addr = line
            .split(':')
            .next()
            .and_then(|a| u64::from_str_radix(a.trim(), 16).ok());
        if want_next {
            rets.push(addr.expect("an instruction after the call"));
        }
        want_next = line.contains("call") && line.contains("<sink>");
    }
    let nm = Command::new("nm").arg(bin).output().expect("run nm");
    (rets, String::from_utf8_lossy(&nm.stdout).into_owned())
}

#[test]
fn inlined_callers_and_files_route_call_sites_through_dwarf() {
    let dir = std::env::temp_dir().join(format!("topdown-inline-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bin = build(&dir);
    let (rets, nm) = call_sites(&bin);
    assert_eq!(rets.len(), 2, "two calls to sink in outer: {rets:x?}");
    let ksyms = Kallsyms::parse(&nm);
    assert_eq!(
        ksyms.caller_of(rets[0]).map(|s| s.name.as_str()),
        Some("outer")
    );

    // zap_helper is inlined: no symbol, so only DWARF can place it.
    let p = Profile::inline("ZAP=zap_helper;FIXTURE=file:fixture.c").unwrap();
    let r = profile::resolve(&p, &ksyms).unwrap();
    assert_eq!(r.missing, ["zap_helper"]);
    assert_eq!(
        r.source_routes,
        [
            ("zap_helper".to_string(), "ZAP".to_string()),
            ("file:fixture.c".to_string(), "FIXTURE".to_string())
        ]
    );
    let (mut m, _, _) = Mapper::from_profile(&r, 64);
    let mut syms = Symbols::for_image(bin.clone());
    let loc = syms.source(rets[0] - 1).expect("a source location");
    assert!(loc.functions.iter().any(|f| f == "zap_helper"), "{loc:?}");
    let zap = m.reasons.lookup("ZAP").unwrap();
    let file = m.reasons.lookup("FIXTURE").unwrap();
    // The call inside the inlined helper, then the direct call in outer.
    assert_eq!(m.classify(&ksyms, rets[0], Some(&mut syms)), zap);
    assert_eq!(m.classify(&ksyms, rets[1], Some(&mut syms)), file);
    // Without debug info both count under outer.
    let own = m.classify(&ksyms, rets[0], None);
    assert_eq!(m.reasons.name(own), "outer");
    let _ = std::fs::remove_dir_all(&dir);
}
