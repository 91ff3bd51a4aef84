// SPDX-License-Identifier: GPL-2.0
/*
 * topdown's kernel side.
 *
 * Tier 1 (always on): on every call of the traced function, find the
 * caller's return address, map it through the site tables (filled by user
 * space) to a reason slot and bump that slot of a per-CPU array.  Return
 * addresses not yet resolved are counted per address in `pending` until
 * user space has resolved them, so no event is lost or misfiled meanwhile.
 *
 * The common path makes no helper call and tests nothing it can leave to
 * the slow one: the counters are looked up through a key user space makes
 * fail while it needs to see the calls (td_watch: topdown awake, stacks
 * captured), the caller's return address is one load (a plain load the
 * verifier guards, through bpf_rdonly_cast; a probe read where that kfunc
 * is missing), and a direct-mapped cache in .bss names the resolved site
 * and its slot. Everything else (new sites, deeper-frame rules, topdown's
 * own calls, the stack gate) is count_slow's. The --pid, --cgroup and
 * --cpu filters and --verify-caller have a program of their own, the
 * filters first, and only the ones asked for (load-time constants).
 *
 * Tier 2 (on demand): when the reason just counted is the one user space
 * asked stacks of (ctl.reason), the same program sends its kernel (and
 * optionally user) stack to a ring buffer, rate-limited. The gate costs
 * the common path nothing, and is compiled out entirely when the run can
 * never capture (cfg.stacks false): switching capture on is two stores to
 * mapped memory, with nothing to load or attach.
 */
#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "topdown.h"

char LICENSE[] SEC("license") = "GPL";

/* Set by user space before load. */
const volatile struct td_config cfg = {};

/*
 * The key of the single-entry arrays. Passed from .rodata, a lookup takes
 * one instruction for its key where one on the stack takes four: a store,
 * and the stack pointer copied and moved.
 */
static const __u32 zero = 0;

/* Changed by user space at run time (mmap'ed .data); see td_control. */
struct td_control ctl = { .reason = TD_SLOT_NONE };

/* See td_watch: 0 but while user space watches the calls. */
struct td_watch watch;

/*
 * Resolved sites, by hash of the return address (mmap'ed .bss, written by
 * user space, each entry once, in one 8-byte store): an array load instead
 * of a hash lookup.
 */
__u64 site_cache[TD_SITE_CACHE];

/*
 * Where the first calls found FUNC's entry address among the words above
 * ctx (fentry), as a byte offset from ctx (the common path then has no
 * shift to make); the caller's return address is a fixed step further. A
 * trampoline rebuilt with another layout (an fexit program added) makes
 * the next call search again. Shared by the CPUs: a race only repeats a
 * search.
 */
__u32 entry_off;

/*
 * Set when a call site is first counted as pending (mmap'ed .bss): user
 * space, whatever its print interval, clears it and resolves the new
 * sites within a tick, so their calls leave the pending path soon.
 */
__u32 new_sites;

/* The deeper-frame rules; see td_deep. */
struct td_deep deep;

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct td_counts);
} counts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, TD_MAX_SITES);
	__type(key, __u64);
	__type(value, __u32);	/* reason slot */
} sites SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, TD_MAX_SITES);
	__type(key, __u64);
	__type(value, __u64);
} pending SEC(".maps");

/*
 * Calls counted before the deeper-frame rules were ready (see td_early_key):
 * user space adds them to their reasons on every poll, as it does pending
 * sites. Sized to one entry when the run has no deeper-frame rules.
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, TD_MAX_SITES);
	__type(key, struct td_early_key);
	__type(value, __u64);
} early SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct td_stats);
} stats SEC(".maps");

/* Scratch space for unwinds: too big for the 512-byte BPF stack. */
struct td_scratch {
	/*
	 * An unwind's frames, then TD_MAX_RULE_DEPTH zeros that nothing
	 * writes: the frames above any caller index below TD_UNWIND_FRAMES
	 * are read without a bounds test (see frames_above).
	 */
	__u64 ips[TD_UNWIND_FRAMES + TD_MAX_RULE_DEPTH];
	__s32 caller;		/* the caller's index in ips (see caller_index) */
	__s32 deep_caller;	/* its index in deep.callers (see deep_reason) */
	struct td_early_key early;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct td_scratch);
} scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct td_budget);
} budget SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, TD_NR_SLOTS);
	__type(key, __u32);
	__type(value, struct td_name);
} names SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct td_meta);
} meta SEC(".maps");

#define TD_SAMPLES_BYTES (1 << 22)

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, TD_SAMPLES_BYTES);
} samples SEC(".maps");

