/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The first calls from a call site not named yet, counted by address until
 * it is (by user space; from 5.17 the program names most sites itself,
 * resolve.bpf.h): a pool slot of its own, else this CPU's fresh table (a
 * pinned instance's), else the pending hash (common.bpf.h's count_pending).
 * Needs common.bpf.h and caller.bpf.h.
 */
#ifndef TOPDOWN_UNNAMED_H
#define TOPDOWN_UNNAMED_H

/*
 * Counts a call from a site not resolved yet in this CPU's fresh table, if
 * its entry is the site's or free (then taken, and new_sites set, as by
 * count_pending): false if another site holds it. Per CPU, so no atomics;
 * a program does not run nested on its CPU (the kernel's recursion check;
 * before 5.12 fentry has none, and an interrupt's call that came between
 * the test and the store of a free entry would be counted as this one's
 * site, as it could lose an increment of any per-CPU counter).
 */
static __always_inline bool count_fresh(__u64 ret)
{
	struct td_fresh *f = bpf_map_lookup_elem(&fresh, &zero);
	struct td_fresh_site *e;

	if (!f)
		return false;
	e = &f->e[(ret >> 3) & (TD_FRESH - 1)];
	if (e->ret != ret) {
		if (e->ret)
			return false;
		e->ret = ret;
		*(volatile __u32 *)&new_sites = 1;
	}
	e->n++;
	return true;
}

/*
 * Counts a new site's call in a pool slot of its own (see td_pool), and
 * claims the site's empty cache entry for it, so that its next calls take
 * the common path (or the flagged one): false where the entry is taken or
 * the pool is used up.
 * `atomics`: the kernel has BPF's fetch-and-add and compare-and-swap
 * (passed as `loops`, as for lease_check). Two CPUs may pool one site
 * twice; both slots are summed under its reason. The slot's address is
 * written before its first count, so a reader that sees the count sees
 * whose it is (the exchange orders the two; or it reads an address of 0
 * and takes the slot next time).
 */
static __always_inline bool count_pooled(struct td_counts *c, __u64 ret, bool atomics)
{
	__u64 *cell = &site_cache[site_index(ret)];
	struct td_pool *p;
	__u64 k;

	if (!atomics || cfg.no_pool || *(volatile __u64 *)cell || !cacheable(ret))
		return false;
	p = bpf_map_lookup_elem(&pool, &zero);
	if (!p || *(volatile __u64 *)&p->next >= TD_POOL)
		return false;
	k = __sync_fetch_and_add(&p->next, 1);
	if (k >= TD_POOL)
		return false;
	__sync_lock_test_and_set(&p->ret[k], ret);
	c->n[TD_NR_SLOTS + k]++;
	/*
	 * Flagged where stacks may be taken: its next calls reach the stack
	 * gate and the background sampler, which clear the flag once they
	 * want no more of them (as for a resolved site).
	 */
	__sync_val_compare_and_swap(cell, 0, cache_entry(ret, TD_NR_SLOTS + k) ^ !!cfg.stacks);
	return true;
}

#endif
