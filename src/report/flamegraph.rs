//! Captured stacks as an interactive flame graph (SVG, with the search and
//! zoom scripts flame graphs carry), drawn by inferno from the very lines
//! `--folded` writes: the reason is the root frame, user frames (with -U)
//! come next, then a `--` separator frame and the kernel frames, and the
//! traced function is the leaf.

use inferno::flamegraph::{self, Options};

/// Why no flame graph of the stacks was drawn.
#[derive(Debug)]
pub(crate) enum Failed {
    /// Nothing was captured: the SVG inferno draws for no input (a
    /// message, no frames).
    NoStacks(Vec<u8>),
    /// inferno refused the stacks: its error.
    Inferno(String),
}

/// The SVG of `folded` (lines as `folded::folded` makes them), titled
/// for `func`.
pub(crate) fn svg(folded: &str, func: &str, subtitle: &str) -> Result<Vec<u8>, Failed> {
    let mut opt = Options::default();
    opt.title = format!("topdown {func}: captured stacks by reason");
    opt.subtitle = Some(subtitle.to_string());
    opt.count_name = "stacks".into();
    opt.name_type = "Frame:".into();
    // Every frame is drawn, however narrow: its counts must add up.
    opt.min_width = 0.0;
    // Colours by name, so that a run gives the same picture every time.
    opt.hash = true;
    opt.deterministic = true;
    let mut out = Vec::new();
    match flamegraph::from_lines(&mut opt, folded.lines(), &mut out) {
        Ok(()) => Ok(out),
        Err(_) if folded.trim().is_empty() => Err(Failed::NoStacks(out)),
        Err(e) => Err(Failed::Inferno(e.to_string())),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// Every frame of an SVG flame graph: its title's name and count
    /// (`name (1,234 stacks, 12.50%)`), in document order.
    pub(crate) fn frames(svg: &str) -> Vec<(String, u64)> {
        let mut out = Vec::new();
        let mut rest = svg;
        while let Some(i) = rest.find("<title>") {
            rest = &rest[i + "<title>".len()..];
            let end = rest.find("</title>").expect("closed title");
            let title = unescape(&rest[..end]);
            let open = title.rfind(" (").expect("a count");
            let count: String = title[open + 2..]
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == ',')
                .filter(char::is_ascii_digit)
                .collect();
            out.push((title[..open].to_string(), count.parse().expect("a number")));
            rest = &rest[end..];
        }
        out
    }

    fn unescape(s: &str) -> String {
        s.replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&quot;", "\"")
            .replace("&apos;", "'")
            .replace("&#39;", "'")
            .replace("&amp;", "&")
    }

    /// The count of each frame name summed over the folded lines, as a
    /// flame graph shows it: each name once per line (a name repeated in a
    /// line is a deeper frame of its own, counted again).
    fn expected(folded: &str) -> (u64, BTreeMap<String, u64>) {
        let mut total = 0;
        let mut by_name = BTreeMap::new();
        for line in folded.lines() {
            let (stack, n) = line.rsplit_once(' ').unwrap();
            let n: u64 = n.parse().unwrap();
            total += n;
            for f in stack.split(';') {
                *by_name.entry(f.to_string()).or_default() += n;
            }
        }
        (total, by_name)
    }

    #[test]
    fn frames_and_totals_match_the_folded_stacks() {
        let folded = "FAULT;asm_exc_page_fault+0x26;do_huge_pmd_anonymous_page+0x2bd;deferred_split_folio 1200\n\
                      ZAP;_start+0x1;main+0x5;--;entry_SYSCALL_64+0x76;__x64_sys_munmap+0x1b;folio_remove_rmap_ptes+0xbb;deferred_split_folio 3\n\
                      ZAP;_start+0x1;main+0x5;--;entry_SYSCALL_64+0x76;__x64_sys_madvise+0x1b;folio_remove_rmap_ptes+0xbb;deferred_split_folio 1\n\
                      ZAP;<odd>&\"name\";deferred_split_folio 2\n";
        let svg = String::from_utf8(svg(folded, "deferred_split_folio", "sub").unwrap()).unwrap();
        assert!(svg.starts_with("<?xml"), "{}", &svg[..100]);
        assert!(svg.contains("topdown deferred_split_folio: captured stacks by reason"));
        let frames = frames(&svg);
        let (total, want) = expected(folded);
        let all: Vec<u64> = frames
            .iter()
            .filter(|f| f.0 == "all")
            .map(|f| f.1)
            .collect();
        assert_eq!(all, [total]);
        let mut got: BTreeMap<String, u64> = BTreeMap::new();
        for (name, n) in frames.iter().filter(|f| f.0 != "all") {
            *got.entry(name.clone()).or_default() += n;
        }
        assert_eq!(got, want);
        // The same stacks give the same picture.
        assert_eq!(
            svg.as_bytes(),
            &super::svg(folded, "deferred_split_folio", "sub").unwrap()[..]
        );
    }

    #[test]
    fn no_stacks_draw_a_message_and_say_so() {
        let Err(Failed::NoStacks(out)) = svg("", "f", "s") else {
            panic!("no stacks are no error")
        };
        let out = String::from_utf8(out).unwrap();
        assert!(out.contains("No valid input"), "{out}");
        assert!(frames(&out).is_empty());
    }

    #[test]
    fn inferno_errors_are_reported_as_themselves() {
        let Err(Failed::Inferno(e)) = svg("a;b no-count\n", "f", "s") else {
            panic!("lines without counts are an error")
        };
        assert!(!e.is_empty());
    }
}
