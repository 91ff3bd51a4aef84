/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Tier 2, stack capture: the stack gate (whether a call belongs to a
 * captured reason, by its slot or, for a site not resolved yet, by the
 * captured reasons' caller ranges) and the sample it sends to the ring buffer,
 * rate-limited; and the background sampler, which takes the first calls'
 * stacks of every reason before any capture. Included by topdown.bpf.c, after caller.bpf.h.
 */
#ifndef TOPDOWN_CAPTURE_H
#define TOPDOWN_CAPTURE_H

/*
 * Whether reason slot r's stacks are captured (its bit in ctl.captured);
 * TD_SLOT_NONE never is.
 */
static __always_inline bool captured(__u32 r)
{
	if (r >= TD_NR_SLOTS)
		return false;
	return (*(volatile __u64 *)&ctl.captured[r / 64] >> (r % 64)) & 1;
}

/* What bpf_loop's body sees of the search for a captured reason's range. */
struct td_range_walk {
	__u64 ret;
	__u32 found;
};

/*
 * The loop's body (td_loop): range i; 1 (stop) once it holds the call and
 * its reason is captured.
 */
static __always_inline long range_step(__u32 i, struct td_range_walk *w)
{
	__u32 r;

	if (i >= TD_MAX_STACK_RANGES)
		return 1;
	if (!returns_into(w->ret, ctl.ranges[i].lo, ctl.ranges[i].hi))
		return 0;
	r = *(volatile __u32 *)&ctl.ranges[i].reason;
	if (!captured(r))
		return 0;
	w->found = r;
	return 1;
}

/*
 * The captured reason a call from a site not resolved yet belongs to: the
 * reason of a caller range that holds it, if that reason is captured;
 * else TD_SLOT_NONE. Ranges carry their reason, and count only while it
 * is captured, so ranges being rewritten never make a call count for
 * another reason.
 */
static __always_inline __u32 range_reason(__u64 ret, bool loops)
{
	struct td_range_walk w = { .ret = ret, .found = TD_SLOT_NONE };

	td_loop(loops, *(volatile __u32 *)&ctl.nr_ranges, TD_MAX_STACK_RANGES, range_step, &w);
	return w.found;
}

/*
 * Sends this call's stack, counted under `reason`, to user space;
 * `background`: from the background sampler. False if the ring buffer is
 * full.
 */
static __always_inline bool emit(void *ctx, __u64 ret, __u32 reason, __u32 background)
{
	struct td_sample *e;
	__u64 id;

	/*
	 * A constant either way (cfg is frozen): kernel-only records leave the
	 * user frames' 4 KiB out (1.1 KiB each: the buffer holds about 3,800).
	 */
	e = bpf_ringbuf_reserve(&samples,
				cfg.user_stacks ? sizeof(*e) : offsetof(struct td_sample, ustack), 0);
	if (!e)
		return false;
	id = bpf_get_current_pid_tgid();
	e->ts = bpf_ktime_get_ns();
	e->caller = ret;
	e->pid = id >> 32;
	e->tid = (__u32)id;
	e->cpu = bpf_get_smp_processor_id();
	e->reason = reason;
	e->background = background;
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	e->kstack_bytes = bpf_get_stack(ctx, e->kstack, cfg.stack_bytes, 0);
	e->ustack_bytes = 0;
	e->ustack_build_id = 0;
	if (cfg.user_stacks) {
		/*
		 * By build ID and file offset, which name a frame after its
		 * process has gone. A frame the kernel cannot give a build ID
		 * for (its file's first page not in memory, the mm's lock
		 * taken) comes as an address (BPF_STACK_BUILD_ID_IP).
		 */
		e->ustack_build_id = 1;
		e->ustack_bytes = bpf_get_stack(ctx, e->ustack, cfg.stack_bytes * 4,
						BPF_F_USER_STACK | BPF_F_USER_BUILD_ID);
	}
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
	return true;
}

/* Index in rstacks (and td_buckets) of slot r: TD_NR_SLOTS for TD_SLOT_NONE. */
static __always_inline __u32 rstack_index(__u32 r)
{
	return r == TD_SLOT_NONE ? TD_NR_SLOTS : r & (TD_NR_SLOTS - 1);
}

/*
 * Counts outcome `which` of a call at the stack path: in this CPU's sums
 * `c`, and in its reason's counters `rs` (if found).
 */
static __always_inline void stack_inc(struct td_counts *c, struct td_rstack *rs,
				      enum td_stack_stat which)
{
	c->stack[which]++;
	if (rs)
		rs->n[which]++;
}

/*
 * Sends the stack of this call, of captured reason `want`, to user space;
 * `c` is this CPU's counters; `later`: a uprobe's untagged call past its
 * site's first TD_UNTAGGED_PER_SITE, which leaves the allowance's `keep`.
 * Each call it sees ends as one of sampled out, rate capped, ring buffer
 * full or emitted, counted for its reason, whose budget it draws on.
 */
static __always_inline void sample(void *ctx, struct td_counts *c, __u64 ret, __u32 want,
				   bool later)
{
	__u32 i = rstack_index(want);
	struct td_rstack *rs = bpf_map_lookup_elem(&rstacks, &i);
	struct td_budget *b;

	stack_inc(c, rs, TD_STACK_MATCHED);
	if (cfg.sample_every > 1 && c->seen++ % cfg.sample_every) {
		stack_inc(c, rs, TD_STACK_SAMPLED_OUT);
		return;
	}
	b = bpf_map_lookup_elem(&budget, &i);
	if (!b || b->left <= (later ? b->keep : 0)) {
		stack_inc(c, rs, TD_STACK_RATE_CAPPED);
		return;
	}
	b->left--;
	if (!emit(ctx, ret, want, 0)) {
		stack_inc(c, rs, TD_STACK_RINGBUF_FULL);
		return;
	}
	stack_inc(c, rs, TD_STACK_EMITTED);
}

/*
 * Whether `ret`'s site is in the cache flagged, for the capture of its
 * reason or for the background sampler (its entry's lowest bit flipped:
 * the common path misses it); the entry as it is then in *e. No return
 * address is another's plus or minus one (x86 calls are 2 bytes or more,
 * arm64's are aligned), so a flagged entry names no other site.
 */
static __always_inline bool flagged_site(__u64 ret, __u64 *e)
{
	return cached(ret ^ 1, e) && *e;
}

/*
 * A resolved site's slot from the cache, flagged or not (`*flag`: the
 * flagged entry, else 0); TD_SLOT_NONE if not there. A flagged site's
 * call is told by the entry, so it takes no slower caller lookup.
 */
static __always_inline __u32 site_reason(__u64 ret, __u64 *flag)
{
	__u32 r = cached_reason(ret);
	__u64 e;

	*flag = 0;
	if (r == TD_SLOT_NONE && cfg.stacks && flagged_site(ret, &e)) {
		*flag = e;
		r = e >> TD_SLOT_SHIFT;
	}
	return r;
}

/* Clears a flag set on `ret`'s site as entry `e`, unless user space changed it. */
static __always_inline void unflag_site(__u64 ret, __u64 e)
{
	__u64 *cell = &site_cache[site_index(ret)];

	if (e && *(volatile __u64 *)cell == e)
		*(volatile __u64 *)cell = e ^ 1;
}

/*
 * The background sampler: takes this call's stack, of slot r (TD_SLOT_NONE:
 * a site not resolved yet) while r's bucket on this CPU has a token, so
 * the first calls of a burst have stacks however soon it ends. A call from
 * a site flagged as `flag` (0: none) clears the flag once the bucket is
 * empty: until user space flags it again on its next tick, the site's
 * calls take the common path. A token bucket as a theoretical arrival
 * time (GCRA): one word a bucket, one clock read a sample.
 */
static __always_inline void background(void *ctx, struct td_counts *c, __u64 ret, __u32 r,
				       __u64 flag)
{
	struct td_buckets *b = bpf_map_lookup_elem(&buckets, &zero);
	__u32 i = rstack_index(r);
	__u64 now, tat;

	if (!b)
		return;
	now = bpf_ktime_get_ns();
	tat = b->tat[i];
	if (tat < now)
		tat = now;
	if (tat - now > cfg.bg_burst_ns) {
		unflag_site(ret, flag);
		return;
	}
	tat += cfg.bg_every_ns;
	b->tat[i] = tat;
	stack_inc(c, bpf_map_lookup_elem(&rstacks, &i),
		  emit(ctx, ret, r, 1) ? TD_STACK_BG_SENT : TD_STACK_BG_LOST);
	if (tat - now > cfg.bg_burst_ns)
		unflag_site(ret, flag);
}

/*
 * The stack gate, capture on: whether this call, of slot r (TD_SLOT_NONE:
 * pending), belongs to a captured reason, and then its stack, counted
 * under that reason; `c` is this CPU's counters. True if it does.
 */
static __always_inline bool stack_gate(void *ctx, struct td_counts *c, __u64 ret, __u32 r,
				       bool loops)
{
	__u32 want = r == TD_SLOT_NONE ? range_reason(ret, loops) : r;

	if (!captured(want))
		return false;
	sample(ctx, c, ret, want, false);
	return true;
}

#endif
