//! Input files read whole (profiles, declarations, baselines), each with a
//! cap: `--reasons /dev/zero` is one line, not gigabytes of memory.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

/// A reason profile or a pin declaration: a small TOML file.
pub(crate) const MAX_PROFILE: u64 = 1 << 20;

/// A result saved by --save: a JSON file with the top stacks.
pub(crate) const MAX_RESULT: u64 = 64 << 20;

/// The text of `path`, or an error if it is longer than `max` bytes (or
/// not UTF-8, or unreadable).
pub(crate) fn read_text(path: &Path, max: u64) -> io::Result<String> {
    let mut text = String::new();
    File::open(path)?.take(max + 1).read_to_string(&mut text)?;
    if text.len() as u64 > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("it is larger than {} MiB", max >> 20),
        ));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endless_file_is_refused_at_the_cap() {
        let e = read_text(Path::new("/dev/zero"), MAX_PROFILE).unwrap_err();
        assert_eq!(e.to_string(), "it is larger than 1 MiB");
        let dir = std::env::temp_dir().join(format!("topdown-input-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let at_cap = dir.join("f");
        std::fs::write(&at_cap, vec![b'#'; MAX_PROFILE as usize]).unwrap();
        assert_eq!(read_text(&at_cap, MAX_PROFILE).unwrap().len(), 1 << 20);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
