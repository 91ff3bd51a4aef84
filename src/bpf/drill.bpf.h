/* SPDX-License-Identifier: GPL-2.0 */
/*
 * --drill: a captured reason's calls counted exactly by path, as well as by
 * reason. The path is the caller's return address and the frames above it
 * (td_path_key), from an unwind; user space merges return addresses into
 * their functions and reads the tree level by level off the same counts,
 * so every node's children add up to it. Only the captured reasons' calls
 * come here (their sites are flagged, see capture.bpf.h): the others keep
 * the common path. Included by topdown.bpf.c, after capture.bpf.h.
 */
#ifndef TOPDOWN_DRILL_H
#define TOPDOWN_DRILL_H

/* Calls by path, per CPU: exact sums without atomics. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, TD_MAX_PATHS);
	__type(key, struct td_path_key);
	__type(value, __u64);
} paths SEC(".maps");

/* A reason's calls whose path found the table full: counted, never lost. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, TD_NR_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
} paths_full SEC(".maps");

/*
 * How deep the last drilled call had to unwind (its caller's index and the
 * levels above it): the next one unwinds as deep first, as the unwind costs
 * by the frame. Shared by the CPUs: a race costs a second unwind.
 */
__u32 drill_frames;

/*
 * The index in s->ips of the caller's frame, from an unwind of `frames`
 * frames (bpf_get_stack zeroes what lies past the stack's end, up to that
 * many), or -1.
 */
static __always_inline int drill_unwind_in(void *ctx, struct td_scratch *s, __u64 ret,
					   enum td_kind kind, bool loops, __u32 frames)
{
	long n;

	if (kind == TD_SELFTEST && cfg.synthetic_stack)
		return synthetic_unwind(ctx, s);
	if (kind != TD_TP)
		return unwind_caller_in(ctx, s, kind, ret, loops, frames);
	/* a tracepoint's own unwind stops at the firing frame: this one does not */
	frames = ((frames - 1) & (TD_UNWIND_FRAMES - 1)) + 1;	/* as unwind_caller_in */
	n = bpf_get_stack(ctx, s->ips, frames * sizeof(s->ips[0]), 0);
	if (n <= 0)
		return -1;
	return tp_firing(s, n / 8);
}

/*
 * The caller's index in s->ips, whose `levels` frames from it on are this
 * call's: unwound as deep as the last call needed, and again all the way
 * where that was not enough (the frames past an unwind's end would be
 * another call's); or -1.
 */
static __always_inline int drill_unwind(void *ctx, struct td_scratch *s, __u64 ret,
					enum td_kind kind, bool loops, __u32 levels)
{
	__u32 frames = *(volatile __u32 *)&drill_frames;
	int ci = -1;

	if (frames && frames < TD_UNWIND_FRAMES)
		ci = drill_unwind_in(ctx, s, ret, kind, loops, frames);
	if (!frames || frames >= TD_UNWIND_FRAMES || ci < 0 || ci + levels > frames)
		ci = drill_unwind_in(ctx, s, ret, kind, loops, TD_UNWIND_FRAMES);
	if (ci >= 0 && ci + levels != frames)
		drill_frames = ci + levels;
	return ci;
}

/*
 * x86 fentry (5.17 on): the address of the slot holding the caller's
 * return address, where fentry_caller_quick reads it, into s->at (as a
 * number); whether it holds `ret` (a trampoline with a return-value slot
 * has FUNC's own return address there: then the unwind).
 */
static __always_inline bool fentry_slot(void *ctx, struct td_scratch *s, __u64 ret)
{
#if TD_QUICK_FENTRY
	s->at = (__u64)ctx + ((bpf_get_func_arg_cnt(ctx) * 8) & TD_WORD_OFFSETS) + 16;
	return tp_word((void *)*(volatile __u64 *)&s->at) == ret;
#else
	return false;
#endif
}

