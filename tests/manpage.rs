//! The hand-written manual page, man/topdown.8, against the clap
//! definition: its OPTIONS section documents every visible option with the
//! same short and long names and value name, and nothing else; hidden
//! options appear nowhere; its header names this version.
//!
//! OPTIONS is written as one `.TP` paragraph per option whose tag line reads
//! like `\fB\-i\fR, \fB\-\-interval\fR \fISECS\fR` (positionals: `.I FUNC`).

use std::collections::BTreeMap;

use clap::{Arg, Command, CommandFactory};
use topdown::cli::Cli;

const PAGE: &str = include_str!("../man/topdown.8");

/// One documented option: short, long, value name (as written).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    short: Option<char>,
    long: Option<String>,
    value: Option<String>,
}

/// Roff source text to plain text: font escapes dropped, `\-` as `-`.
fn plain(roff: &str) -> String {
    let mut out = String::new();
    let mut chars = roff.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('f') => {
                chars.next(); // the font: B, I, R or P
            }
            Some('-') => out.push('-'),
            Some('&') | Some(':') => {}
            Some('(') => {
                let name: String = chars.by_ref().take(2).collect();
                out.push_str(match name.as_str() {
                    "aq" => "'",
                    "dq" => "\"",
                    _ => "?",
                });
            }
            Some(other) => out.push(other),
            None => {}
        }
    }
    out
}

/// A macro line's arguments as text: `.I FUNC` -> `FUNC`,
/// `.BR a " b"` -> `a b`.
fn macro_text(line: &str) -> String {
    let args = line.split_once(' ').map_or("", |(_, a)| a);
    let mut out = String::new();
    let mut quoted = false;
    for c in args.chars() {
        match c {
            '"' => quoted = !quoted,
            ' ' if !quoted => {}
            c => out.push(c),
        }
    }
    plain(&out)
}

/// The lines of section `name`, from its `.SH` line to the next one.
fn section<'a>(page: &'a str, name: &str) -> Vec<&'a str> {
    page.lines()
        .skip_while(|l| l.trim_end() != format!(".SH {name}"))
        .skip(1)
        .take_while(|l| !l.starts_with(".SH "))
        .collect()
}

/// The tag lines of the OPTIONS section's `.TP` paragraphs, as plain text.
fn option_tags(page: &str) -> Vec<String> {
    let lines = section(page, "OPTIONS");
    assert!(!lines.is_empty(), "no .SH OPTIONS section");
    lines
        .windows(2)
        .filter(|w| w[0].trim_end() == ".TP")
        .map(|w| {
            if w[1].starts_with('.') {
                macro_text(w[1])
            } else {
                plain(w[1])
            }
        })
        .collect()
}

/// Parses a tag: `-i, --interval SECS`, `--json`, `-U, --user-stacks`.
/// Tags that name no option (positionals) give None.
fn parse_tag(tag: &str) -> Option<Entry> {
    if !tag.starts_with('-') {
        return None;
    }
    let mut e = Entry {
        short: None,
        long: None,
        value: None,
    };
    for word in tag.split([',', ' ']).filter(|w| !w.is_empty()) {
        if let Some(long) = word.strip_prefix("--") {
            assert!(e.long.is_none(), "two long options in tag `{tag}`");
            e.long = Some(long.to_string());
        } else if let Some(short) = word.strip_prefix('-') {
            let mut cs = short.chars();
            let (Some(c), None) = (cs.next(), cs.next()) else {
                panic!("bad short option `{word}` in tag `{tag}`");
            };
            e.short = Some(c);
        } else {
            assert!(e.value.is_none(), "two value names in tag `{tag}`");
            e.value = Some(word.to_string());
        }
    }
    Some(e)
}

/// The command with help and version built in, as `--help` shows it.
fn command() -> Command {
    let mut cmd = Cli::command();
    cmd.build();
    cmd
}

fn value_name(arg: &Arg) -> Option<String> {
    if !arg.get_action().takes_values() {
        return None;
    }
    Some(match arg.get_value_names() {
        Some(names) => names
            .iter()
            .map(|n| n.as_str())
            .collect::<Vec<_>>()
            .join(" "),
        None => arg.get_id().as_str().to_uppercase(),
    })
}

/// Visible options of the command, by long name.
fn cli_options() -> BTreeMap<String, Entry> {
    command()
        .get_arguments()
        .filter(|a| !a.is_hide_set())
        .filter_map(|a| {
            let long = a.get_long()?.to_string();
            Some((
                long.clone(),
                Entry {
                    short: a.get_short(),
                    long: Some(long),
                    value: value_name(a),
                },
            ))
        })
        .collect()
}

