/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Tier 2, stack capture: the stack gate (whether a call belongs to the
 * stack reason, by its slot or, for a site not resolved yet, by the
 * reason's caller ranges) and the sample it sends to the ring buffer,
 * rate-limited. Included by topdown.bpf.c, after caller.bpf.h.
 */
#ifndef TOPDOWN_CAPTURE_H
#define TOPDOWN_CAPTURE_H

/* What bpf_loop's body sees of the search for a stack reason's range. */
struct td_range_walk {
	__u64 ret;
	__u32 want;
	__u32 found;
};

/* The loop's body (td_loop): range i; 1 (stop) once it holds the call. */
static __always_inline long range_step(__u32 i, struct td_range_walk *w)
{
	if (i >= TD_MAX_STACK_RANGES)
		return 1;
	if (ctl.ranges[i].reason != w->want ||
	    !returns_into(w->ret, ctl.ranges[i].lo, ctl.ranges[i].hi))
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
	struct td_range_walk w = { .ret = ret, .want = want };

	td_loop(loops, *(volatile __u32 *)&ctl.nr_ranges, TD_MAX_STACK_RANGES, range_step, &w);
	return w.found;
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

#endif