/*
 * The --pid filter's list (an array map: its lookup is inlined, no helper
 * call; a short list is searched faster than a hash is).
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct td_pids);
} pids SEC(".maps");

/* The --cgroup filter: the cgroup (v2) whose tasks, descendants' included, count. */
struct {
	__uint(type, BPF_MAP_TYPE_CGROUP_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} cgroup_filter SEC(".maps");

/* A bare per-CPU counter, the cost baseline (--companion bare). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} bare SEC(".maps");

/* Keep these types (and the enums in them) in the skeleton's `types`. */
struct td_sample _td_sample = {};
struct td_counts _td_counts = {};
struct td_stats _td_stats = {};
struct td_budget _td_budget = {};
enum td_stack_stat _td_stack_stat = TD_NR_STACK_STATS;
enum td_abi _td_abi = TD_NR_SLOTS;
enum td_stat _td_stat = TD_NR_STATS;
enum td_slot_none _td_slot_none = TD_SLOT_NONE;
enum td_no_pid _td_no_pid = TD_NO_PID;
enum td_watch_byte _td_watch_byte = TD_WATCH_OWN;
struct td_pids _td_pids = {};
struct td_early_key _td_early_key = {};

/* How a program learns about the call: its kind is a constant in each. */
enum td_kind {
	TD_FENTRY,
	TD_KPROBE,
	TD_SELFTEST,
};

/*
 * FUNC's own address, as the kernel attached the program to it; the one
 * kallsyms gives where the kernel has no bpf_get_func_ip (before 5.15).
 */
static __always_inline __u64 func_ip(void *ctx, enum td_kind kind)
{
	if (kind == TD_SELFTEST || !cfg.func_ip_helper)
		return cfg.func_addr;
	/* inlined for fentry: a load from the trampoline's frame */
	return bpf_get_func_ip(ctx);
}

static __always_inline bool in_entry(__u64 ip, __u64 func)
{
	return ip - func < TD_ENTRY_WINDOW;
}

/*
 * Words of the trampoline frame from byte offset off (0: the first argument
 * at ctx). Where the kernel has bpf_rdonly_cast (6.2 and later) these are
 * plain loads it guards, reading 0 where nothing is mapped; elsewhere one
 * probe read, of just these words (a long read could run off the top of an
 * interrupt stack and fail).
 */
#if defined(__TARGET_ARCH_arm64)
#define TD_FRAME_WORDS 4
#define TD_CALLER_STEP 2
#else
#define TD_FRAME_WORDS 2
#define TD_CALLER_STEP 1
#endif

/* The byte offsets from ctx of the words searched: 0 to TD_SCAN_SLOTS - 1. */
#define TD_WORD_OFFSETS ((TD_SCAN_SLOTS - 1) * 8)

/* The address of the word at byte offset off, bounded to those searched. */
static __always_inline void *frame_at(void *ctx, __u32 off)
{
	return ctx + (off & TD_WORD_OFFSETS);
}

static __always_inline bool frame_words(void *ctx, __u32 off, __u64 w[TD_FRAME_WORDS])
{
	void *at = frame_at(ctx, off);

	if (bpf_ksym_exists(bpf_rdonly_cast)) {
		struct pt_regs *r = bpf_core_cast(at, struct pt_regs);

#if defined(__TARGET_ARCH_arm64)
		w[0] = r->regs[0];
		w[1] = r->regs[1];
		w[2] = r->regs[2];
		w[3] = r->regs[3];
#else
		w[0] = r->r15;
		w[1] = r->r14;
#endif
		return true;
	}
	return bpf_probe_read_kernel(w, TD_FRAME_WORDS * 8, at) == 0;
}

/*
 * Whether the word at byte offset off holds FUNC's entry address, and then
 * the caller's return address. x86: the trampoline was called from FUNC's
 * entry, so FUNC+5 (FUNC+9 behind IBT) is the word right below the caller's
 * return address.
 * arm64: FUNC's patched entry is "mov x9, x30; bl <trampoline>", and the
 * trampoline pushes two frame records, {FP, x9 = the caller's return
 * address} for the parent, then {FP, LR = FUNC+8 (+12 behind a BTI)} for
 * FUNC (arch/arm64/net/bpf_jit_comp.c, prepare_trampoline), so the caller
 * is two words up; and since slots below the records are not written
 * before the programs run (a stale FUNC+8 can be there), the entry word
 * must be in the frame record whose FP points at the parent record.
 */
static __always_inline __u64 caller_at(void *ctx, __u32 off, __u64 func)
{
#if defined(__TARGET_ARCH_arm64)
	__u64 w[TD_FRAME_WORDS];

	if (off < 8 || !frame_words(ctx, off - 8, w))
		return 0;
	if (!in_entry(w[1], func) || w[0] != (__u64)ctx + off + 8)
		return 0;
	return w[3];
#else
	if (bpf_ksym_exists(bpf_rdonly_cast)) {
		/* two plain loads: the common path under fentry */
		struct pt_regs *r = bpf_core_cast(frame_at(ctx, off), struct pt_regs);

		return in_entry(r->r15, func) ? r->r14 : 0;
	} else {
		__u64 w[TD_FRAME_WORDS];

		if (!frame_words(ctx, off, w) || !in_entry(w[0], func))
			return 0;
		return w[1];
	}
#endif
}

#if defined(__TARGET_ARCH_x86)
/*
 * Whether the instruction before return address `ret` is a call: a direct
 * one (e8 rel32) or an indirect one (ff /2 through a register). Reads the 8
 * code bytes before `ret`; false where unmapped.
 */
static __always_inline bool called_from(__u64 ret)
{
	__u64 code = 0;

	if (bpf_ksym_exists(bpf_rdonly_cast))
		code = bpf_core_cast((void *)(ret - 8), struct pt_regs)->r15;
	else if (bpf_probe_read_kernel(&code, sizeof(code), (void *)(ret - 8)))
		return false;
	/*
	 * call rel32 (e8): to FUNC, or to a retpoline or call-depth thunk,
	 * whose targets are not known here: any call rel32 is taken.
	 */
	if ((__u8)(code >> 24) == 0xe8)
		return true;
	/* call *%reg (ff d0+r) */
	return (__u8)(code >> 48) == 0xff && ((__u8)(code >> 56) & 0xf8) == 0xd0;
}

/*
 * Trampolines of newer kernels (7.x) with an fexit program are jumped to
 * from FUNC's entry, not called: there is no FUNC+5 word, and the caller's
 * return address is right above the saved RBP, after the arguments and the
 * return-value slot: word nr_args + 2. Searched around there, and taken
 * only if it follows a call instruction.
 */
static __always_inline __u64 jmp_caller_at(void *ctx, __u32 off)
{
	__u64 w[TD_FRAME_WORDS];

	if (!frame_words(ctx, off, w) || w[0] < 0xffff000000000000ULL || !called_from(w[0]))
		return 0;
	return w[0];
}
#endif

/* entry_off with this bit set: a jumped-to trampoline, the caller at the word. */
#define TD_JMP_FRAME 0x80
_Static_assert(TD_JMP_FRAME > TD_WORD_OFFSETS, "TD_JMP_FRAME is apart from the offsets");

/*
 * The search for FUNC's entry word among the words above ctx (their number
 * depends on FUNC's arguments and on the other programs on the
 * trampoline), when it is not where it was last time: a subprogram, so
 * that the common path stays short.
 */
static __noinline __u64 fentry_caller_search(void *ctx, __u64 func)
{
	__u64 ret;

#if defined(__TARGET_ARCH_x86)
	/* read again: kept from the common path, it took a register there */
	__u32 k = *(volatile __u32 *)&entry_off;

	if (k & TD_JMP_FRAME) {
		ret = jmp_caller_at(ctx, k & TD_WORD_OFFSETS);
		if (ret)
			return ret;
	}
#endif
	for (__u32 i = 0; i < TD_SCAN_SLOTS - TD_CALLER_STEP; i++) {
		ret = caller_at(ctx, i * 8, func);
		if (ret) {
			entry_off = i * 8;
			return ret;
		}
	}
#if defined(__TARGET_ARCH_x86)
	/* jumped-to trampolines (7.x) all have bpf_get_func_arg_cnt (5.17) */
	if (cfg.arg_cnt_helper) {
		/* inlined for fentry: the trampoline's count of argument words */
		__u32 n = bpf_get_func_arg_cnt(ctx);

		for (__u32 d = 1; d <= 4; d++) {
			__u32 i = n + d;

			if (i >= TD_SCAN_SLOTS)
				break;
			ret = jmp_caller_at(ctx, i * 8);
			if (ret) {
				entry_off = TD_JMP_FRAME | i * 8;
				return ret;
			}
		}
	}
#endif
	return 0;
}

/*
 * The cheap way to find the caller under fentry: where the entry word was
 * last time, else the search.
 */
static __always_inline __u64 fentry_caller(void *ctx)
{
	__u64 func = func_ip(ctx, TD_FENTRY), ret;

	/* a jumped-to frame's word is the caller's, no entry address: searched */
	ret = caller_at(ctx, entry_off, func);
	if (ret)
		return ret;
	return fentry_caller_search(ctx, func);
}

#if defined(__TARGET_ARCH_x86)
/*
 * x86 fentry: the common path reads one word, two above the arguments the
 * trampoline saved (their count is at ctx - 8), and takes it only if the
 * site cache knows it. Every layout an x86 trampoline has (5.17 to 7.x)
 * puts one of two words there:
 *   - no return-value slot (fentry programs only, called from FUNC's
 *     entry): saved RBP, FUNC+5 (+9 behind IBT), then the caller's return
 *     address: the caller;
 *   - a return-value slot (an fexit or fmod_ret program too): the word is
 *     8 bytes higher in the frame. Called from FUNC's entry, it is FUNC+5,
 *     which is no caller the cache holds, so the call takes the checked
 *     path (fentry_caller); jumped to (7.x), it is the caller again.
 * So a hit is the caller, with no check of the entry word on the common
 * path (two guarded loads and a compare fewer); a miss looks again the
 * checked way. --verify-caller checks this against the unwind.
 */
#define TD_QUICK_FENTRY 1

/* The probe read where bpf_rdonly_cast is missing: apart, or clang merges the loads. */
static __always_inline __u64 read_word(void *at)
{
	__u64 w = 0;

	bpf_probe_read_kernel(&w, sizeof(w), at);
	barrier_var(w);
	return w;
}

static __always_inline __u64 fentry_caller_quick(void *ctx)
{
	/* inlined for fentry: a load of ctx - 8 */
	void *at = ctx + ((bpf_get_func_arg_cnt(ctx) * 8) & TD_WORD_OFFSETS);

	if (__builtin_expect(bpf_ksym_exists(bpf_rdonly_cast), 1))
		/* r13: the third word */
		return bpf_core_cast(at, struct pt_regs)->r13;
	return read_word(at + 16);
}
#else
/* arm64: the checked way is the only one (two frame records to tell apart). */
#define TD_QUICK_FENTRY 0
#define fentry_caller_quick fentry_caller
#endif

/*
 * Whether fentry's common path reads the caller with one load: it needs
 * the trampoline's argument count, bpf_get_func_arg_cnt (5.17); before,
 * the checked way (fentry_caller) is the common path.
 */
static __always_inline bool quick_fentry(void)
{
	return TD_QUICK_FENTRY && cfg.arg_cnt_helper;
}

/* The probe read: kept out of kprobe_caller, whose plain load clang would merge with it. */
static __always_inline __u64 kprobe_ret_ip(struct pt_regs *ctx)
{
	__u64 ret = 0;

	BPF_KPROBE_READ_RET_IP(ret, ctx);
	barrier_var(ret);
	return ret;
}

/* Under a kprobe at FUNC's entry the return address is where SP points (x86), or in LR. */
static __always_inline __u64 kprobe_caller(struct pt_regs *ctx)
{
#if defined(__TARGET_ARCH_x86)
	/*
	 * pt_regs is only the type to read through: its first word (r15) is
	 * the one at SP, with no CO-RE offset to add.
	 */
	if (bpf_ksym_exists(bpf_rdonly_cast))
		return *(__u64 *)bpf_core_cast((void *)PT_REGS_SP(ctx), struct pt_regs);
#endif
	return kprobe_ret_ip(ctx);
}

#if defined(__TARGET_ARCH_arm64)
/*
 * arm64, kprobe mode (the unwind's entry frame is FUNC+0, not the FUNC+8
 * the fentry trampoline leaves): at its first instruction FUNC has not
 * pushed its frame record yet, so the kernel's frame-pointer unwind goes
 * from FUNC straight to its caller's caller; the caller's return address is
 * only in the link register (what BPF_KPROBE_READ_RET_IP reads).  Put it in
 * place of the entry frame when the instruction before it is a call of
 * FUNC ("bl FUNC", or an indirect "blr"), so that deeper-frame rules see
 * the same frames as under fentry and --verify-caller checks the link
 * register against the code that called FUNC.  Returns the caller's index
 * in s->ips, or -1.
 */
static __always_inline int entry_caller(void *ctx, struct td_scratch *s, int i, __u64 func)
{
	struct pt_regs *regs = ctx;
	__u64 lr, call;
	__u32 insn;

	if (s->ips[i] != func && s->ips[i] != cfg.func_addr)
		return i + 1;
	if (bpf_probe_read_kernel(&lr, sizeof(lr), &regs->regs[30]))
		return -1;
	call = lr - 4;
	if (bpf_probe_read_kernel(&insn, sizeof(insn), (void *)call))
		return -1;
	if ((insn & 0xfffffc1f) != 0xd63f0000 &&	/* blr xN */
	    ((insn & 0xfc000000) != 0x94000000 ||	/* bl FUNC */
	     (call + (__s64)((__s32)(insn << 6) >> 4) != func &&
	      call + (__s64)((__s32)(insn << 6) >> 4) != cfg.func_addr)))
		return -1;
	s->ips[i] = lr;
	return i;
}
#else
static __always_inline int entry_caller(void *ctx, struct td_scratch *s, int i, __u64 func)
{
	return i + 1;
}
#endif

/* The frames searched for the cheap caller where the unwind has no entry frame. */
#define TD_HINT_FRAMES 6

/* What bpf_loop's body sees of the search for FUNC's entry frame. */
struct td_frame_walk {
	struct td_scratch *s;
	__u64 func;
	long n;
	__s32 at;
};

/* bpf_loop's body: frame i; 1 (stop) at the first in FUNC's entry. */
static long entry_frame_step(__u32 i, struct td_frame_walk *w)
{
	if (i >= TD_UNWIND_FRAMES - 1 || i + 1 >= w->n)
		return 1;
	if (!in_entry(w->s->ips[i], w->func))
		return 0;
	w->at = i;
	return 1;
}

/*
 * The expensive way: a full unwind.  Returns the index of the caller's
 * frame in s->ips, or -1: the frame above FUNC's entry frame, or, where
 * the unwind has none (a jumped-to trampoline on x86 7.x), `hint` (the
 * caller the cheap way found) if it is among the first frames, after those
 * of the BPF program (up to three deep: the program, count_slow, verify or
 * deep_reason) and the trampoline.
 */
static __always_inline int unwind_caller(void *ctx, struct td_scratch *s, enum td_kind kind,
					 __u64 hint, bool loops)
{
	__u64 func = func_ip(ctx, kind);
	long n = bpf_get_stack(ctx, s->ips, TD_UNWIND_FRAMES * sizeof(s->ips[0]), 0);

	if (n <= 0)
		return -1;
	n /= 8;
	if (loops) {
		/* the body verified once, not once per frame */
		struct td_frame_walk w = { .s = s, .func = func, .n = n, .at = -1 };

		bpf_loop(TD_UNWIND_FRAMES - 1, entry_frame_step, &w, 0);
		if (w.at >= 0)
			return entry_caller(ctx, s, w.at & (TD_UNWIND_FRAMES - 1), func);
	} else {
		for (int i = 0; i < TD_UNWIND_FRAMES - 1; i++) {
			if (i + 1 >= n)
				break;
			if (in_entry(s->ips[i], func))
				return entry_caller(ctx, s, i, func);
		}
	}
	for (int i = 0; i < TD_HINT_FRAMES; i++) {
		if (i >= n)
			break;
		if (hint && s->ips[i] == hint)
			return i;
	}
	return -1;
}

static __always_inline void stat_inc(enum td_stat which)
{
	struct td_stats *st = bpf_map_lookup_elem(&stats, &zero);

	if (st)
		st->n[which]++;
}

/*
 * A raw tracepoint's context, as the UAPI fixes it. Not vmlinux.h's type,
 * whose accesses are CO-RE relocations: each type relocated costs a search
 * of the kernel's BTF at load, and this one reaches the counting programs
 * through synthetic_unwind.
 */
struct td_raw_tp_args {
	__u64 args[TD_SELFTEST_ARGS];
};

/*
 * For td_selftest: the caller's return address and the frames above it are
 * the raw tracepoint arguments, so rule matching can be tested on stacks
 * made up by the test; a first frame of TD_NO_FRAMES makes the unwind
 * fail.  Production programs never take this path (the verifier drops it:
 * cfg.synthetic_stack is a constant false there).
 */
static __always_inline int synthetic_unwind(void *ctx, struct td_scratch *s)
{
	struct td_raw_tp_args *a = ctx;

	if (a->args[1] == TD_NO_FRAMES)
		return -1;
	for (int i = 0; i < TD_SELFTEST_ARGS; i++)
		s->ips[i] = a->args[i];
	return 0;
}

/* How count_in counted a call. */
enum td_counted {
	TD_COUNT_FULL,		/* not: the table is full */
	TD_COUNT_ADDED,
	TD_COUNT_INSERTED,	/* the key's first call on this CPU */
};

/*
 * Adds a call to `key`'s count in per-CPU hash `map` (pending, early),
 * inserting the key on its first call.
 */
static __always_inline enum td_counted count_in(void *map, void *key)
{
	__u64 one = 1, *p;

	if ((p = bpf_map_lookup_elem(map, key))) {
		(*p)++;
	} else if (bpf_map_update_elem(map, key, &one, BPF_NOEXIST) == 0) {
		return TD_COUNT_INSERTED;
	} else if ((p = bpf_map_lookup_elem(map, key))) {
		(*p)++;		/* lost a race to insert */
	} else {
		return TD_COUNT_FULL;
	}
	return TD_COUNT_ADDED;
}

/*
 * The unwind for a call from a deeper-frame caller, or for an early count:
 * the caller's index in s->ips, or -1.  The unwind returns a different
 * constant on each of its paths, and what follows was verified once for
 * each (a third of the start-up with a profile of deeper-frame rules).
 * Through scratch memory, whose values the verifier does not track, it is
 * verified once.
 */
static __always_inline int caller_index(void *ctx, struct td_scratch *s, __u64 ret,
					enum td_kind kind, bool loops)
{
	s->caller = kind == TD_SELFTEST && cfg.synthetic_stack ? synthetic_unwind(ctx, s)
							       : unwind_caller(ctx, s, kind, ret, loops);
	return *(volatile __s32 *)&s->caller;
}

/* Index in deep.callers of the caller that `ret` returns into, or -1. */
static __always_inline int deep_caller(__u64 ret)
{
	__u32 nr = deep.nr_callers;

	for (__u32 c = 0; c < TD_MAX_CALLERS; c++) {
		if (c >= nr)
			break;
		if (ret - 1 >= deep.callers[c].lo && ret - 1 < deep.callers[c].hi)
			return c;
	}
	return -1;
}

/*
 * The cfg.deep_depth frames above the caller at index ci of s->ips into
 * s->early.frames, zeros past that depth (and past the stack's end, as
 * bpf_get_stack leaves them).  Straight-line code: no test of ci against
 * the end of ips, whose padding makes every read in bounds.  A verifier
 * that linked such a test to ci would have checked the rule loops once for
 * each range of ci it left.
 */
static __always_inline void frames_above(struct td_scratch *s, int ci)
{
	__u32 at = ci & (TD_UNWIND_FRAMES - 1);

	for (__u32 d = 1; d <= TD_MAX_RULE_DEPTH; d++)
		s->early.frames[d - 1] = d <= cfg.deep_depth ? s->ips[at + d] : 0;
}

/*
 * Whether rule idx (below TD_MAX_RULES) holds a frame within its depth
 * above the caller.  The profile's deepest rule bounds the loop.
 */
static __always_inline bool rule_holds(struct td_scratch *s, __u32 idx)
{
	for (__u32 d = 0; d < TD_MAX_RULE_DEPTH && d < cfg.deep_depth; d++) {
		__u64 ip = s->early.frames[d];

		/* a zero frame ends the stack */
		if (d >= deep.rules[idx].depth || !ip)
			return false;
		/* -1: a call can be a function's last instruction */
		if (ip - 1 >= deep.rules[idx].lo && ip - 1 < deep.rules[idx].hi)
			return true;
	}
	return false;
}

/* What bpf_loop's body sees of the rule walk, and the reason it finds. */
struct td_rule_walk {
	struct td_scratch *s;
	__u32 first;
	__u32 reason;
};

/* bpf_loop's body: rule first + i; 1 (stop) once a rule holds. */
static long rule_step(__u32 i, struct td_rule_walk *w)
{
	__u32 idx = w->first + i;

	if (idx >= TD_MAX_RULES)
		return 1;
	if (!rule_holds(w->s, idx))
		return 0;
	w->reason = deep.rules[idx].reason;
	return 1;
}

/*
 * Reason of a call from deeper-frame caller `dc` (an index in
 * deep.callers): the first rule, in order, with a frame in its range
 * within its depth above the caller, else the caller's own reason.  The
 * tables are in .bss, unknown to the verifier, so it checks the loops once
 * whatever the profile; Deep::slot in abi.rs decides the same for the
 * calls counted before the tables were filled.
 */
static __always_inline __u32 deep_reason(void *ctx, __u64 ret, int dc, enum td_kind kind,
					 bool loops)
{
	__u32 c, first, nr, dflt;
	struct td_scratch *s = bpf_map_lookup_elem(&scratch, &zero);
	int ci;

	if (!s)
		return deep.callers[dc & (TD_MAX_CALLERS - 1)].reason;
	/* dc as well: deep_caller returns a constant on each of its paths */
	s->deep_caller = dc;
	c = *(volatile __s32 *)&s->deep_caller & (TD_MAX_CALLERS - 1);
	first = deep.callers[c].rule_first;
	nr = deep.callers[c].rule_count;
	dflt = deep.callers[c].reason;
	ci = caller_index(ctx, s, ret, kind, loops);
	if (ci < 0) {
		stat_inc(TD_STAT_DEEP_UNWIND_FAILED);
		return dflt;
	}
	frames_above(s, ci);
	if (loops) {
		/*
		 * The body is verified once: unrolled, the loops cost the
		 * verifier several times the instructions, and start-up time
		 * with them (docs/performance.md).
		 */
		struct td_rule_walk w = { .s = s, .first = first, .reason = dflt };

		bpf_loop(nr < TD_MAX_RULES ? nr : TD_MAX_RULES, rule_step, &w, 0);
		return w.reason;
	}
	for (__u32 r = 0; r < TD_MAX_RULES; r++) {
		__u32 idx = first + r;

		if (r >= nr || idx >= TD_MAX_RULES)
			break;
		if (rule_holds(s, idx))
			return deep.rules[idx].reason;
	}
	return dflt;
}

/*
 * Counts a call from a site not resolved yet, made before the deeper-frame
 * rules were ready, under its return address and the frames above it
 * (td_early_key); returns TD_SLOT_NONE, or TD_SLOT_SITES_FULL where the
 * table is full.  Costs an unwind per call, for the moments between attach
 * and user space's filling the rules.
 */
static __always_inline __u32 count_early(void *ctx, struct td_counts *c, __u64 ret,
					 enum td_kind kind, bool loops)
{
	struct td_scratch *s = bpf_map_lookup_elem(&scratch, &zero);
	int ci;

