/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The layout shared by the BPF programs and user space. Constants are enum
 * values rather than #defines so that they reach Rust through the
 * skeleton's BTF (src/bpf/abi.rs reads them from there): one definition,
 * nothing to keep in step by hand.
 */
#ifndef TOPDOWN_H
#define TOPDOWN_H

enum td_abi {
	/*
	 * The layout of the maps a pinned instance keeps (and its meta): bump
	 * it on any change a reader of an older pin would misread.
	 */
	TD_LAYOUT_VERSION = 13,
	TD_NR_SLOTS = 256,		/* reason slots; a power of two */
	/*
	 * Pool slots, after the reason slots in td_counts.n: a new site's
	 * own counter until user space has resolved it (see td_pool).
	 */
	TD_POOL = 256,
	TD_ALL_SLOTS = TD_NR_SLOTS + TD_POOL,
	TD_SLOT_NOT_FOUND = 0,		/* caller's return address not found */
	TD_SLOT_SITES_FULL = 1,		/* site tables full: caller unknown */
	TD_FIRST_REASON = 2,
	TD_MAX_SITES = 16384,
	TD_MAX_CALLERS = 16,
	TD_MAX_RULES = 32,
	TD_MAX_RULE_DEPTH = 16,
	/*
	 * fentry takes at most 12 arguments; FUNC+5 lies a few slots above them.
	 * arm64: at most 8 register arguments up to 6.12; the caller's slot is
	 * then 15 at most.
	 */
	TD_SCAN_SLOTS = 16,
	TD_UNWIND_FRAMES = 32,		/* a power of two */
	TD_MAX_FRAMES = 127,
	TD_MAX_STACK_RANGES = 32,
	/*
	 * --drill: the distinct paths counted (td_path_key), in all; and the
	 * frames a path holds (the caller's return address, then those above).
	 */
	TD_MAX_PATHS = 512,
	TD_DRILL_FRAMES = 8,
	/*
	 * A uprobe's calls from a (tgid, return address) not resolved yet
	 * cannot be told apart by reason. While a reason is captured they
	 * draw on an allowance of their own, and each such site's first this
	 * many calls on a CPU may spend all of it, the later ones only down
	 * to td_budget.keep: one busy caller's calls cannot use it up before
	 * another's come. The background sampler takes only the first
	 * TD_BG_UNTAGGED_PER_SITE of each such site, for the same reason.
	 */
	TD_UNTAGGED_PER_SITE = 10,
	TD_BG_UNTAGGED_PER_SITE = 4,
	TD_SELFTEST_ARGS = 12,		/* raw_tp test runs take at most 12 arguments */
	/*
	 * FUNC's entry frame is FUNC+5 (the call from the fentry site), FUNC+9
	 * behind an IBT endbr64, FUNC+1 under a kprobe; arm64: FUNC+8 (the bl
	 * after "mov x9, x30"), FUNC+12 behind a BTI, FUNC+0 under a kprobe:
	 * all below this.
	 */
	TD_ENTRY_WINDOW = 16,
	TD_NAME_LEN = 256,		/* a reason's name in the names map, NUL included */
	/*
	 * The direct-mapped site cache in front of the sites hash, indexed by
	 * the return address's bits 3 and up: entries are (slot <<
	 * TD_SLOT_SHIFT) | the return address's bits below TD_SITE_SHIFT.
	 * Kernel text addresses have all their bits from TD_SITE_SHIFT up set
	 * (x86-64: from bit 32), so the low bits name the address; others are
	 * left to the hash. Bits TD_SITE_SHIFT to TD_SLOT_SHIFT are 0, so the
	 * entry shifted by TD_SITE_SHIFT is the slot's byte offset in
	 * td_counts.n: one shift on the common path.
	 */
	TD_SITE_CACHE_BITS = 12,
	TD_SITE_CACHE = 1 << TD_SITE_CACHE_BITS,
	TD_SITE_SHIFT = 52,
	TD_SLOT_SHIFT = 55,		/* TD_SITE_SHIFT + 3: a slot is 8 bytes */
	/*
	 * The per-CPU direct-mapped table of new sites' first calls (see
	 * td_fresh), indexed as the site cache is.
	 */
	TD_FRESH_BITS = 8,
	TD_FRESH = 1 << TD_FRESH_BITS,
	TD_META_LEN = 32768,		/* the meta map's JSON, NUL included */
	/* CPUs a --cpu filter can name: the bits of td_config.cpus */
	TD_MAX_CPUS = 8192,
	TD_MAX_PIDS = 64,		/* processes a --pid filter can name */
	TD_EXE_NAME = 64,		/* bytes of a program's file name kept (td_uproc) */
	/*
	 * Not a kernel address. As an early key's first frame: the unwind
	 * found no caller, so no frames were kept. As the self-test's first
	 * frame above the caller: its synthetic unwind fails.
	 */
	TD_NO_FRAMES = 1,
	/*
	 * A tracepoint (tp_btf, raw_tp): the address ranges of its glue (the
	 * kernel's functions between the code that fired it and the program:
	 * __traceiter_EVENT, __bpf_trace_EVENT, bpf_trace_runN); the frames
	 * searched for the first one outside it (the program's own come
	 * first); the words above the program's context searched for that
	 * frame's return address (see tp_caller).
	 */
	TD_MAX_GLUE = 8,
	TD_TP_FRAMES = 12,
	TD_TP_SCAN = 64,		/* a power of two */
	TD_MAX_ROUTES = 1024,		/* a profile's caller routes (td_kres) */
	TD_BY_NAME = 1024,		/* reason names and callers merged into OTHER */
};

