//! libbpf's messages: printed with -v; otherwise only the last program
//! load log is kept, for the verifier's reason a refusal quotes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use libbpf_rs::PrintLevel;

static VERBOSE: AtomicBool = AtomicBool::new(false);
static LOAD_LOG: Mutex<Option<String>> = Mutex::new(None);

const BEGIN: &str = "-- BEGIN PROG LOAD LOG --";
const END: &str = "-- END PROG LOAD LOG --";

/// Routes libbpf's messages: to stderr as well with `verbose` (debug
/// messages left out, as libbpf does by default).
pub fn route_libbpf_messages(verbose: bool) {
    VERBOSE.store(verbose, Ordering::Relaxed);
    libbpf_rs::set_print(Some((PrintLevel::Debug, on_message)));
}

fn on_message(level: PrintLevel, msg: String) {
    if let Some(at) = msg.find(BEGIN) {
        let log = &msg[at + BEGIN.len()..];
        let log = log.find(END).map_or(log, |end| &log[..end]);
        if let Ok(mut last) = LOAD_LOG.lock() {
            *last = Some(log.to_string());
        }
    }
    if VERBOSE.load(Ordering::Relaxed) && !matches!(level, PrintLevel::Debug) {
        eprint!("{msg}");
    }
}

/// The verifier's reason for the last program it refused, once.
pub(crate) fn take_verifier_reason() -> Option<String> {
    reason(&LOAD_LOG.lock().ok()?.take()?)
}

/// The first line of a verifier log that says something: not the
/// instructions it walked, their register states and source lines, nor
/// its closing statistics.
fn reason(log: &str) -> Option<String> {
    log.lines()
        .map(str::trim)
        .find(|l| {
            let walked = l
                .split_once(':')
                .is_some_and(|(n, _)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
            // A subprogram call's register states ("R1=ctx() R10=fp0").
            let regs = l.strip_prefix('R').is_some_and(|r| {
                let n = r.bytes().take_while(u8::is_ascii_digit).count();
                n > 0 && r[n..].starts_with(['=', '_'])
            });
            !l.is_empty()
                && !walked
                && !regs
                && ![
                    ";",
                    "func#",
                    "from ",
                    "processed ",
                    "verification time",
                    "stack depth",
                    "Validating ",
                    "last_idx",
                    "regs=",
                    "parent ",
                    "mark_precise",
                    "Func#",
                    "caller:",
                    "callee:",
                    "frame",
                ]
                .iter()
                .any(|p| l.starts_with(p))
        })
        .map(|l| l.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reason_is_the_first_line_past_the_walk() {
        let log = "func#0 @0\n0: R1=ctx() R10=fp0\n; int BPF_PROG(td_fentry)\n\
                   0: (85) call unknown#184\ninvalid func unknown#184\n\
                   processed 1 insns (limit 1000000) max_states_per_insn 0\n";
        assert_eq!(reason(log).as_deref(), Some("invalid func unknown#184"));
        let log = "number of funcs in func_info doesn't match number of subprogs\n\
                   processed 0 insns (limit 1000000) max_states_per_insn 0 total_states 0\n";
        assert_eq!(
            reason(log).as_deref(),
            Some("number of funcs in func_info doesn't match number of subprogs")
        );
        assert_eq!(reason("\nprocessed 3 insns\n"), None);
        // A call into a subprogram: its register states are no reason.
        let log =
            "1: (85) call pc+2\ncaller:\n R10=fp0\ncallee:\n frame1: R1=ctx() R2_w=0 R10=fp0\n\
                   265: (0f) r3 += r1\nR3 pointer arithmetic on buf_or_null prohibited\n";
        assert_eq!(
            reason(log).as_deref(),
            Some("R3 pointer arithmetic on buf_or_null prohibited")
        );
        let log = "0: (79) r1 = *(u64 *)(r1 +0)\nR1 invalid mem access 'scalar'\n";
        assert_eq!(
            reason(log).as_deref(),
            Some("R1 invalid mem access 'scalar'")
        );
    }
}