	if (!s) {
		c->n[TD_SLOT_SITES_FULL]++;
		return TD_SLOT_SITES_FULL;
	}
	ci = caller_index(ctx, s, ret, kind, loops);
	s->early.ret = ret;
	if (ci >= 0) {
		frames_above(s, ci);
	} else {
		/* Marked, so user space counts it as deep_reason() would. */
		s->early.frames[0] = TD_NO_FRAMES;
		for (__u32 d = 1; d < TD_MAX_RULE_DEPTH; d++)
			s->early.frames[d] = 0;
	}
	if (count_in(&early, &s->early))
		return TD_SLOT_NONE;
	c->n[TD_SLOT_SITES_FULL]++;
	return TD_SLOT_SITES_FULL;
}

/* A return address's entry: bits 3 and up (two call sites are 5 bytes apart at least). */
static __always_inline __u32 site_index(__u64 ret)
{
	return (ret >> 3) & (TD_SITE_CACHE - 1);
}

/*
 * Whether `ret`'s entry in the direct-mapped cache (put in *e) names it: a
 * resolved site. An empty entry is 0, which names return address 0 with
 * slot TD_SLOT_NOT_FOUND (the caller not found: right) and no other.
 */
static __always_inline bool cached(__u64 ret, __u64 *e)
{
	*e = site_cache[site_index(ret)];
#if defined(__TARGET_ARCH_x86)
	/*
	 * All of x86-64's kernel text (modules and BPF code too) lies in the
	 * top 2 GiB, so the low 32 bits name a return address: one compare.
	 */
	return (__u32)*e == (__u32)ret;
#else
	return !((*e ^ ret) << (64 - TD_SITE_SHIFT));
#endif
}

/* A resolved site's slot, from the direct-mapped cache; TD_SLOT_NONE if not there. */
static __always_inline __u32 cached_reason(__u64 ret)
{
	__u64 e;

	return cached(ret, &e) ? e >> TD_SLOT_SHIFT : TD_SLOT_NONE;
}

/*
 * Counts a call whose site is not in the cache (new, behind a deeper-frame
 * rule, or not found) on this CPU's counters `c`; returns its slot, or
 * TD_SLOT_NONE if it was counted as pending.
 */
static __always_inline __u32 count_uncached(void *ctx, struct td_counts *c, __u64 ret,
					    enum td_kind kind, bool loops)
{
	__u32 *slot, r = TD_SLOT_NONE;
	int dc;