/* No process: what an exited process of the pid filter becomes. */
enum td_no_pid {
	TD_NO_PID = 0xffffffffu,
};

/* The bytes of td_watch. */
enum td_watch_byte {
	TD_WATCH_OWN = 0,
	TD_WATCH_STACKS = 1,
};

/* No reason: a site not resolved yet, or no captured reason. */
enum td_slot_none {
	TD_SLOT_NONE = 0xffffffffu,
};

/* Rare events, counted in the stats map: indices into td_stats.n. */
enum td_stat {
	TD_STAT_VERIFY_CHECKED,
	TD_STAT_VERIFY_MISMATCH,
	TD_STAT_VERIFY_UNWIND_FAILED,
	TD_STAT_DEEP_UNWIND_FAILED,
	TD_STAT_OWN_CALLS,
	/*
	 * Calls the site cache did not serve: from sites not resolved yet,
	 * behind deeper-frame rules, not found, or (x86 fentry) whose quick
	 * read missed (see fentry_caller_quick).
	 */
	TD_STAT_UNCACHED,
	/*
	 * --verify-caller, a tracepoint's deeper-frame caller: the calls
	 * whose frames were read from the stack as well as unwound, and
	 * compared (see tp_quick_frames; a difference is a mismatch).
	 */
	TD_STAT_VERIFY_FRAMES,
	/*
	 * New sites the programs named themselves (td_kres), and those they
	 * left to user space (a name they could not print or store).
	 */
	TD_STAT_RESOLVED,
	TD_STAT_RESOLVE_DECLINED,
	TD_NR_STATS,
};

/*
 * What happened to the calls of the captured reasons: indices into
 * td_counts.stack. They sit in the counts value the program has in hand,
 * so counting them costs no map lookup.
 */
enum td_stack_stat {
	TD_STACK_MATCHED,	/* calls of a captured reason */
	TD_STACK_SAMPLED_OUT,	/* skipped by --sample */
	TD_STACK_RATE_CAPPED,	/* over the budget */
	TD_STACK_RINGBUF_FULL,
	TD_STACK_EMITTED,
	/*
	 * The background sampler's (see td_config.bg_every_ns): stacks sent,
	 * and lost to a full ring buffer.
	 */
	TD_STACK_BG_SENT,
	TD_STACK_BG_LOST,
	TD_NR_STACK_STATS,
};

/* The per-CPU counters: reason slots, pool slots, then the stack path's. */
struct td_counts {
	__u64 n[TD_ALL_SLOTS];
	__u64 stack[TD_NR_STACK_STATS];
	__u64 seen;		/* calls of the captured reasons, for --sample */
};

/*
 * A CPU's calls from sites not resolved yet, direct-mapped (the pending
 * path without a hash: one lookup of this CPU's value). An entry is taken
 * by the first address to reach it and keeps it: its count only grows, so
 * readers sum it as they do the pending table, which takes the addresses
 * that find their entry taken by another.
 */
struct td_fresh_site {
	__u64 ret;
	__u64 n;
};

struct td_fresh {
	struct td_fresh_site e[TD_FRESH];
};

