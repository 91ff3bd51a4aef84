/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The deeper-frame rules: a call from a caller with rules is counted under
 * the first rule that holds a frame above the caller within its depth
 * (deep_reason), and one made before user space filled the rules is
 * counted under its frames, for user space to apply them (count_early).
 * Included by topdown.bpf.c, after caller.bpf.h.
 */
#ifndef TOPDOWN_DEEP_H
#define TOPDOWN_DEEP_H

/*
 * A tracepoint's deeper frames without the kernel's unwinder. The unwind
 * costs about 250 instructions a frame, and starts below the BPF program,
 * through the unwinder's own frames and the tracing glue: most of a deep
 * profile's cost. But a return address's frame has one size (a kernel
 * function has no alloca, and its stack layout at a call site is fixed:
 * ORC's and the frame records' premise), so the distance from the slot
 * holding return address R to the slot holding the next return address
 * is R's alone. Learned once from an unwind, the frames above the firing
 * frame are then one load each from the firing frame's slot (tp_off).
 *
 * Learned soundly: after a checked unwind, the words from the firing
 * frame's slot to the top of the task's stack are searched for the
 * unwind's return addresses, and a chain is learned only if each occurs
 * there exactly once. Every real slot lies in that range, so a lone copy
 * is the real one; a stale copy (an old frame's, in a local not yet
 * written) makes the search give up, and that path keeps the unwind. Off
 * the task's stack (an interrupt's) nothing is learned. A frame read the
 * quick way must itself be a learned return address, or the unwind runs.
 *
 * The stack's last frame is known by where it is: the entry code's call,
 * whose return address sits right under the task's registers at the top
 * of its stack (the unwind ends there). The same return address elsewhere
 * (an exception taken in the kernel) has frames above it.
 *
 * One kind of function has frames of many sizes: a system call's entry
 * (do_syscall_64), which moves the stack by a random offset on every call
 * (CONFIG_RANDOMIZE_KSTACK_OFFSET). So a distance is used only once four
 * searches found it alike; one found unlike makes the frame variable, and
 * a variable frame's next is read only where every search found it: in
 * the last slot (the entry code's), else the unwind runs.
 *
 * The cache is direct-mapped: an entry is a return address's low 48 bits
 * (kernel addresses' top 16 are set) over 16 bits: the searches that
 * agreed, less one (bits 14-15), the distance in bytes (bits 3-13, below
 * 16 KiB, a kernel stack's size), whether every search found the next
 * frame in the last slot (TD_FRAME_TO_LAST) and whether the distances
 * differed (TD_FRAME_VARIABLE); TD_FRAME_NEXT for one seen only as an
 * unwind's last. One 8-byte store, so two CPUs learning at once cannot
 * tear an entry (one may undo the other's count).
 *
 * x86-64 only (arm64's stack ends in a frame record, not at a fixed
 * place), and needs bpf_loop (5.17): elsewhere nothing is learned and
 * every call takes the unwind.
 */
#if defined(__TARGET_ARCH_x86)
#define TD_QUICK_FRAMES 1
#else
#define TD_QUICK_FRAMES 0
#endif

#define TD_FRAME_CACHE 4096
#define TD_FRAME_NEXT 0
#define TD_FRAME_VARIABLE 1
#define TD_FRAME_TO_LAST 2
#define TD_FRAME_DISTANCE 0x3ff8
#define TD_FRAME_AGREED 0xc000
/* THREAD_SIZE on x86-64, without KASAN (Debian's kernels). */
#define TD_STACK_BYTES 16384
/* The last frame's slot from the stack's top: under struct pt_regs (168 bytes). */
#define TD_LAST_SLOT (168 + 8)
/* The words of one read of the search (of a 16 KiB stack, at most 32). */
#define TD_SCAN_WORDS 64
#define TD_SCAN_BYTES (TD_SCAN_WORDS * 8)
/* The return addresses searched for: the firing frame's and those above. */
#define TD_LEARN (TD_MAX_RULE_DEPTH + 1)

struct td_frame_cache {
	__u64 e[TD_FRAME_CACHE];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct td_frame_cache);
} frame_cache SEC(".maps");

