//! Generates the files the package installs besides the binary: shell
//! completions from the clap definition (its commands included), and a copy of the hand-written
//! manual page.
//!
//! usage: cargo run --release --example gen-assets -- DIR
//!
//! Writes DIR/topdown.bash, DIR/_topdown (zsh), DIR/topdown.fish and
//! DIR/topdown.8, creating DIR if needed.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap_complete::{generate, Shell};

use topdown::cli::completion_command;

/// The shells completed, and the file each one's script goes to.
const COMPLETIONS: [(Shell, &str); 3] = [
    (Shell::Bash, "topdown.bash"),
    (Shell::Zsh, "_topdown"),
    (Shell::Fish, "topdown.fish"),
];

const MAN_PAGE: &str = "topdown.8";

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let (Some(dir), None) = (args.next(), args.next()) else {
        eprintln!("usage: gen-assets DIR");
        return ExitCode::from(2);
    };
    match run(Path::new(&dir)) {
        Ok(written) => {
            for path in written {
                println!("{}", path.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("gen-assets: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(dir: &Path) -> Result<Vec<PathBuf>, String> {
    fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let mut written = Vec::new();
    for (shell, name) in COMPLETIONS {
        let mut script = Vec::new();
        let mut cmd = completion_command();
        let bin = cmd.get_name().to_string();
        generate(shell, &mut cmd, bin, &mut script);
        written.push(write(dir, name, &script)?);
    }
    let man = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("man")
        .join(MAN_PAGE);
    let page = fs::read(&man).map_err(|e| format!("cannot read {}: {e}", man.display()))?;
    written.push(write(dir, MAN_PAGE, &page)?);
    Ok(written)
}

/// Writes `DIR/NAME` only if its content changes, so that a packaging run
/// over unchanged sources leaves the files (and their times) alone.
fn write(dir: &Path, name: &str, content: &[u8]) -> Result<PathBuf, String> {
    let path = dir.join(name);
    if fs::read(&path).ok().as_deref() != Some(content) {
        fs::write(&path, content).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(path)
}