/*
 * New sites' own counters, so that their calls take the common path from
 * the second on, before user space has named them: a new site whose cache
 * entry is empty takes the next pool slot k (a fetch-and-add on `next`;
 * 5.17 and later), puts its return address in ret[k], counts in slot
 * TD_NR_SLOTS + k, and claims its cache entry for that slot. User space
 * reads ret[] as it reads the pending table (each pool slot's calls go to
 * its site's reason), and once the site is resolved puts the reason in
 * the entry. A slot is never given back: its count only grows. With the
 * pool used up, new sites are pending as before.
 */
struct td_pool {
	__u64 next;
	__u64 ret[TD_POOL];
};

/*
 * Stacks a CPU may still send for one reason: the budget map has one a
 * reason slot, and one (TD_NR_SLOTS) for a uprobe's calls from sites not
 * resolved yet, sent untagged. User space refills the captured reasons'
 * (and that allowance) every second while capturing (the rate cap: no
 * clock read per call), --max-rate split over the CPUs online and evenly
 * over the reasons captured at once, so capture also stops by itself
 * within a second if topdown stops refilling.
 */
struct td_budget {
	__u64 left;
	/*
	 * The untagged calls' allowance: what a site's calls past its first
	 * TD_UNTAGGED_PER_SITE leave for other sites' first calls (0 in a
	 * reason's budget).
	 */
	__u64 keep;
};

struct td_stats {
	__u64 n[TD_NR_STATS];
};

/* A caller function (one address range) whose reason needs deeper frames. */
struct td_caller {
	__u64 lo;
	__u64 hi;
	__u32 rule_first;	/* rules[rule_first .. +rule_count] decide */
	__u32 rule_count;
	__u32 reason;		/* slot when no rule matches */
	__u32 pad;
};

/* A deeper-frame rule: a frame within `depth` frames above the caller. */
struct td_rule {
	__u64 lo;
	__u64 hi;
	__u32 reason;
	__u32 depth;
};

/*
 * The counting paths, one program each (td_fentry, td_fentry_any, ...):
 * the verifier knows .rodata and drops the code of a switch that is off,
 * but not the load of the switch, so the common setting's program reads
 * none.
 */
/* td_config.filter_syscall: which of raw_syscalls's events, tested for syscall_nr */
enum td_syscall_filter {
	TD_SYSCALL_ANY = 0,	/* no test: not a system call's tracepoint */
	TD_SYSCALL_ENTER = 1,	/* sys_enter: the number is its second argument */
	TD_SYSCALL_EXIT = 2,	/* sys_exit: the number is in the registers */
};

enum td_path {
	TD_PATH_ANY = 0,	/* reads filtered and verify_caller */
	TD_PATH_COMMON = 1,	/* neither: no filter, no --verify-caller */
	/*
	 * As COMMON, where the kernel is known to have the kfunc and helper
	 * fentry's one-load read takes (6.2): it tests for neither.
	 */
	TD_PATH_KNOWN = 2,
};

