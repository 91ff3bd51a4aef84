use std::env;
use std::ffi::OsStr;
use std::path::PathBuf;

use libbpf_cargo::SkeletonBuilder;

const SRC: &str = "src/bpf/topdown.bpf.c";

fn main() {
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let arch = env::var("CARGO_CFG_TARGET_ARCH").expect("CARGO_CFG_TARGET_ARCH");
    let vmlinux = manifest.join("vmlinux").join(&arch);
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR")).join("topdown.skel.rs");
    let clang = env::var_os("CLANG").unwrap_or_else(|| "clang".into());

    SkeletonBuilder::new()
        .source(SRC)
        .clang(clang)
        .clang_args([
            OsStr::new("-I"),
            vmlinux.as_os_str(),
            OsStr::new("-mcpu=v3"),
            OsStr::new("-Wall"),
        ])
        .build_and_generate(&out)
        .unwrap_or_else(|e| panic!("building {SRC}: {e:#}"));
    println!("cargo:rerun-if-changed=src/bpf");
    println!("cargo:rerun-if-changed=vmlinux");
    println!("cargo:rerun-if-env-changed=CLANG");
}
