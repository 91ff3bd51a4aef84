//! The shell completions, generated as examples/gen-assets.rs generates
//! the packaged ones, and run through bash's own programmable completion:
//! the function `complete -p topdown` names, called as bash calls it on
//! <TAB>.

use std::process::Command;

use clap_complete::{generate, Shell};

use topdown::cli::completion_command;

fn script(shell: Shell) -> String {
    let mut out = Vec::new();
    generate(shell, &mut completion_command(), "topdown", &mut out);
    String::from_utf8(out).unwrap()
}

/// What bash offers for the command line `words` (the last one is being
/// completed), as it would on <TAB>.
fn bash_completes(words: &[&str]) -> Vec<String> {
    let dir = std::env::temp_dir().join(format!("topdown-completions-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("topdown.bash");
    std::fs::write(&file, script(Shell::Bash)).unwrap();
    let session = r#"
        source "$1"; shift
        spec=$(complete -p topdown) || exit 3
        func=${spec#* -F }; func=${func%% *}
        COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1))
        COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}; COMPREPLY=()
        "$func" topdown "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
        printf '%s\n' "${COMPREPLY[@]}"
    "#;
    let out = Command::new("bash")
        .args(["--norc", "--noprofile", "-c", session, "bash"])
        .arg(&file)
        .args(words)
        .output()
        .expect("bash runs");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

fn have_bash() -> bool {
    Command::new("bash").arg("--version").output().is_ok()
}

#[test]
fn bash_completes_commands_and_their_own_options() {
    if !have_bash() {
        eprintln!("SKIP: no bash");
        return;
    }
    assert_eq!(bash_completes(&["topdown", "s"]), ["show", "serve"]);
    let serve = bash_completes(&["topdown", "serve", "--"]);
    for o in ["--listen", "--capture", "--threshold", "--help"] {
        assert!(serve.iter().any(|s| s == o), "{o} not in {serve:?}");
    }
    // Only serve's own: not the trace options.
    for o in ["--list-reasons", "--list-profiles", "--json", "--stack-on"] {
        assert!(!serve.iter().any(|s| s == o), "{o} in {serve:?}");
    }
    assert_eq!(bash_completes(&["topdown", "serve", "--li"]), ["--listen"]);
    assert_eq!(bash_completes(&["topdown", "unpin", "--a"]), ["--all"]);
    assert_eq!(
        bash_completes(&["topdown", "vfs_read", "--stack"]),
        ["--stack-on"]
    );
}

#[test]
fn every_shell_names_the_commands_and_no_hidden_option() {
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        let text = script(shell);
        for cmd in ["trace", "pin", "show", "unpin", "serve"] {
            assert!(text.contains(cmd), "{shell}: no {cmd}");
        }
        assert!(text.contains("config-dir"), "{shell}: no pin --config-dir");
        assert!(!text.contains("companion"), "{shell}: a hidden option");
    }
}
