//! --drill's trees from the kernel's per-path counts: each frame named by
//! the function it returns into (a function's call sites merged, clones
//! under their base name), then counted into a tree per reason.

use crate::bpf::Drilled;
use crate::kallsyms::{base_name, Kallsyms};
use crate::reasons::Reasons;
use crate::report::drill::{self, DrillTree, STACK_END, UNKNOWN};
use crate::report::ReasonGate;

/// The function return address `ret` returns into, or the address itself.
fn frame_name(ksyms: &Kallsyms, ret: u64) -> String {
    match ksyms.caller_of(ret) {
        Some(s) => base_name(&s.name).to_string(),
        None => format!("{ret:#x}"),
    }
}

/// A tree for each reason with paths, in slot order; `levels`: the frames a
/// path holds at most (a shorter one reached the stack's end), and the
/// threshold its text splits nodes at; `gates`: the reasons' calls seen
/// while captured, where known (the summary's).
pub(super) fn trees(
    d: &Drilled,
    ksyms: &Kallsyms,
    reasons: &Reasons,
    levels: (u32, f64),
    gates: &[ReasonGate],
) -> Vec<DrillTree> {
    let mut slots: Vec<u32> = d
        .paths
        .iter()
        .map(|p| p.slot)
        .chain(d.full.iter().map(|f| f.0))
        .collect();
    slots.sort_unstable();
    slots.dedup();
    slots
        .into_iter()
        .map(|slot| {
            let paths: Vec<(Vec<String>, u64)> = d
                .paths
                .iter()
                .filter(|p| p.slot == slot)
                .map(|p| {
                    let mut names: Vec<String> =
                        p.frames.iter().map(|&f| frame_name(ksyms, f)).collect();
                    if !p.unwound {
                        names.push(UNKNOWN.to_string());
                    } else if (p.frames.len() as u32) < levels.0 {
                        names.push(STACK_END.to_string());
                    }
                    (names, p.calls)
                })
                .collect();
            let full = d.full.iter().filter(|f| f.0 == slot).map(|f| f.1).sum();
            let reason = reasons.name(slot);
            let captured = gates
                .iter()
                .find(|g| g.reason == reason)
                .map(|g| g.gate.calls - g.gate.unseen);
            drill::tree(reason, levels, captured, &paths, full)
        })
        .collect()
}