/* Everything the programs are given before load (frozen in .rodata). */
struct td_config {
	/* The traced function's entry as kallsyms gives it: the self-test's
	 * FUNC, arm64's second check of the call before a kprobe's link
	 * register, and FUNC itself on kernels without bpf_get_func_ip.
	 * Otherwise the programs ask the kernel, so they are right whichever
	 * of several same-named functions they are attached to. */
	__u64 func_addr;
	__u32 stack_bytes;	/* bytes of each stack to capture */
	__u32 sample_every;	/* keep 1 in N matching calls for stacks */
	/*
	 * The deepest frame a deeper-frame rule looks at (0: no such rule).
	 * Until user space has filled `deep`, calls from sites not resolved
	 * yet are counted in `early` with this many frames above the caller.
	 */
	__u32 deep_depth;
	/* Flags as bytes: the skeleton maps C bool to MaybeUninit<bool>. */
	__u8 verify_caller;	/* also unwind and compare */
	__u8 user_stacks;
	/* Self-test only: frames above the caller come from the test's context. */
	__u8 synthetic_stack;
	/* Stacks may be captured in this run: the gate is compiled in. */
	__u8 stacks;
	/*
	 * Filters, each compiled out when off: calls of other thread groups,
	 * cgroups or CPUs are neither counted nor captured.
	 */
	__u8 filter_pids;	/* only thread groups listed in the pids map */
	__u8 filter_cgroup;	/* only tasks under the cgroup in cgroup_filter */
	__u8 filter_cpus;	/* only CPUs whose bit is set in cpus */
	/* Any of the three: one test on the counting path when none is on. */
	__u8 filtered;
	/* The kernel has bpf_get_func_ip (5.15); else func_addr is FUNC's. */
	__u8 func_ip_helper;
	/* The kernel has bpf_get_func_arg_cnt (5.17): fentry's one-load path. */
	__u8 arg_cnt_helper;
	/*
	 * New sites' calls go to the per-CPU fresh table first (a pinned
	 * instance: with no reader, its new sites stay pending; see td_fresh).
	 */
	__u8 fresh;
	/* New sites never take pool slots (td_pool): tests of the pending path. */
	__u8 no_pool;
	/* enum td_syscall_filter: only calls of system call syscall_nr count */
	__u8 filter_syscall;
	/*
	 * New sites are named by the program itself (td_kres; needs bpf_loop
	 * and bpf_snprintf): a new reason takes a slot below max_slot, OTHER
	 * then max_slot.
	 */
	__u8 resolve;
	__u32 max_slot;
	/*
	 * --drill (0: off): a captured reason's calls are also counted by
	 * path, their frames from the caller up, this many (td_path_key).
	 */
	__u32 drill_levels;
	__u64 cpus[TD_MAX_CPUS / 64];
	/* A tracepoint's glue: nr_glue ranges [glue_lo, glue_hi) (TD_MAX_GLUE). */
	__u32 nr_glue;
	__u32 syscall_nr;
	__u64 glue_lo[TD_MAX_GLUE];
	__u64 glue_hi[TD_MAX_GLUE];
	/*
	 * The background sampler (0: off): each reason's calls take stacks, on
	 * each CPU, at most one every bg_every_ns on average and bg_burst_ns /
	 * bg_every_ns + 1 in a row after a quiet spell (a token bucket, kept
	 * as its theoretical arrival time: td_buckets). So a burst's first
	 * calls have stacks before user space has seen the burst. It costs the
	 * common path nothing: user space flags the site cache's entries once
	 * a tick (their lowest bit flipped, so the common path misses them),
	 * and a flagged site's call takes the slow path, samples while the
	 * bucket lasts, and then clears the flag.
	 */
	__u64 bg_every_ns;
	__u64 bg_burst_ns;
};

/*
 * What became of one reason's calls at the stack path, on one CPU, by
 * td_stack_stat: the rstacks map has one a reason slot, and one
 * (TD_NR_SLOTS) for calls from sites not resolved yet that were sent
 * untagged (a uprobe's). td_counts.stack holds the sums over reasons.
 */
struct td_rstack {
	__u64 n[TD_NR_STACK_STATS];
};

/*
 * The background sampler's buckets on one CPU: one a reason slot, and one
 * (TD_NR_SLOTS) for calls from sites not resolved yet, whose reason user
 * space learns later.
 */
struct td_buckets {
	__u64 tat[TD_NR_SLOTS + 1];
};

/*
 * The deeper-frame rules (.bss): callers whose reason depends on deeper
 * frames, and their rules. User space fills them once, from the kernel's
 * symbols, then sets `ready`: before the program is loaded where the
 * symbols are read first, else once it is attached, so that reading
 * /proc/kallsyms is off the start path.
 */
struct td_deep {
	__u32 ready;		/* the tables are final */
	__u32 nr_callers;	/* entries used in callers[] */
	struct td_caller callers[TD_MAX_CALLERS];
	struct td_rule rules[TD_MAX_RULES];
};

/*
 * A call counted before the rules were ready, from a site not resolved
 * yet: the caller's return address and the frames above it (zeros past
 * cfg.deep_depth or past the end of the stack; TD_NO_FRAMES, then zeros,
 * where the unwind found no caller), for user space to apply the rules to.
 */
struct td_early_key {
	__u64 ret;
	__u64 frames[TD_MAX_RULE_DEPTH];
};

/*
 * The --pid filter's thread groups (tgids): the first n of tgid. User space
 * replaces a process that exited with TD_NO_PID, in place (the others do
 * not move, so a call of theirs is never missed meanwhile).
 */
struct td_pids {
	__u32 n;
	__u32 tgid[TD_MAX_PIDS];
};

/* A caller function of a captured reason, tagged with that reason. */
struct td_range {
	__u64 lo;
	__u64 hi;
	__u32 reason;
	__u32 pad;
};

