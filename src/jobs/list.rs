//! The listing jobs: built-in profiles, and a profile's reasons as
//! resolved on the running kernel.

use std::io::{self, Write};

use crate::error::Result;
use crate::host;
use crate::plan::Target;
use crate::profile;

/// `--list-profiles`: name, traced function and description of each; with
/// `json`, one object per line.
pub fn list_profiles(json: bool) -> Result<()> {
    let mut out = io::stdout().lock();
    for (name, func, description) in profile::builtins() {
        if json {
            let o =
                serde_json::json!({"profile": name, "function": func, "description": description});
            writeln!(out, "{o}")?;
        } else {
            writeln!(out, "{name}\t{func}\t{description}")?;
        }
    }
    Ok(())
}

/// `--list-reasons`: the profile as resolved on the running kernel; with
/// `json`, as one object.
pub fn list_reasons(t: &Target, json: bool) -> Result<()> {
    let ksyms = host::load_kallsyms()?;
    let text = match (&t.profile, json) {
        (Some(p), false) => {
            profile::describe(p, &profile::resolve(p, &ksyms)?, &ksyms, t.users_own)
        }
        (Some(p), true) => profile::describe_json(p, &profile::resolve(p, &ksyms)?, &ksyms) + "\n",
        (None, false) => {
            host::resolve_function(&ksyms, &t.func)?;
            format!(
                "no reason profile: one reason per caller function of {}\n",
                t.func
            )
        }
        (None, true) => {
            host::resolve_function(&ksyms, &t.func)?;
            let o =
                serde_json::json!({"profile": null, "function": t.func.as_str(), "reasons": []});
            format!("{o}\n")
        }
    };
    io::stdout().lock().write_all(text.as_bytes())?;
    Ok(())
}