/* The search's state, per CPU: too big for the BPF stack. */
struct td_frame_scan {
	__u64 w[TD_SCAN_WORDS];
	__u64 want[TD_LEARN];
	__u32 at[TD_LEARN];	/* byte offset of the first copy from the firing slot */
	__u32 seen[TD_LEARN];	/* copies found */
	__u64 check[TD_MAX_RULE_DEPTH];	/* an unwind's frames (--verify-caller) */
	__u64 slot;		/* the firing frame's slot */
	__u64 from;		/* the first read's address (TD_SCAN_BYTES-aligned) */
	__u32 nwant;
	__u32 tick;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct td_frame_scan);
} frame_scan SEC(".maps");

static __always_inline __u32 frame_index(__u64 ret)
{
	return (ret >> 2) & (TD_FRAME_CACHE - 1);
}

/* Whether entry e is return address ret's. */
static __always_inline bool frame_hit(__u64 e, __u64 ret)
{
	return e && ret >> 48 == 0xffff && e >> 16 == (ret & 0xffffffffffffULL);
}

/*
 * The `depth` frames above return address `ret`, whose slot's address is
 * in s->at (a tracepoint's firing frame's at ctx + tp_off, fentry's
 * caller's; cfg.deep_depth for the rules, --drill's levels above the
 * caller), into s->early.frames, read with the learned distances, as
 * frames_above leaves them; false if a distance is not known or a frame
 * read is no learned return address.
 */
static __always_inline bool quick_frames_at(struct td_scratch *s, __u64 ret, __u32 depth)
{
	struct td_frame_cache *f = bpf_map_lookup_elem(&frame_cache, &zero);
	__u64 at, last, r = ret, e;
	bool end = false;
	__u32 d;

	if (!f)
		return false;
	at = *(volatile __u64 *)&s->at;
	/* on the task's stack: an interrupt's has no registers at its top */
	last = (__u64)bpf_get_current_task_btf()->stack;
	if (at - last >= TD_STACK_BYTES)
		return false;
	last += TD_STACK_BYTES - TD_LAST_SLOT;
	for (d = 0; d < TD_MAX_RULE_DEPTH; d++) {
		if (d >= depth || end) {
			s->early.frames[d] = 0;
			continue;
		}
		e = f->e[frame_index(r)];
		if (!frame_hit(e, r))
			return false;
		/* the entry code's frame, under the task's registers: the last */
		if (at == last) {
			end = true;
			s->early.frames[d] = 0;
			continue;
		}
		if (e & TD_FRAME_VARIABLE) {
			if (!(e & TD_FRAME_TO_LAST))
				return false;
			at = last;
		} else {
			if ((e & TD_FRAME_AGREED) != TD_FRAME_AGREED || !(e & TD_FRAME_DISTANCE))
				return false;
			at += e & TD_FRAME_DISTANCE;
		}
		r = kernel_ret(tp_word((void *)at));
		s->early.frames[d] = r;
	}
	return end || frame_hit(f->e[frame_index(r)], r);
}

/*
 * The frames above a slot holding return address `ret` (its address in
 * s->at, as a number) the quick way: see quick_frames_at.
 */
static __always_inline bool tp_quick_frames(void *ctx, struct td_scratch *s, __u64 ret,
					    __u32 depth)
{
	/* as a number, through memory: the verifier lets no pointer be masked */
	s->at = (__u64)ctx + (*(volatile __u32 *)&tp_off & TD_TP_OFFSETS);
	return quick_frames_at(s, ret, depth);
}

/*
 * An entry's 16 bits (see above) once a search found the next frame
 * `dist` bytes further, in the last slot or not, where they were `old`.
 */
static __always_inline __u32 frame_seen(__u32 old, __u32 dist, bool to_last)
{
	__u32 lo = old & ~TD_FRAME_TO_LAST;

	if (old == TD_FRAME_NEXT)
		return dist | (to_last ? TD_FRAME_TO_LAST : 0);
	if (!(old & TD_FRAME_TO_LAST))
		to_last = false;
	if (!(old & TD_FRAME_VARIABLE) && (old & TD_FRAME_DISTANCE) == dist) {
		if ((lo & TD_FRAME_AGREED) != TD_FRAME_AGREED)
			lo += 0x4000;
	} else {
		lo |= TD_FRAME_VARIABLE;
	}
	return lo | (to_last ? TD_FRAME_TO_LAST : 0);
}

/* What bpf_loop's body sees of the search. */
struct td_scan_walk {
	struct td_frame_scan *t;
	__u64 top;
};

/*
 * The loop's body (bpf_loop): word i of the search, read TD_SCAN_WORDS at
 * a time; 1 (stop) at the stack's top. A word at a time, so that the
 * verifier walks the search for the return addresses once.
 */