/*
 * What user space changes at run time (mmap'ed .data). Several reasons can
 * be captured at once: bit r of `captured` is reason slot r's. To change
 * the set, user space clears the bits of the reasons that leave it,
 * publishes nr_ranges = 0, writes the ranges of every reason in the new
 * set, publishes nr_ranges, then sets the new reasons' bits, and last
 * stores nr_captured. The BPF side reads nr_captured first (0: capture
 * off, no further read) and each other field once. A range counts only
 * while its reason's bit is set, so ranges being rewritten never make a
 * call count for another reason.
 */
struct td_control {
	__u32 nr_captured;	/* reasons whose bit is set; 0: capture off */
	__u32 nr_ranges;
	__u64 captured[TD_NR_SLOTS / 64];
	struct td_range ranges[TD_MAX_STACK_RANGES];
	/*
	 * A topdown process's tgid while it is awake (polling, printing,
	 * symbolizing), 0 while it sleeps: its own calls are left out then.
	 */
	__u32 own_tgid;
	__u32 pad;
	/*
	 * 0, or the CLOCK_MONOTONIC time (ns) up to which a pinned instance's
	 * reader holds the watch key, own_tgid and capture. The reader renews
	 * it whenever it touches them; past it (the reader was killed) the
	 * first watched or captured call puts them back (see lease_check),
	 * holding it as TD_LEASE_TAKING meanwhile from 5.17.
	 */
	__u64 lease_ns;
};

/* lease_ns while the BPF side puts a reader's state back: a time never reached. */
#define TD_LEASE_TAKING (~0ULL)

/*
 * The common path's key into the counter array (mmap'ed .bss), as bytes,
 * each with one writer: TD_WATCH_OWN set while ctl.own_tgid is,
 * TD_WATCH_STACKS while TD_SLOT_NOT_FOUND is captured (calls with no
 * caller found match the cache's empty entries). Any byte set makes the
 * key an index past the array's end: the lookup fails, and the call takes
 * the slow path, which checks the process and runs the stack gate. So the
 * common path tests neither. Capturing any other reason sets no byte:
 * user space flags the reason's site-cache entries, so its calls alone
 * leave the common path (see flagged_site).
 */
struct td_watch {
	__u8 why[4];
};

/*
 * Maps for user space only (no program touches them): the name of each
 * reason slot, claimed by whichever topdown process first needs it, so
 * processes reading one pinned instance agree; and a pinned instance's
 * description as JSON. Kept in the object so that they live, and are
 * pinned, with its other maps.
 */
struct td_name {
	char s[TD_NAME_LEN];
};

/*
 * In-kernel resolution (resolve.bpf.h), in .bss: FUNC's entry, the next
 * reason slot a new name may take, and whether tail calls are told apart. User space sets `ready` last, once the
 * routes and the names it holds are in the maps; until then new sites are
 * counted by address, as on kernels without it.
 */
struct td_kres {
	__u64 func;
	__u32 ready;
	__u32 next;
	/* Tail calls are told apart (as user space does where it reads kcore). */
	__u32 tail;
	__u32 pad;
};

/*
 * A drilled call's path (drill.bpf.h): its reason, the caller's return
 * address, then the frames above it, up to cfg.drill_levels in all; zeros
 * past that and past the stack's end. f[1] is TD_NO_FRAMES where the
 * unwind found no caller.
 */
struct td_path_key {
	__u32 reason;
	__u32 pad;
	__u64 f[TD_DRILL_FRAMES];
};

struct td_meta {
	char json[TD_META_LEN];
};

struct td_sample {
	__u64 ts;
	__u64 caller;		/* the caller's return address */
	__u32 pid;
	__u32 tid;
	__u32 cpu;
	__u32 reason;
	__s32 kstack_bytes;
	__s32 ustack_bytes;
	char comm[16];
	__u32 background;	/* from the background sampler, not a capture */
	/*
	 * ustack holds struct bpf_stack_build_id frames (32 bytes each: a
	 * status, the file's build ID, the offset in the file), which name a
	 * frame after its process has gone; else return addresses.
	 */
	__u32 ustack_build_id;
	__u64 kstack[TD_MAX_FRAMES];
	/*
	 * Last: a record without user frames is reserved without it. Room for
	 * TD_MAX_FRAMES build ID frames (4 words each).
	 */
	__u64 ustack[TD_MAX_FRAMES * 4];
};

#endif
