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
	struct td_rule_walk w;
	__u32 c, nr;
	int ci;

	if (!s)
		return deep.callers[dc & (TD_MAX_CALLERS - 1)].reason;
	/* dc as well: deep_caller returns a constant on each of its paths */
	s->deep_caller = dc;
	c = *(volatile __s32 *)&s->deep_caller & (TD_MAX_CALLERS - 1);
	w.s = s;
	w.first = deep.callers[c].rule_first;
	nr = deep.callers[c].rule_count;
	w.reason = deep.callers[c].reason;
	ci = caller_index(ctx, s, ret, kind, loops);
	if (ci < 0) {
		stat_inc(TD_STAT_DEEP_UNWIND_FAILED);
		return w.reason;
	}
	frames_above(s, ci);
	/*
	 * Through bpf_loop the body is verified once: walked turn by turn,
	 * the loops cost the verifier several times the instructions, and
	 * start-up time with them (docs/performance.md).
	 */
	td_loop(loops, nr, TD_MAX_RULES, rule_step, &w);
	return w.reason;
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