static long frame_scan_step(__u32 i, struct td_scan_walk *w)
{
	struct td_frame_scan *t = w->t;
	__u64 a = t->from + (__u64)i * 8, v;

	if (a >= w->top)
		return 1;
	if (!(i % TD_SCAN_WORDS) && bpf_probe_read_kernel(t->w, sizeof(t->w), (void *)a))
		return 1;
	v = kernel_ret(t->w[i % TD_SCAN_WORDS]);
	if (a <= t->slot || v >> 48 != 0xffff)
		return 0;
	for (__u32 k = 1; k < TD_LEARN; k++) {
		if (k >= t->nwant)
			break;
		if (v == t->want[k] && !t->seen[k]++)
			t->at[k] = a - t->slot;
	}
	return 0;
}

/*
 * Learns the distances of the frames at s->ips[ci] (the return address in
 * the slot at s->at: the firing frame's, fentry's caller's) and above,
 * `depth` of them (the profile's, or --drill's): see above. One call in
 * eight per CPU tries, so that a path that cannot be learned costs little
 * more than its unwind.
 */
static __noinline void learn_frames_at(struct td_scratch *s, int ci, __u32 depth)
{
	struct td_frame_cache *f = bpf_map_lookup_elem(&frame_cache, &zero);
	struct td_frame_scan *t = bpf_map_lookup_elem(&frame_scan, &zero);
	struct task_struct *task = (void *)bpf_get_current_task();
	struct td_scan_walk w;
	__u64 base, slot, last, e;
	__u32 n = 0, k, c = ci & (TD_UNWIND_FRAMES - 1);

	if (!f || !t || t->tick++ & 7)
		return;
	/*
	 * The slot's address as a number, through memory: the verifier allows
	 * a pointer no masking, and a search no bounded offset from ctx.
	 */
	t->slot = *(volatile __u64 *)&s->at;
	slot = *(volatile __u64 *)&t->slot;
	if (kernel_ret(tp_word((void *)slot)) != s->ips[c])
		return;
	base = (__u64)BPF_CORE_READ(task, stack);
	if (slot - base >= TD_STACK_BYTES - 8)
		return;
	for (k = 0; k < TD_LEARN; k++) {
		__u64 ip = k <= depth ? s->ips[c + k] : 0;

		t->seen[k] = 0;
		t->at[k] = 0;
		t->want[k] = ip;
		if (!ip)
			break;
		n = k + 1;
	}
	t->nwant = n;
	t->from = (slot + 8) & ~(__u64)(TD_SCAN_BYTES - 1);
	w.t = t;
	w.top = base + TD_STACK_BYTES;
	bpf_loop(TD_STACK_BYTES / 8, frame_scan_step, &w, 0);
	for (k = 1; k < TD_LEARN; k++) {
		if (k >= n)
			break;
		if (t->seen[k] != 1 || t->at[k] <= t->at[k - 1] ||
		    t->at[k] - t->at[k - 1] >= TD_STACK_BYTES)
			return;
	}
	last = base + TD_STACK_BYTES - TD_LAST_SLOT;
	for (k = 0; k < TD_LEARN; k++) {
		__u64 r = t->want[k];
		__u32 old, lo;

		if (k >= n)
			break;
		e = f->e[frame_index(r)];
		old = frame_hit(e, r) ? e & 0xffff : TD_FRAME_NEXT;
		if (k + 1 == n) {
			/* seen last: known as a return address, a distance kept */
			if (frame_hit(e, r))
				continue;
			lo = TD_FRAME_NEXT;
		} else {
			lo = frame_seen(old, t->at[k + 1] - t->at[k],
					slot + t->at[k + 1] == last);
		}
		f->e[frame_index(r)] = (r & 0xffffffffffffULL) << 16 | lo;
	}
}

/* learn_frames_at from a tracepoint's firing frame's slot. */
static __always_inline void tp_learn_frames(void *ctx, struct td_scratch *s, int ci, __u32 depth)
{
	s->at = (__u64)ctx + (*(volatile __u32 *)&tp_off & TD_TP_OFFSETS);
	learn_frames_at(s, ci, depth);
}

