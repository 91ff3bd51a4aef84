//! A command line clap refuses, said in one line with what to type
//! instead: the habits of bcc, bpftrace and perf users (`topdown vfs_read
//! 5`, options before a command), and the command's own --help. Advice is
//! given only when the command line it proposes parses.

use clap::{CommandFactory, Parser};

use crate::cli::Cli;

/// The commands' names.
fn commands() -> Vec<String> {
    Cli::command()
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .collect()
}

/// The one line (without "topdown: ") for clap's error `e` on `args`
/// (the program's name first).
pub fn explain(args: &[String], e: &clap::Error) -> String {
    let text = e.render().to_string();
    let msg = first_paragraph(&text);
    // A word where none was wanted: clap says one of two things, as the
    // words after `--` (CMD ARGS) are a positional of their own.
    let quoted = |prefix: &str, then: &str| {
        msg.strip_prefix(prefix)
            .and_then(|rest| rest.split_once('\''))
            .filter(|(x, rest)| rest.starts_with(then) && !x.starts_with('-'))
            .map(|(x, _)| x)
    };
    let conflict = quoted("the subcommand '", " cannot be used with")
        .or_else(|| quoted("unexpected argument '", " found"));
    if let Some(better) = conflict.and_then(|x| habit(args, x)) {
        return better;
    }
    format!("{msg} (see {} --help)", command_of(args))
}

/// clap's message, its first paragraph on one line.
fn first_paragraph(text: &str) -> String {
    let lines: Vec<&str> = text
        .lines()
        .take_while(|l| !l.trim().is_empty())
        .map(str::trim)
        .collect();
    lines.join(" ").trim_start_matches("error: ").to_string()
}

/// The command the error is about: `topdown` or `topdown pin`. A command
/// is a command only in first place (after an option it is FUNC).
fn command_of(args: &[String]) -> String {
    match args.get(1) {
        Some(a) if commands().contains(a) => format!("topdown {a}"),
        _ => "topdown".to_string(),
    }
}

/// `args` with `x` where clap wanted none: a command after options, or
/// bcc's `FUNC INTERVAL [COUNT]`.
fn habit(args: &[String], x: &str) -> Option<String> {
    let rest = args.get(1..)?;
    let i = rest.iter().position(|a| a == x)?;
    let is_command = |a: &String| commands().contains(a);
    // `topdown -p 1 pin vfs_read`: clap took `pin` for FUNC, and objects
    // to `vfs_read`.
    let j = match i.checked_sub(1) {
        _ if is_command(&rest[i]) => Some(i),
        Some(j) if is_command(&rest[j]) => Some(j),
        _ => None,
    };
    if let Some(j) = j {
        let x = &rest[j];
        let mut moved = vec![x.clone()];
        moved.extend_from_slice(&rest[j + 1..]);
        moved.extend_from_slice(&rest[..j]);
        return Some(match parses(&moved) {
            Ok(()) => format!("the command comes first: {}", shell_line(&moved)),
            Err(why) => format!(
                "the command comes first, and {} is refused: {why} (see topdown {x} --help)",
                shell_line(&moved)
            ),
        });
    }
    let secs: f64 = x.parse().ok().filter(|s: &f64| s.is_finite() && *s > 0.0)?;
    // bcc's `funccount vfs_read 5` / `INTERVAL COUNT`: -i, and -d for both.
    let count: Option<u32> = rest.get(i + 1).and_then(|c| c.parse().ok());
    let mut better = rest[..i].to_vec();
    better.extend(["-i".to_string(), x.to_string()]);
    let after = match count {
        Some(n) => {
            better.extend(["-d".to_string(), format!("{}", secs * f64::from(n))]);
            i + 2
        }
        None => i + 1,
    };
    better.extend_from_slice(&rest[after..]);
    parses(&better).ok()?;
    Some(format!(
        "'{x}' after FUNC: topdown takes the interval as -i SECS and a run's length as \
         -d SECS, not bcc's INTERVAL [COUNT]: {}",
        shell_line(&better)
    ))
}

/// Whether `topdown ARGS` parses, or clap's message.
fn parses(args: &[String]) -> Result<(), String> {
    let argv = std::iter::once("topdown").chain(args.iter().map(String::as_str));
    Cli::try_parse_from(argv)
        .map(drop)
        .map_err(|e| first_paragraph(&e.render().to_string()))
}

/// `topdown ARGS` as one would type it in a shell.
fn shell_line(args: &[String]) -> String {
    let word = |a: &String| {
        let plain = !a.is_empty()
            && a.chars()
                .all(|c| c.is_ascii_alphanumeric() || "_-./:=,@%+".contains(c));
        if plain {
            a.clone()
        } else {
            format!("'{}'", a.replace('\'', r"'\''"))
        }
    };
    std::iter::once("topdown".to_string())
        .chain(args.iter().map(word))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::funcname::command_like;

    fn line(args: &[&str]) -> String {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let e = Cli::try_parse_from(&args).unwrap_err();
        explain(&args, &e)
    }

    #[test]
    fn bcc_interval_and_count_become_i_and_d() {
        assert!(
            line(&["topdown", "vfs_read", "5"]).ends_with(": topdown vfs_read -i 5"),
            "{}",
            line(&["topdown", "vfs_read", "5"])
        );
        let l = line(&["topdown", "vfs_read", "1", "5", "-p", "3"]);
        assert!(l.ends_with(": topdown vfs_read -i 1 -d 5 -p 3"), "{l}");
        assert!(l.contains("not bcc's INTERVAL [COUNT]"), "{l}");
        // Advice only when it parses: -i given already.
        let l = line(&["topdown", "vfs_read", "-i", "2", "5"]);
        assert!(!l.contains("-i 5"), "{l}");
    }

    #[test]
    fn a_command_after_options_is_moved_first() {
        let l = line(&["topdown", "-p", "1", "pin", "vfs_read"]);
        assert_eq!(
            l,
            "the command comes first, and topdown pin vfs_read -p 1 is refused: \
             unexpected argument '-p' found (see topdown pin --help)"
        );
        let l = line(&["topdown", "--kprobe", "pin", "vfs_read"]);
        assert_eq!(l, "the command comes first: topdown pin vfs_read --kprobe");
    }

    #[test]
    fn a_commands_usage_error_points_to_its_help() {
        let l = line(&["topdown", "pin", "vfs_read", "--bogus"]);
        assert!(l.ends_with("(see topdown pin --help)"), "{l}");
        let l = line(&["topdown", "serve", "--listen", "x"]);
        assert!(l.ends_with("(see topdown serve --help)"), "{l}");
        let l = line(&["topdown", "vfs_read", "--bogus"]);
        assert!(l.ends_with("(see topdown --help)"), "{l}");
    }

    #[test]
    fn the_command_names_are_claps() {
        assert_eq!(crate::funcname::COMMANDS.to_vec(), commands());
    }

    #[test]
    fn misspelled_commands_are_recognized() {
        assert_eq!(command_like("shwo").as_deref(), Some("show"));
        assert_eq!(command_like("serv").as_deref(), Some("serve"));
        assert_eq!(command_like("unpn").as_deref(), Some("unpin"));
        assert_eq!(command_like("vfs_read"), None);
        assert_eq!(command_like("shmem"), None);
    }

    #[test]
    fn shell_words_are_quoted() {
        let a = [
            "vfs_read".to_string(),
            "a b".to_string(),
            "it's".to_string(),
        ];
        assert_eq!(shell_line(&a), r"topdown vfs_read 'a b' 'it'\''s'");
    }
}