/*
 * Whether this call's frames may be read at their learned distances
 * (x86-64, 5.17 on: a tracepoint's above its firing frame, fentry's above
 * its caller), the slot of the first in s->at.
 */
static __always_inline bool learnable(void *ctx, struct td_scratch *s, __u64 ret,
				      enum td_kind kind, bool loops)
{
	if (!loops || !TD_QUICK_FRAMES)
		return false;
	if (kind == TD_TP) {
		s->at = (__u64)ctx + (*(volatile __u32 *)&tp_off & TD_TP_OFFSETS);
		return true;
	}
	return kind == TD_FENTRY && quick_fentry() && fentry_slot(ctx, s, ret);
}

/*
 * Counts the call under its path if its reason is captured: slot r, or
 * where its site is pending (TD_SLOT_NONE) its caller's range's, as the
 * stack gate takes it.
 */
static __always_inline void drill_body(void *ctx, __u64 ret, __u32 r, enum td_kind kind,
				       bool loops)
{
	struct td_scratch *s;
	struct td_path_key *k;
	__u32 at, levels = cfg.drill_levels;
	__u64 n, *full;
	bool learn;
	int ci;

	if (r == TD_SLOT_NONE)
		r = range_reason(ret, loops);
	/* masked as well: 5.10's verifier loses the test's bound */
	if (r >= TD_NR_SLOTS || !captured(r & (TD_NR_SLOTS - 1)))
		return;
	s = bpf_map_lookup_elem(&scratch, &zero);
	if (!s)
		return;
	k = &s->path;
	k->reason = r;
	k->pad = 0;
	k->f[0] = ret;
	/*
	 * The frames read at their learned distances where they were learned
	 * (see deep.bpf.h), as the unwind would give them: one load a frame.
	 * Else the unwind, which teaches them.
	 */
	learn = learnable(ctx, s, ret, kind, loops);
	if (learn && quick_frames_at(s, ret, levels - 1)) {
		for (__u32 d = 1; d < TD_DRILL_FRAMES; d++)
			k->f[d] = d < levels ? s->early.frames[d - 1] : 0;
	} else {
		ci = drill_unwind(ctx, s, ret, kind, loops, levels);
		/* the padding after ips makes every read in bounds (see frames_above) */
		at = ci & (TD_UNWIND_FRAMES - 1);
		for (__u32 d = 1; d < TD_DRILL_FRAMES; d++)
			k->f[d] = ci >= 0 && d < levels ? s->ips[at + d] : 0;
		if (ci < 0)
			k->f[1] = TD_NO_FRAMES;
		else if (learn)
			learn_frames_at(s, ci, levels - 1);
	}
	if (count_in(&paths, k, &n) != TD_COUNT_FULL)
		return;
	full = bpf_map_lookup_elem(&paths_full, &r);
	if (full)
		(*full)++;
}

/*
 * drill_body, without bpf_loop and with it, for the kind as a constant:
 * passed as an argument, it can be spilled and refilled unknown (a
 * program type would then be checked for helpers of another's).
 */
static __always_inline void drill_kind(void *ctx, __u64 ret, __u32 r, enum td_kind kind,
				       bool loops)
{
	if (kind == TD_TP)
		drill_body(ctx, ret, r, TD_TP, loops);
	else if (kind == TD_FENTRY)
		drill_body(ctx, ret, r, TD_FENTRY, loops);
	else if (kind == TD_KPROBE)
		drill_body(ctx, ret, r, TD_KPROBE, loops);
	else
		drill_body(ctx, ret, r, TD_SELFTEST, loops);
}

static __noinline void drill(void *ctx, __u64 ret, __u32 r, enum td_kind kind)
{
	drill_kind(ctx, ret, r, kind, false);
}

static __noinline void drill_loop(void *ctx, __u64 ret, __u32 r, enum td_kind kind)
{
	drill_kind(ctx, ret, r, kind, true);
}

#endif