/// Documented options, by long name.
fn man_options() -> BTreeMap<String, Entry> {
    let mut out = BTreeMap::new();
    for tag in option_tags(PAGE) {
        let Some(e) = parse_tag(&tag) else { continue };
        let long = e
            .long
            .clone()
            .unwrap_or_else(|| panic!("option without a long name in tag `{tag}`"));
        assert!(
            out.insert(long.clone(), e).is_none(),
            "--{long} is documented twice"
        );
    }
    out
}

#[test]
fn every_visible_option_is_documented_and_nothing_else() {
    let cli = cli_options();
    let man = man_options();
    let undocumented: Vec<&String> = cli.keys().filter(|k| !man.contains_key(*k)).collect();
    let unknown: Vec<&String> = man.keys().filter(|k| !cli.contains_key(*k)).collect();
    assert!(
        undocumented.is_empty() && unknown.is_empty(),
        "man/topdown.8 OPTIONS: missing {undocumented:?}; not options of topdown {unknown:?}"
    );
    // The list is not trivially empty on both sides.
    assert!(cli.len() >= 20, "{cli:?}");
}

#[test]
fn short_options_and_value_names_match() {
    let cli = cli_options();
    let man = man_options();
    for (long, want) in &cli {
        let Some(got) = man.get(long) else { continue };
        assert_eq!(got, want, "--{long}: man page tag differs from the CLI");
    }
}

#[test]
fn positionals_are_documented() {
    let tags = option_tags(PAGE);
    for arg in command().get_positionals().filter(|a| !a.is_hide_set()) {
        let name = value_name(arg).expect("a positional takes a value");
        assert!(
            tags.contains(&name),
            "positional {name} has no .TP paragraph in OPTIONS: {tags:?}"
        );
    }
}

#[test]
fn hidden_options_appear_nowhere() {
    let text = plain(PAGE);
    for arg in command().get_arguments().filter(|a| a.is_hide_set()) {
        if let Some(long) = arg.get_long() {
            assert!(
                !text.contains(&format!("--{long}")),
                "hidden option --{long} is in man/topdown.8"
            );
        }
    }
}

#[test]
fn header_names_this_version_in_section_8() {
    let th = PAGE
        .lines()
        .find(|l| l.starts_with(".TH "))
        .expect("no .TH line");
    assert!(th.starts_with(".TH TOPDOWN 8 "), "{th}");
    let want = format!("\"topdown {}\"", env!("CARGO_PKG_VERSION"));
    assert!(th.contains(&want), "{th} does not name {want}");
}

#[test]
fn tags_parse() {
    assert_eq!(
        parse_tag(&plain(r"\fB\-i\fR, \fB\-\-interval\fR \fISECS\fR")),
        Some(Entry {
            short: Some('i'),
            long: Some("interval".into()),
            value: Some("SECS".into()),
        })
    );
    assert_eq!(
        parse_tag(&plain(r"\fB\-\-json\fR")),
        Some(Entry {
            short: None,
            long: Some("json".into()),
            value: None,
        })
    );
    assert_eq!(parse_tag(&macro_text(".I FUNC")), None);
    assert_eq!(
        macro_text(r#".BR \-U ", " \-\-user\-stacks"#),
        "-U, --user-stacks"
    );
}

/// The `.TP` tags of the COMMANDS section's `.SS topdown NAME` subsection.
fn command_tags(page: &str, name: &str) -> Vec<String> {
    let lines = section(page, "COMMANDS");
    let head = format!(".SS topdown {name} ");
    let sub: Vec<&str> = lines
        .iter()
        .skip_while(|l| !l.starts_with(&head))
        .skip(1)
        .take_while(|l| !l.starts_with(".SS "))
        .copied()
        .collect();
    sub.windows(2)
        .filter(|w| w[0].trim_end() == ".TP")
        .map(|w| {
            if w[1].starts_with('.') {
                macro_text(w[1])
            } else {
                plain(w[1])
            }
        })
        .collect()
}

/// Every command but `trace` (which takes OPTIONS) has a subsection that
/// documents each of its options that OPTIONS does not, as `--help` shows
/// it, and only its options; `trace` takes exactly the options of OPTIONS.
#[test]
fn every_command_and_its_own_options_are_documented() {
    let cmd = command();
    let top = cli_options();
    let mut seen = 0;
    for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
        let name = sub.get_name();
        let opts: BTreeMap<String, Entry> = sub
            .get_arguments()
            .filter(|a| !a.is_hide_set())
            .filter_map(|a| {
                let long = a.get_long()?.to_string();
                if ["help", "version"].contains(&long.as_str()) {
                    return None;
                }
                Some((
                    long.clone(),
                    Entry {
                        short: a.get_short(),
                        long: Some(long),
                        value: value_name(a),
                    },
                ))
            })
            .collect();
        if name == "trace" {
            let mut want = top.clone();
            want.remove("version");
            want.remove("help");
            assert_eq!(
                opts.keys().collect::<Vec<_>>(),
                want.keys().collect::<Vec<_>>(),
                "trace takes the options of OPTIONS"
            );
            continue;
        }
        assert!(
            PAGE.contains(&format!(".SS topdown {name} ")),
            "no .SS topdown {name} subsection in COMMANDS"
        );
        let documented: BTreeMap<String, Entry> = command_tags(PAGE, name)
            .iter()
            .filter_map(|t| parse_tag(t))
            .map(|e| (e.long.clone().expect("a long option"), e))
            .collect();
        for (long, e) in &opts {
            match top.get(long) {
                // Shared with a run: OPTIONS documents it, the same way.
                Some(t) => assert_eq!(t, e, "{name} --{long} differs from OPTIONS"),
                None => {
                    assert_eq!(documented.get(long), Some(e), "{name} --{long}");
                    seen += 1;
                }
            }
        }
        // A subsection may also document an option named like one of
        // OPTIONS when it means something else there (show --json).
        for (long, e) in &documented {
            assert_eq!(
                opts.get(long),
                Some(e),
                "{name}: --{long} is not an option of it"
            );
        }
    }
    assert!(seen >= 2, "commands' own options found: {seen}");
}

