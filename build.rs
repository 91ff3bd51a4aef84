use std::env;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use libbpf_cargo::SkeletonBuilder;

/// The counting programs, and the pinned files' iterators (a separate
/// object: only `topdown pin` loads it).
const SOURCES: [(&str, &str); 2] = [
    ("src/bpf/topdown.bpf.c", "topdown"),
    ("src/bpf/iter.bpf.c", "iter"),
];

/// The oldest libbpf the system-libbpf feature builds against: the oldest tried
/// that works (Debian 13's). Debian 12's 1.1 lacks bpf_prog_get_info_by_fd (1.2),
/// which libbpf-rs calls; 1.2 to 1.4 were not tried (README, Packaging).
const LIBBPF_MIN: (u32, u32) = (1, 5);

/// The arguments clang compiles the BPF C with for one architecture
/// (Rust's name for it, as vmlinux/ names its directories).
fn clang_args(manifest: &Path, arch: &str) -> Vec<OsString> {
    let define = match arch {
        "x86_64" => "x86",
        "aarch64" => "arm64",
        other => other,
    };
    vec![
        "-I".into(),
        manifest.join("vmlinux").join(arch).into_os_string(),
        format!("-D__TARGET_ARCH_{define}").into(),
        "-mcpu=v3".into(),
        "-Wall".into(),
        // The BTF line information names source files: relative ones, so that
        // the binary does not depend on where it was built (reproducible builds).
        prefix_map(manifest),
        // A warning in BPF C is often a bug the verifier will not catch
        // (an implicit declaration, a comparison that does nothing).
        "-Werror".into(),
    ]
}

/// `-ffile-prefix-map=MANIFEST=.`
fn prefix_map(manifest: &Path) -> OsString {
    let mut m = OsString::from("-ffile-prefix-map=");
    m.push(manifest);
    m.push("=.");
    m
}

fn main() {
    if !check_libbpf() {
        return;
    }
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let arch = env::var("CARGO_CFG_TARGET_ARCH").expect("CARGO_CFG_TARGET_ARCH");
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
    let clang = env::var_os("CLANG").unwrap_or_else(|| "clang".into());

    for (src, name) in SOURCES {
        SkeletonBuilder::new()
            .source(src)
            .clang(&clang)
            .clang_args(clang_args(&manifest, &arch))
            .build_and_generate(out_dir.join(format!("{name}.skel.rs")))
            .unwrap_or_else(|e| panic!("building {src}: {e:#}"));
        // The other architecture's object too, thrown away: each build checks
        // that both compile without a warning, whichever it is for.
        for other in ["x86_64", "aarch64"].into_iter().filter(|a| *a != arch) {
            SkeletonBuilder::new()
                .source(src)
                .obj(out_dir.join(format!("{name}-{other}.bpf.o")))
                .clang(&clang)
                .clang_args(clang_args(&manifest, other))
                .build()
                .unwrap_or_else(|e| panic!("building {src} for {other}: {e:#}"));
        }
    }
    for name in bpf_sources(&manifest) {
        println!("cargo:rerun-if-changed=src/bpf/{name}");
    }
    println!("cargo:rerun-if-changed=vmlinux");
    println!("cargo:rerun-if-env-changed=CLANG");
}

/// The BPF C: the SOURCES and every header beside them (the Rust files of
/// src/bpf are not watched, so that editing them does not recompile the C).
/// A new header is found too, as the #include that brings it changes the C.
fn bpf_sources(manifest: &Path) -> Vec<String> {
    let dir = manifest.join("src/bpf");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| name.ends_with(".c") || name.ends_with(".h"))
        .collect();
    names.sort();
    names
}

/// With the system-libbpf feature, checks the distribution's libbpf (pkg-config)
/// and adds its library directory; false after reporting an error.
fn check_libbpf() -> bool {
    let vendored = env::var_os("CARGO_FEATURE_VENDORED_LIBBPF").is_some();
    let system = env::var_os("CARGO_FEATURE_SYSTEM_LIBBPF").is_some();
    let error = |msg: String| {
        println!("cargo::error={msg}");
        false
    };
    match (vendored, system) {
        (true, false) => return true,
        (true, true) => {
            return error(
                "features vendored-libbpf and system-libbpf exclude each other: \
                 build with --no-default-features --features system-libbpf"
                    .into(),
            )
        }
        (false, false) => {
            return error(
                "no libbpf chosen: build with the default feature vendored-libbpf, \
                 or with --features system-libbpf"
                    .into(),
            )
        }
        (false, true) => {}
    }
    println!("cargo:rerun-if-env-changed=PKG_CONFIG");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    let pkg_config = env::var_os("PKG_CONFIG").unwrap_or_else(|| "pkg-config".into());
    let need = format!("libbpf >= {}.{}", LIBBPF_MIN.0, LIBBPF_MIN.1);
    let query = |arg: &str| {
        Command::new(&pkg_config)
            .args([arg, "libbpf"])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let Some(version) = query("--modversion") else {
        return error(format!(
            "feature system-libbpf: pkg-config finds no libbpf; it needs {need} \
             (Debian: libbpf-dev), or build the default vendored libbpf"
        ));
    };
    if !new_enough(&version, LIBBPF_MIN) {
        return error(format!(
            "feature system-libbpf needs {need}, pkg-config finds libbpf {version}: \
             install a newer libbpf-dev, or build the default vendored libbpf"
        ));
    }
    for dir in query("--libs-only-L")
        .unwrap_or_default()
        .split_whitespace()
    {
        if let Some(dir) = dir.strip_prefix("-L") {
            println!("cargo:rustc-link-search=native={dir}");
        }
    }
    true
}

/// Whether version "MAJOR.MINOR[.PATCH...]" is at least `min`.
fn new_enough(version: &str, min: (u32, u32)) -> bool {
    let mut parts = version.split('.').map(|p| p.parse::<u32>().ok());
    match (parts.next().flatten(), parts.next().flatten()) {
        (Some(major), Some(minor)) => (major, minor) >= min,
        _ => false,
    }
}