/* Index in deep.callers of the caller that `ret` returns into, or -1. */
static __always_inline int deep_caller(__u64 ret)
{
	__u32 nr = deep.nr_callers;

	for (__u32 c = 0; c < TD_MAX_CALLERS; c++) {
		if (c >= nr)
			break;
		if (returns_into(ret, deep.callers[c].lo, deep.callers[c].hi))
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
		if (returns_into(ip, deep.rules[idx].lo, deep.rules[idx].hi))
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

/* The loop's body (td_loop): rule first + i; 1 (stop) once a rule holds. */
static __always_inline long rule_step(__u32 i, struct td_rule_walk *w)
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
 * --verify-caller: the frames read the quick way, where they can be, must
 * be the unwind's (in s->early.frames, left as they were).
 */
static __noinline void tp_check_frames(void *ctx, struct td_scratch *s, __u64 ret)
{
	struct td_frame_scan *t = bpf_map_lookup_elem(&frame_scan, &zero);
	bool same = true;
	__u32 d;

	if (!t)
		return;
	for (d = 0; d < TD_MAX_RULE_DEPTH; d++)
		t->check[d] = s->early.frames[d];
	if (!tp_quick_frames(ctx, s, ret, cfg.deep_depth)) {
		for (d = 0; d < TD_MAX_RULE_DEPTH; d++)
			s->early.frames[d] = t->check[d];
		return;
	}
	stat_inc(TD_STAT_VERIFY_FRAMES);
	for (d = 0; d < TD_MAX_RULE_DEPTH; d++) {
		if (s->early.frames[d] != t->check[d])
			same = false;
		s->early.frames[d] = t->check[d];
	}
	if (!same)
		stat_inc(TD_STAT_VERIFY_MISMATCH);
}

/*
 * The reason the rules of deeper-frame caller `dc` give the frames in
 * s->early.frames (the first rule that holds, else the caller's own);
 * with `unwind`, the frames are first taken from an unwind (-1 if it
 * failed: the caller's own reason).
 */
static __always_inline __u32 rules_reason(void *ctx, struct td_scratch *s, __u64 ret, int dc,
					  enum td_kind kind, bool loops, bool unwind)
{
	struct td_rule_walk w;
	__u32 c, nr;
	int ci;

	/* dc as well: deep_caller returns a constant on each of its paths */
	s->deep_caller = dc;
	c = *(volatile __s32 *)&s->deep_caller & (TD_MAX_CALLERS - 1);
	w.s = s;
	w.first = deep.callers[c].rule_first;
	nr = deep.callers[c].rule_count;
	w.reason = deep.callers[c].reason;
	if (unwind) {
		ci = caller_index(ctx, s, ret, kind, loops);
		if (ci < 0) {
			stat_inc(TD_STAT_DEEP_UNWIND_FAILED);
			return w.reason;
		}
		frames_above(s, ci);
		/* the frames learned, for the next calls to read (see above) */
		if (kind == TD_TP && loops && TD_QUICK_FRAMES) {
			tp_learn_frames(ctx, s, ci, cfg.deep_depth);
			if (cfg.verify_caller)
				tp_check_frames(ctx, s, ret);
		}
	}
	/*
	 * Through bpf_loop the body is verified once: walked turn by turn,
	 * the loops cost the verifier several times the instructions, and
	 * start-up time with them (docs/performance.md).
	 */
	td_loop(loops, nr, TD_MAX_RULES, rule_step, &w);
	return w.reason;
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
	struct td_scratch *s = bpf_map_lookup_elem(&scratch, &zero);

	if (!s)
		return deep.callers[dc & (TD_MAX_CALLERS - 1)].reason;
	return rules_reason(ctx, s, ret, dc, kind, loops, true);
}

/*
 * A tracepoint's call whose quick read names a deeper-frame caller, its
 * frames read the quick way (tp_quick_frames): its reason, or TD_SLOT_NONE
 * (the checked way then).
 */
static __always_inline __u32 tp_quick_reason(void *ctx, __u64 ret, bool loops)
{
	struct td_scratch *s;
	int dc;

	if (!TD_QUICK_FRAMES || !cfg.deep_depth || !*(volatile __u32 *)&deep.ready)
		return TD_SLOT_NONE;
	asm volatile("" ::: "memory");
	dc = deep_caller(ret);
	if (dc < 0)
		return TD_SLOT_NONE;
	s = bpf_map_lookup_elem(&scratch, &zero);
	if (!s || !tp_quick_frames(ctx, s, ret, cfg.deep_depth))
		return TD_SLOT_NONE;
	return rules_reason(ctx, s, ret, dc, TD_TP, loops, false);
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
	__u64 n;
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
	if (count_in(&early, &s->early, &n))
		return TD_SLOT_NONE;
	c->n[TD_SLOT_SITES_FULL]++;
	return TD_SLOT_SITES_FULL;
}

#endif