/// SYNOPSIS as plain text, one form per entry (`.br` separates them).
fn synopsis_forms(page: &str) -> Vec<String> {
    let mut forms = vec![String::new()];
    for line in section(page, "SYNOPSIS") {
        if line.trim_end() == ".br" {
            forms.push(String::new());
            continue;
        }
        let text = if line.starts_with('.') {
            // Keep the words apart: `.RB [ \-\-listen` -> `[--listen`.
            let args = line.split_once(' ').map_or("", |(_, a)| a);
            plain(&args.replace('"', ""))
        } else {
            plain(line)
        };
        let form = forms.last_mut().unwrap();
        form.push(' ');
        form.push_str(&text);
    }
    forms
}

/// The long and short options a form names: `--listen`, `-x`.
fn named_options(form: &str) -> Vec<String> {
    form.split(|c: char| c.is_whitespace() || "[]|".contains(c))
        // `--` ends the options (CMD ARGS follow): no option itself.
        .filter(|w| w.starts_with('-') && w.len() > 1 && *w != "--")
        .map(str::to_string)
        .collect()
}

/// Whether `cmd` takes the option `opt` (`--long` or `-s`).
fn takes(cmd: &Command, opt: &str) -> bool {
    cmd.get_arguments()
        .filter(|a| !a.is_hide_set())
        .any(|a| match opt.strip_prefix("--") {
            Some(long) => a.get_long() == Some(long),
            None => a.get_short().map(|c| format!("-{c}")).as_deref() == Some(opt),
        })
}

/// SYNOPSIS against --help: every command has a form; every option a form
/// names is one its command takes; and a command's own options (those a
/// run does not take) are each named in one of its forms.
#[test]
fn synopsis_matches_the_commands_and_their_options() {
    let cmd = command();
    let forms = synopsis_forms(PAGE);
    assert!(forms.len() >= 8, "{forms:?}");
    let command_of = |form: &str| -> Option<String> {
        let mut words = form.split_whitespace();
        assert_eq!(words.next(), Some("topdown"), "form `{form}`");
        let second = words.next()?;
        cmd.find_subcommand(second)
            .map(|s| s.get_name().to_string())
    };
    for form in &forms {
        let sub = command_of(form);
        let c = match &sub {
            Some(name) => cmd.find_subcommand(name).unwrap().clone(),
            None => cmd.clone(),
        };
        for opt in named_options(form) {
            assert!(
                takes(&c, &opt),
                "SYNOPSIS `{}`: {opt} is not an option of topdown {}",
                form.trim(),
                sub.as_deref().unwrap_or("")
            );
        }
    }
    for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
        let name = sub.get_name();
        let mine: Vec<&String> = forms
            .iter()
            .filter(|f| command_of(f).as_deref() == Some(name))
            .collect();
        assert!(!mine.is_empty(), "no SYNOPSIS form for topdown {name}");
        let named: Vec<String> = mine.iter().flat_map(|f| named_options(f)).collect();
        for a in sub.get_arguments().filter(|a| !a.is_hide_set()) {
            let Some(long) = a.get_long() else { continue };
            if ["help", "version"].contains(&long) || takes(&cmd, &format!("--{long}")) {
                continue;
            }
            assert!(
                named.contains(&format!("--{long}")),
                "SYNOPSIS names no --{long} for topdown {name}"
            );
        }
    }
}
