//! The listing jobs: built-in profiles, and a profile's reasons as
//! resolved on the running kernel.

use std::io::{self, Write};

use crate::error::Result;
use crate::host;
use crate::plan::Target;
use crate::profile;

/// `--list-profiles`: name, traced function and description of each.
pub fn list_profiles() -> Result<()> {
    let mut out = io::stdout().lock();
    for (name, func, description) in profile::builtins() {
        writeln!(out, "{name}\t{func}\t{description}")?;
    }
    Ok(())
}

/// `--list-reasons`: the profile as resolved on the running kernel.
pub fn list_reasons(t: &Target) -> Result<()> {
    let ksyms = host::load_kallsyms()?;
    let text = match &t.profile {
        Some(p) => profile::describe(p, &profile::resolve(p, &ksyms)?, &ksyms),
        None => {
            host::resolve_function(&ksyms, &t.func)?;
            format!(
                "no reason profile: one reason per caller function of {}\n",
                t.func
            )
        }
    };
    io::stdout().lock().write_all(text.as_bytes())?;
    Ok(())
}