	if (!ret) {
		r = TD_SLOT_NOT_FOUND;
	} else if ((slot = bpf_map_lookup_elem(&sites, &ret))) {
		r = *slot;
	} else if (cfg.deep_depth) {
		/* Read once, and before the tables it guards. */
		if (!*(volatile __u32 *)&deep.ready)
			return count_early(ctx, c, ret, kind, loops);
		asm volatile("" ::: "memory");
		/* Only callers with rules pay for an unwind. */
		dc = deep_caller(ret);
		if (dc >= 0)
			r = deep_reason(ctx, ret, dc, kind, loops);
	}
	if (r != TD_SLOT_NONE) {
		c->n[r & (TD_NR_SLOTS - 1)]++;
		return r;
	}
	/* First calls from a site: counted per address until resolved. */
	switch (count_in(&pending, &ret)) {
	case TD_COUNT_INSERTED:
		*(volatile __u32 *)&new_sites = 1;
		return TD_SLOT_NONE;
	case TD_COUNT_ADDED:
		return TD_SLOT_NONE;
	default:
		break;
	}
	c->n[TD_SLOT_SITES_FULL]++;
	return TD_SLOT_SITES_FULL;
}

static __always_inline void verify_body(void *ctx, __u64 cheap, enum td_kind kind, bool loops)
{
	struct td_scratch *s = bpf_map_lookup_elem(&scratch, &zero);
	int ci;

	if (!s)
		return;
	/*
	 * Where the unwind has no entry frame (a jumped-to trampoline), the
	 * check is that the cheap caller is among the first frames.
	 */
	ci = unwind_caller(ctx, s, kind, cheap, loops);
	stat_inc(TD_STAT_VERIFY_CHECKED);
	if (ci < 0 || ci >= TD_UNWIND_FRAMES) {
		stat_inc(TD_STAT_VERIFY_UNWIND_FAILED);
		return;
	}
	if (s->ips[ci] != cheap)
		stat_inc(TD_STAT_VERIFY_MISMATCH);
}

/*
 * Every subprogram that reaches a bpf_loop callback comes twice, with and
 * without the helper: a kernel that predates it (5.17) counts no callback
 * as a subprogram, and refuses any program whose code names one, even
 * where a .rodata switch leaves it dead.
 */
static __noinline void verify(void *ctx, __u64 cheap, enum td_kind kind)
{
	verify_body(ctx, cheap, kind, false);
}

static __noinline void verify_loop(void *ctx, __u64 cheap, enum td_kind kind)
{
	verify_body(ctx, cheap, kind, true);
}

static __always_inline bool is_own_call(void)
{
	__u32 own = *(volatile __u32 *)&ctl.own_tgid;

	return own && bpf_get_current_pid_tgid() >> 32 == own;
}

/*
 * A reader killed by SIGKILL cannot put back what it set: the program
 * would send every call down the slow path until the next reader came.
 * Its lease lets the first watched call after it do that instead. A reader
 * found to have lost its lease publishes its state again.
 */
static __always_inline void lease_check(void)
{
	__u64 lease = *(volatile __u64 *)&ctl.lease_ns;

	if (!lease || bpf_ktime_get_ns() < lease)
		return;
	*(volatile __u64 *)&ctl.lease_ns = 0;
	*(volatile __u32 *)&ctl.reason = TD_SLOT_NONE;
	*(volatile __u32 *)&ctl.own_tgid = 0;
	*(volatile __u8 *)&watch.why[TD_WATCH_OWN] = 0;
	*(volatile __u8 *)&watch.why[TD_WATCH_STACKS] = 0;
}

/* What bpf_loop's body sees of the search for a stack reason's range. */
struct td_range_walk {
	__u64 ret;
	__u32 want;
	__u32 found;
};

/* bpf_loop's body: range i; 1 (stop) once it holds the call. */
static long range_step(__u32 i, struct td_range_walk *w)
{
	if (i >= TD_MAX_STACK_RANGES)
		return 1;
	if (ctl.ranges[i].reason != w->want || w->ret - 1 < ctl.ranges[i].lo ||
	    w->ret - 1 >= ctl.ranges[i].hi)
		return 0;
	w->found = 1;
	return 1;
}

/*
 * Whether a call from a site not resolved yet belongs to stack reason
 * `want`: it lies in one of that reason's caller ranges. Ranges carry their
 * reason, so ranges being rewritten for another reason never make a call
 * count for `want`.
 */
static __always_inline bool in_stack_ranges(__u64 ret, __u32 want, bool loops)
{
	__u32 nr = *(volatile __u32 *)&ctl.nr_ranges;

	if (loops) {
		struct td_range_walk w = { .ret = ret, .want = want };

		bpf_loop(nr < TD_MAX_STACK_RANGES ? nr : TD_MAX_STACK_RANGES, range_step, &w, 0);
		return w.found;
	}
	for (__u32 i = 0; i < TD_MAX_STACK_RANGES; i++) {
		if (i >= nr)
			break;
		if (ctl.ranges[i].reason == want && ret - 1 >= ctl.ranges[i].lo &&
		    ret - 1 < ctl.ranges[i].hi)
			return true;
	}
	return false;
}

/*
 * Sends the stack of this call, of stack reason `want`, to user space;
 * `c` is this CPU's counters.
 */
static __always_inline void sample(void *ctx, struct td_counts *c, __u64 ret, __u32 want)
{
	struct td_budget *b;
	struct td_sample *e;
	__u64 id;

	c->stack[TD_STACK_MATCHED]++;
	if (cfg.sample_every > 1 && c->seen++ % cfg.sample_every) {
		c->stack[TD_STACK_SAMPLED_OUT]++;
		return;
	}
	b = bpf_map_lookup_elem(&budget, &zero);
	if (!b || !b->left) {
		c->stack[TD_STACK_RATE_CAPPED]++;
		return;
	}
	b->left--;
	e = bpf_ringbuf_reserve(&samples, sizeof(*e), 0);
	if (!e) {
		c->stack[TD_STACK_RINGBUF_FULL]++;
		return;
	}
	id = bpf_get_current_pid_tgid();
	e->ts = bpf_ktime_get_ns();
	e->caller = ret;
	e->pid = id >> 32;
	e->tid = (__u32)id;
	e->cpu = bpf_get_smp_processor_id();
	e->reason = want;
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	e->kstack_bytes = bpf_get_stack(ctx, e->kstack, cfg.stack_bytes, 0);
	e->ustack_bytes = 0;
	if (cfg.user_stacks)
		e->ustack_bytes = bpf_get_stack(ctx, e->ustack, cfg.stack_bytes,
						BPF_F_USER_STACK);
	/*
	 * No wake-up per stack: topdown reads the buffer on its 50 ms ticks.
	 * Woken for each stack, it entered the kernel once per stack, and with
	 * FUNC on the system-call path that call was counted and captured in
	 * turn: topdown fed itself. Past half full it is woken, so a burst
	 * between two ticks does not fill the buffer.
	 */
	bpf_ringbuf_submit(e, bpf_ringbuf_query(&samples, BPF_RB_AVAIL_DATA) > TD_SAMPLES_BYTES / 2 ?
				      BPF_RB_FORCE_WAKEUP :
				      BPF_RB_NO_WAKEUP);
	c->stack[TD_STACK_EMITTED]++;
}

/* Whether thread group `tgid` is in the --pid filter's list. */
static __always_inline bool pid_listed(__u32 tgid)
{
	struct td_pids *p = bpf_map_lookup_elem(&pids, &zero);
	__u32 n;

	if (!p)
		return false;
	n = p->n;
	for (__u32 i = 0; i < TD_MAX_PIDS; i++) {
		if (i >= n)
			break;
		if (p->tgid[i] == tgid)
			return true;
	}
	return false;
}

/*
 * Whether this call passes the filters: the cheapest test first. A filter
 * that is off is a constant false in .rodata, so the verifier drops its
 * code: with no filter the counting path is as it was.
 */
static __always_inline bool wanted(enum td_path path)
{
	if (path != TD_PATH_ANY || !cfg.filtered)
		return true;
	if (cfg.filter_cpus) {
		/* inlined on x86 and arm64: a per-CPU load */
		__u32 cpu = bpf_get_smp_processor_id();

		if (cpu >= TD_MAX_CPUS || !((cfg.cpus[cpu / 64] >> (cpu % 64)) & 1))
			return false;
	}
	if (cfg.filter_pids && !pid_listed(bpf_get_current_pid_tgid() >> 32))
		return false;
	/* 1: current is in the cgroup or below it */
	if (cfg.filter_cgroup && bpf_current_task_under_cgroup(&cgroup_filter, 0) != 1)
		return false;
	return true;
}

/*
 * The stack gate, capture on: whether this call, of slot r (TD_SLOT_NONE:
 * pending), belongs to stack reason `want`, and then its stack; `c` is
 * this CPU's counters.
 */
static __always_inline void stack_gate(void *ctx, struct td_counts *c, __u64 ret, __u32 r,
				       __u32 want, bool loops)
{
	if (r != want && (r != TD_SLOT_NONE || !in_stack_ranges(ret, want, loops)))
		return;
	sample(ctx, c, ret, want);
}

/* Whether every call of path `path` is checked against an unwind (--verify-caller). */
static __always_inline bool verifies_all(enum td_path path)
{
	return path == TD_PATH_ANY && cfg.verify_caller;
}

/* The caller's return address as the common path reads it: one load. */
static __always_inline __u64 quick_caller(void *ctx, enum td_kind kind)
{
	if (kind == TD_FENTRY)
#if TD_QUICK_FENTRY
		return quick_fentry() ? fentry_caller_quick(ctx) : fentry_caller(ctx);
#else
		return fentry_caller(ctx);
#endif
	if (kind == TD_KPROBE)
		return kprobe_caller(ctx);
	return ((struct td_raw_tp_args *)ctx)->args[0];
}

/*
 * Every call the common path does not count: those user space watches
 * (`c` NULL: see td_watch; with --verify-caller, every call), and those
 * whose quick read the site cache did not know. Leaves out topdown's own
 * calls, finds the caller the checked way where the quick read may be
 * wrong (fentry on x86), counts the call, then runs the stack gate. One
 * subprogram called once: the verifier walks the new-site path (and its
 * deeper-frame rules) once, and the common path keeps no values for it.
 */
static __always_inline void count_slow_body(void *ctx, struct td_counts *c, enum td_kind kind,
					    enum td_path path, bool loops)
{
	bool verify_all = verifies_all(path);
	__u64 quick, ret;
	__u32 r, want;
	bool hit;

