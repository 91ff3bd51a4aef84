//! Captured stacks in the folded format of flame graph tools: one line per
//! distinct stack, `;`-separated frames root first, then its count. The
//! reason is the root frame, so one file holds every reason captured; user
//! frames (with -U) come next, then a `--` frame (the separator flame graph
//! tools draw in grey) and the kernel frames; the traced function is the
//! leaf.

use crate::report::{ReasonStacks, Stack};

/// One stack's folded frames (without the count).
fn line(stack: &Stack, reason: &str, func: &str) -> String {
    let mut parts: Vec<&str> = vec![reason];
    parts.extend(stack.user.iter().rev().map(String::as_str));
    if !stack.user.is_empty() {
        parts.push("--");
    }
    parts.extend(stack.kernel.iter().rev().map(String::as_str));
    parts.push(func);
    parts
        .iter()
        .map(|p| p.replace([';', ' '], "_"))
        .collect::<Vec<_>>()
        .join(";")
}

/// Every stack of every reason, one line each, sorted.
pub(crate) fn folded(sets: &[ReasonStacks], func: &str) -> String {
    let mut lines: Vec<String> = sets
        .iter()
        .flat_map(|set| {
            set.stacks
                .iter()
                .map(move |sc| format!("{} {}", line(&sc.stack, &set.reason, func), sc.count))
        })
        .collect();
    lines.sort();
    lines.iter().map(|l| format!("{l}\n")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::StackCount;

    #[test]
    fn reason_then_root_first_with_the_function_as_leaf() {
        let set = ReasonStacks {
            reason: "ZAP".into(),
            captured: 2,
            background: 0,
            stacks: vec![StackCount {
                stack: Stack {
                    kernel: vec!["caller+0x1".into(), "root fn+0x2".into()],
                    user: vec!["main+0x5".into(), "_start+0x1".into()],
                },
                count: 2,
                processes: vec![],
            }],
            processes: vec![],
        };
        assert_eq!(
            folded(&[set], "deferred_split_folio"),
            "ZAP;_start+0x1;main+0x5;--;root_fn+0x2;caller+0x1;deferred_split_folio 2\n"
        );
    }
}
