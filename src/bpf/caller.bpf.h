/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Finding the caller's return address: the one-load quick read of the
 * common path (fentry, kprobe, the self-test's argument), the checked way
 * and its search of the trampoline's frame (fentry_caller), the full unwind
 * (unwind_caller) and its check of the quick read (--verify-caller), and the
 * direct-mapped cache of resolved sites it is looked up in. Included by
 * topdown.bpf.c, after common.bpf.h.
 */
#ifndef TOPDOWN_CALLER_H
#define TOPDOWN_CALLER_H

/* How a program learns about the call: its kind is a constant in each. */
enum td_kind {
	TD_FENTRY,
	TD_KPROBE,
	TD_SELFTEST,
	/* A tracepoint (tp_btf or raw_tp): ctx is the arguments' array. */
	TD_TP,
};

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
 * FUNC's own address, as the kernel attached the program to it; the one
 * kallsyms gives where the kernel has no bpf_get_func_ip (before 5.15).
 */
static __always_inline __u64 func_ip(void *ctx, enum td_kind kind)
{
	if (kind == TD_SELFTEST || kind == TD_TP || !cfg.func_ip_helper)
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

/* `known`: the kernel has bpf_rdonly_cast, not tested for (TD_PATH_KNOWN). */
static __always_inline __u64 fentry_caller_quick(void *ctx, bool known)
{
	/* inlined for fentry: a load of ctx - 8 */
	void *at = ctx + ((bpf_get_func_arg_cnt(ctx) * 8) & TD_WORD_OFFSETS);

	if (known || __builtin_expect(bpf_ksym_exists(bpf_rdonly_cast), 1))
		/* r13: the third word */
		return bpf_core_cast(at, struct pt_regs)->r13;
	return read_word(at + 16);
}
#else
/* arm64: the checked way is the only one (two frame records to tell apart). */
#define TD_QUICK_FENTRY 0
#define fentry_caller_quick(ctx, known) fentry_caller(ctx)
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


/*
 * A tracepoint: the code that fired it is the first frame outside the
 * glue (cfg.glue_*: __traceiter_EVENT, __bpf_trace_EVENT, bpf_trace_runN)
 * that follows a glue frame; the program's own frames come before the
 * glue.
 */
static __always_inline bool in_glue(__u64 ip)
{
	for (__u32 g = 0; g < TD_MAX_GLUE; g++) {
		if (g >= cfg.nr_glue)
			break;
		if (returns_into(ip, cfg.glue_lo[g], cfg.glue_hi[g]))
			return true;
	}
	return false;
}

/* The index in s->ips (n frames) of the frame that fired the tracepoint, or -1. */
static __always_inline int tp_firing(struct td_scratch *s, long n)
{
	bool glue = false;

	for (int i = 0; i < TD_TP_FRAMES; i++) {
		if (i >= n)
			break;
		if (in_glue(s->ips[i]))
			glue = true;
		else if (glue)
			return i;
	}
	return -1;
}

/*
 * A tracepoint's unwind: only as deep as the firing frame can be and the
 * deepest rule looks above it (the unwind costs by the frame), a constant.
 */
static __always_inline int tp_unwind_in(void *ctx, struct td_scratch *s, __u32 frames)
{
	long n;

	frames += cfg.deep_depth;
	if (frames > TD_UNWIND_FRAMES)
		frames = TD_UNWIND_FRAMES;
	n = bpf_get_stack(ctx, s->ips, frames * sizeof(s->ips[0]), 0);
	if (n <= 0)
		return -1;
	return tp_firing(s, n / 8);
}

/*
 * The unwind, as deep as the firing frame was last time (tp_frames: the
 * glue is the same code on every call) and the rules look above it; where
 * the firing frame was not there (the glue grew: another program on the
 * tracepoint), again as deep as it can be.
 */
static __always_inline int tp_unwind(void *ctx, struct td_scratch *s)
{
	__u32 frames = *(volatile __u32 *)&tp_frames;
	int i = -1;

	if (frames && frames <= TD_TP_FRAMES)
		i = tp_unwind_in(ctx, s, frames);
	if (i < 0)
		i = tp_unwind_in(ctx, s, TD_TP_FRAMES);
	if (i >= 0 && i + 1 != frames)
		tp_frames = i + 1;
	return i;
}

/* The byte offsets from ctx of the words a tracepoint's quick read may take. */
#define TD_TP_OFFSETS ((TD_TP_SCAN - 1) * 8)

/*
 * A return address read from the stack as the unwinder gives it: on arm64
 * a frame record's is signed (pointer authentication), and the signature's
 * bits, above the address's, are set again.
 */
static __always_inline __u64 kernel_ret(__u64 w)
{
#if defined(__TARGET_ARCH_arm64)
	return w | 0xffff000000000000ULL;
#else
	return w;
#endif
}

/* One word, a guarded plain load where the kernel has bpf_rdonly_cast. */
static __always_inline __u64 tp_word(void *at)
{
	__u64 w = 0;

	if (bpf_ksym_exists(bpf_rdonly_cast))
#if defined(__TARGET_ARCH_arm64)
		return bpf_core_cast(at, struct pt_regs)->regs[0];
#else
		return bpf_core_cast(at, struct pt_regs)->r15;
#endif
	bpf_probe_read_kernel(&w, sizeof(w), at);
	barrier_var(w);
	return w;
}

/*
 * The common path's read under a tracepoint: the word where the firing
 * frame's return address was last found, taken only if the site cache
 * knows it (glue addresses never enter it).
 */
static __always_inline __u64 tp_caller_quick(void *ctx)
{
	return kernel_ret(tp_word(ctx + (*(volatile __u32 *)&tp_off & TD_TP_OFFSETS)));
}

/* Where among the words above ctx `ret` is, for the quick read to take it. */
static __noinline void tp_learn(void *ctx, __u64 ret)
{
	for (__u32 i = 0; i < TD_TP_SCAN; i++) {
		__u64 w = 0;

		if (bpf_probe_read_kernel(&w, sizeof(w), ctx + i * 8))
			return;
		if (kernel_ret(w) == ret) {
			tp_off = i * 8;
			return;
		}
	}
}

/* The checked way: the unwind's firing frame (0 if none), and the quick read taught. */
static __noinline __u64 tp_caller(void *ctx, __u64 quick)
{
	struct td_scratch *s = bpf_map_lookup_elem(&scratch, &zero);
	__u64 ret;
	int i;

	if (!s)
		return 0;
	i = tp_unwind(ctx, s);
	/* for deep_reason, in this same call: its unwind is this one */
	s->caller = i;
	if (i < 0)
		return 0;
	ret = s->ips[i & (TD_UNWIND_FRAMES - 1)];
	if (ret != quick)
		tp_learn(ctx, ret);
	return ret;
}

/* The frames searched for the cheap caller where the unwind has no entry frame. */
#define TD_HINT_FRAMES 6

/* What bpf_loop's body sees of the search for FUNC's entry frame. */
struct td_frame_walk {
	struct td_scratch *s;
	__u64 func;
	long n;
	__s32 at;
};

/* The loop's body (td_loop): frame i; 1 (stop) at the first in FUNC's entry. */
static __always_inline long entry_frame_step(__u32 i, struct td_frame_walk *w)
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
 * deep_reason) and the trampoline. Unwinds `frames` frames at most (the
 * unwind costs by the frame; at most TD_UNWIND_FRAMES).
 */
static __always_inline int unwind_caller_in(void *ctx, struct td_scratch *s, enum td_kind kind,
					    __u64 hint, bool loops, __u32 frames)
{
	struct td_frame_walk w = { .s = s, .func = func_ip(ctx, kind), .at = -1 };
	long n;

	if (kind == TD_TP)
		return tp_unwind(ctx, s);
	/* 1 to TD_UNWIND_FRAMES, masked: a test's bound can be lost in a spill */
	frames = ((frames - 1) & (TD_UNWIND_FRAMES - 1)) + 1;
	n = bpf_get_stack(ctx, s->ips, frames * sizeof(s->ips[0]), 0);
	if (n <= 0)
		return -1;
	w.n = n /= 8;
	td_loop(loops, TD_UNWIND_FRAMES - 1, TD_UNWIND_FRAMES - 1, entry_frame_step, &w);
	if (w.at >= 0)
		return entry_caller(ctx, s, w.at & (TD_UNWIND_FRAMES - 1), w.func);
	for (int i = 0; i < TD_HINT_FRAMES; i++) {
		if (i >= n)
			break;
		if (hint && s->ips[i] == hint)
			return i;
	}
	return -1;
}

static __always_inline int unwind_caller(void *ctx, struct td_scratch *s, enum td_kind kind,
					 __u64 hint, bool loops)
{
	return unwind_caller_in(ctx, s, kind, hint, loops, TD_UNWIND_FRAMES);
}

/*
 * The caller's return address as the common path reads it: one load.
 * `known`: the kernel has what fentry's one-load read takes, not tested
 * for (the load of a .rodata switch stays in the program, see td_path).
 */
static __always_inline __u64 quick_caller(void *ctx, enum td_kind kind, bool known)
{
	if (kind == TD_FENTRY)
#if TD_QUICK_FENTRY
		return known || quick_fentry() ? fentry_caller_quick(ctx, known) : fentry_caller(ctx);
#else
		return fentry_caller(ctx);
#endif
	if (kind == TD_KPROBE)
		return kprobe_caller(ctx);
	if (kind == TD_TP)
		return tp_caller_quick(ctx);
	return ((struct td_raw_tp_args *)ctx)->args[0];
}

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
	if (kind == TD_TP) {
		/*
		 * A tracepoint's call that reaches the rules took the checked
		 * way first (its caller has rules, so it is never in the site
		 * cache): tp_caller's unwind is this call's, used once.
		 */
		int ci = *(volatile __s32 *)&s->caller;

		s->caller = -1;
		if (ci >= 0 && ci < TD_TP_FRAMES && s->ips[ci & (TD_UNWIND_FRAMES - 1)] == ret)
			return ci;
	}
	s->caller = kind == TD_SELFTEST && cfg.synthetic_stack ? synthetic_unwind(ctx, s)
							       : unwind_caller(ctx, s, kind, ret, loops);
	return *(volatile __s32 *)&s->caller;
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

/* Whether the cache can hold `ret`: its bits above those compared are all set. */
static __always_inline bool cacheable(__u64 ret)
{
#if defined(__TARGET_ARCH_x86)
	return ret >> 32 == 0xffffffffULL;
#else
	return ret >> TD_SITE_SHIFT == ~0ULL >> TD_SITE_SHIFT;
#endif
}

/*
 * Whether no resolved site can be `ret`: its cache entry is empty, and it
 * is an address the cache can hold. User space caches every site it
 * resolves whose entry is empty (after adding it to the site table), and
 * empties an entry only to forget a site of an unloaded module; so the
 * site table need not be searched for it. A site added but not cached
 * (yet, or since an entry was emptied) is counted as pending, which is
 * right as well.
 */
static __always_inline bool surely_new(__u64 ret)
{
	return !site_cache[site_index(ret)] && cacheable(ret);
}

/* The cache entry naming `ret` in slot r (as site_cache_entry in abi.rs). */
static __always_inline __u64 cache_entry(__u64 ret, __u32 r)
{
	return (__u64)r << TD_SLOT_SHIFT | (ret & ((1ULL << TD_SITE_SHIFT) - 1));
}

/* A resolved site's slot, from the direct-mapped cache; TD_SLOT_NONE if not there. */
static __always_inline __u32 cached_reason(__u64 ret)
{
	__u64 e;

	return cached(ret, &e) ? e >> TD_SLOT_SHIFT : TD_SLOT_NONE;
}

#endif