	if (!c)
		lease_check();
	if (!c || verify_all) {
		if (is_own_call()) {
			/* Symbolizing reads files: don't count what we cause. */
			stat_inc(TD_STAT_OWN_CALLS);
			return;
		}
		c = bpf_map_lookup_elem(&counts, &zero);
		if (!c)
			return;
	}
	/* read again: passed from the common path, it took a register there */
	ret = quick = quick_caller(ctx, kind);
	r = cached_reason(quick);
	hit = r != TD_SLOT_NONE;
	if (kind == TD_FENTRY && quick_fentry() && (!hit || verify_all)) {
		ret = fentry_caller(ctx);
		r = cached_reason(ret);
	}
	if (!hit)
		stat_inc(TD_STAT_UNCACHED);
	if (verify_all) {
		if (loops)
			verify_loop(ctx, ret, kind);
		else
			verify(ctx, ret, kind);
		/* the quick read's claim: a cached site it gives is the caller */
		if (hit && quick != ret)
			stat_inc(TD_STAT_VERIFY_MISMATCH);
	}
	if (r != TD_SLOT_NONE)
		c->n[r & (TD_NR_SLOTS - 1)]++;
	else
		r = count_uncached(ctx, c, ret, kind, loops);
	/* the stack gate, compiled in if stacks may be captured in this run */
	if (!cfg.stacks)
		return;
	/* Read once: user space may move capture meanwhile. */
	want = *(volatile __u32 *)&ctl.reason;
	if (want != TD_SLOT_NONE)
		stack_gate(ctx, c, ret, r, want, loops);
}

/* count_slow_body, without bpf_loop and with it (see verify). */
static __noinline void count_slow(void *ctx, struct td_counts *c, enum td_kind kind,
				  enum td_path path)
{
	count_slow_body(ctx, c, kind, path, false);
}

static __noinline void count_slow_loop(void *ctx, struct td_counts *c, enum td_kind kind,
				       enum td_path path)
{
	count_slow_body(ctx, c, kind, path, true);
}

/*
 * Counts the call: the common path, a lookup of the counters through the
 * watch key, the quick read and the site cache, and the count. Anything
 * else is count_slow's: a watched call, a site not cached, --verify-caller.
 */
static __always_inline void count_call(void *ctx, enum td_kind kind, enum td_path path,
				       bool loops)
{
	struct td_counts *c;
	__u64 e;

	c = bpf_map_lookup_elem(&counts, &watch);
	if (c && !verifies_all(path) &&
	    cached(quick_caller(ctx, kind), &e)) {
		/* the slot's counter: its byte offset is the entry's top bits */
		(*(__u64 *)((void *)c->n + (e >> TD_SITE_SHIFT)))++;
		return;
	}
	if (loops)
		count_slow_loop(ctx, c, kind, path);
	else
		count_slow(ctx, c, kind, path);
}

/* The counting path `path`: filtered before the caller is looked for. */
static __always_inline void count_on(void *ctx, enum td_kind kind, enum td_path path,
				     bool loops)
{
	if (wanted(path))
		count_call(ctx, kind, path, loops);
}

/*
 * The counting programs, one per kind, path and use of bpf_loop: user space
 * loads the one its settings call for (TD_PATH_ANY with a filter or
 * --verify-caller), with bpf_loop where the kernel has it (5.17 and later),
 * else its "_nl" twin.
 */
SEC("fentry")
int BPF_PROG(td_fentry)
{
	count_on(ctx, TD_FENTRY, TD_PATH_COMMON, true);
	return 0;
}

SEC("fentry")
int BPF_PROG(td_fentry_any)
{
	count_on(ctx, TD_FENTRY, TD_PATH_ANY, true);
	return 0;
}

SEC("fentry")
int BPF_PROG(td_fentry_nl)
{
	count_on(ctx, TD_FENTRY, TD_PATH_COMMON, false);
	return 0;
}

SEC("fentry")
int BPF_PROG(td_fentry_any_nl)
{
	count_on(ctx, TD_FENTRY, TD_PATH_ANY, false);
	return 0;
}

SEC("kprobe")
int BPF_KPROBE(td_kprobe)
{
	count_on(ctx, TD_KPROBE, TD_PATH_COMMON, true);
	return 0;
}

SEC("kprobe")
int BPF_KPROBE(td_kprobe_any)
{
	count_on(ctx, TD_KPROBE, TD_PATH_ANY, true);
	return 0;
}

SEC("kprobe")
int BPF_KPROBE(td_kprobe_nl)
{
	count_on(ctx, TD_KPROBE, TD_PATH_COMMON, false);
	return 0;
}

SEC("kprobe")
int BPF_KPROBE(td_kprobe_any_nl)
{
	count_on(ctx, TD_KPROBE, TD_PATH_ANY, false);
	return 0;
}

/*
 * The counting paths run on a return address given as the first raw
 * tracepoint argument (the other arguments: frames above the caller, with
 * cfg.synthetic_stack), so BPF_PROG_TEST_RUN can exercise the site table,
 * pending counts, slots, deeper-frame rules and the choice of stacks on
 * kernels that refuse fentry.
 */
SEC("raw_tp")
int td_selftest(struct td_raw_tp_args *ctx)
{
	count_on(ctx, TD_SELFTEST, TD_PATH_COMMON, true);
	return 0;
}

SEC("raw_tp")
int td_selftest_any(struct td_raw_tp_args *ctx)
{
	count_on(ctx, TD_SELFTEST, TD_PATH_ANY, true);
	return 0;
}

SEC("raw_tp")
int td_selftest_nl(struct td_raw_tp_args *ctx)
{
	count_on(ctx, TD_SELFTEST, TD_PATH_COMMON, false);
	return 0;
}

SEC("raw_tp")
int td_selftest_any_nl(struct td_raw_tp_args *ctx)
{
	count_on(ctx, TD_SELFTEST, TD_PATH_ANY, false);
	return 0;
}

/*
 * Empty programs attached beside the counting program by --companion: an
 * fexit one changes the trampoline's frame (it adds a return-value slot),
 * which the caller lookup must survive; an empty fentry one is the
 * baseline when measuring the counting program's cost per call.
 */
SEC("fentry")
int BPF_PROG(td_empty_fentry)
{
	return 0;
}

SEC("fexit")
int BPF_PROG(td_empty_fexit)
{
	return 0;
}

/* The cost baseline: what a bare per-CPU counter costs on the same calls. */
static __always_inline void bare_count(void)
{
	__u64 *n = bpf_map_lookup_elem(&bare, &zero);

	if (n)
		(*n)++;
}

SEC("fentry")
int BPF_PROG(td_bare_fentry)
{
	bare_count();
	return 0;
}

SEC("kprobe")
int BPF_KPROBE(td_bare_kprobe)
{
	bare_count();
	return 0;
}

#include "uprobe.bpf.h"
