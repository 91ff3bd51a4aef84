// SPDX-License-Identifier: GPL-2.0
/*
 * A pinned instance's files: BPF iterators over its counts map, pinned as
 * /sys/fs/bpf/topdown/FUNC/reasons (the seed's debugfs table) and
 * .../metrics (Prometheus text). A read runs the program in the kernel,
 * so `cat` needs no topdown process.
 *
 * Kept apart from topdown.bpf.c: only `topdown pin` loads it, reusing the
 * pinned instance's maps, so a kernel that cannot load it costs the
 * counting program nothing.
 *
 * A slot's total is its per-CPU counts plus the calls still in `pending`,
 * `fresh` and pool slots (td_pool) from sites a reader has resolved since
 * (their first calls stay there; see session/poll.rs). Calls from sites no
 * reader has resolved yet have no reason the kernel knows: they are shown
 * apart, as unresolved.
 *
 * Needs bpf_loop (5.17) and bpf_map_lookup_percpu_elem (5.19): an
 * iterator sees only the counts map's values for every CPU, and pending's
 * must be summed over the CPUs too. An older kernel refuses the load, and
 * the pin goes on without the files.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "topdown.h"

char LICENSE[] SEC("license") = "GPL";

/*
 * Set by user space before load: the possible CPUs (libbpf's count, the
 * per-CPU values an iterator is given) and the traced function's name.
 */
const volatile __u32 nr_cpus = 1;
const volatile char func_name[TD_NAME_LEN] = {};

/* The pinned instance's maps, reused. */
#include "shared_maps.bpf.h"

/* One slot's sum under way. */
struct td_sum {
	__u64 values;		/* the iterator's value: td_counts per possible CPU */
	__u64 key;		/* the pending site being summed */
	__u64 sum;
	__u32 slot;		/* TD_SLOT_NONE: the unresolved sites */
	__u32 word;		/* the u64 of td_counts being summed */
	struct td_pool *pool;
};

/*
 * CPU i's count of the slot. The value buffer only takes constant offsets
 * from the verifier, so the read is a probe read, bounded by the loop's
 * count (nr_cpus values of td_counts, a multiple of 8 bytes, lie there).
 */
static long counts_cpu(__u32 i, struct td_sum *s)
{
	__u64 n = 0;

	bpf_probe_read_kernel(&n, sizeof(n), (void *)(s->values + (__u64)i * sizeof(struct td_counts) +
						      (__u64)s->word * sizeof(__u64)));
	s->sum += n;
	return 0;
}

static long pending_cpu(__u32 cpu, struct td_sum *s)
{
	__u64 *n = bpf_map_lookup_percpu_elem(&pending, &s->key, cpu);

	if (n)
		s->sum += *n;
	return 0;
}

/* A pending site: summed over the CPUs if its slot is the one asked for. */
static long pending_site(struct bpf_map *map, __u64 *key, __u64 *value, struct td_sum *s)
{
	__u32 *slot = bpf_map_lookup_elem(&sites, key);

	if ((slot ? *slot : TD_SLOT_NONE) != s->slot)
		return 0;
	s->key = *key;
	bpf_loop(nr_cpus, pending_cpu, s, 0);
	return 0;
}

/* One CPU's fresh table, summed for a slot. */
struct td_fresh_sum {
	struct td_fresh *f;
	struct td_sum *s;
};

/* Entry i of a CPU's fresh table: its count if its site's slot is the one asked for. */
static long fresh_entry(__u32 i, struct td_fresh_sum *c)
{
	struct td_fresh_site *e = &c->f->e[i & (TD_FRESH - 1)];
	__u32 *slot;

	if (!e->ret)
		return 0;
	slot = bpf_map_lookup_elem(&sites, &e->ret);
	if ((slot ? *slot : TD_SLOT_NONE) == c->s->slot)
		c->s->sum += e->n;
	return 0;
}

/* CPU cpu's fresh table: looked up once, its entries walked. */
static long fresh_cpu(__u32 cpu, struct td_sum *s)
{
	__u32 zero = 0;
	struct td_fresh *f = bpf_map_lookup_percpu_elem(&fresh, &zero, cpu);
	struct td_fresh_sum c = { .s = s };

	if (!f)
		return 1;
	c.f = f;
	bpf_loop(TD_FRESH, fresh_entry, &c, 0);
	return 0;
}

/* Pool slot k: its calls on every CPU if its site's slot is the one asked for. */
static long pool_slot(__u32 k, struct td_sum *s)
{
	__u64 ret = s->pool->ret[k & (TD_POOL - 1)];
	__u32 *slot;

	if (!ret)
		return 0;
	slot = bpf_map_lookup_elem(&sites, &ret);
	if ((slot ? *slot : TD_SLOT_NONE) != s->slot)
		return 0;
	s->word = TD_NR_SLOTS + (k & (TD_POOL - 1));
	bpf_loop(nr_cpus, counts_cpu, s, 0);
	return 0;
}

/* Slot `slot`'s calls (TD_SLOT_NONE: the unresolved sites') on every CPU. */
static __u64 slot_sum(__u64 values, __u32 slot)
{
	struct td_sum s = { .values = values, .slot = slot, .word = slot };
	__u32 zero = 0;
	__u64 taken;

	if (slot < TD_NR_SLOTS)
		bpf_loop(nr_cpus, counts_cpu, &s, 0);
	bpf_for_each_map_elem(&pending, pending_site, &s, 0);
	bpf_loop(nr_cpus, fresh_cpu, &s, 0);
	s.pool = bpf_map_lookup_elem(&pool, &zero);
	if (s.pool) {
		taken = s.pool->next;
		bpf_loop(taken < TD_POOL ? taken : TD_POOL, pool_slot, &s, 0);
	}
	return s.sum;
}

/* Stack-path counter `i` (TD_STACK_*) on every CPU: it follows n[] in td_counts. */
static __u64 stack_sum(__u64 values, __u32 i)
{
	struct td_sum s = { .values = values, .word = TD_ALL_SLOTS + i };

	bpf_loop(nr_cpus, counts_cpu, &s, 0);
	return s.sum;
}

/* One output, walking the named reason slots. */
struct td_walk {
	struct seq_file *seq;
	__u64 values;
	bool prom;
};

static long print_reason(__u32 slot, struct td_walk *w)
{
	__u32 key = slot;
	struct td_name *name;
	__u64 n;

	if (slot < TD_FIRST_REASON)
		return 0;
	name = bpf_map_lookup_elem(&names, &key);
	if (!name)
		return 0;
	n = slot_sum(w->values, slot);
	if (w->prom)
		BPF_SEQ_PRINTF(w->seq, "topdown_calls_total{function=\"%s\",reason=\"%s\"} %llu\n",
			       func_name, name->s, n);
	else
		BPF_SEQ_PRINTF(w->seq, "%s: %llu\n", name->s, n);
	return 0;
}

static int print(struct bpf_iter__bpf_map_elem *ctx, bool prom)
{
	struct td_walk w = { .seq = ctx->meta->seq, .prom = prom };
	__u64 not_found, full, unresolved, sampled_out, capped, ringbuf_full, bg_lost;
	void *value = ctx->value;

	/* The map's one element; then a last call with none, to end. */
	if (!value)
		return 0;
	/* The register tested, not a new load from ctx (which may be NULL). */
	barrier_var(value);
	w.values = (__u64)value;
	if (prom) {
		BPF_SEQ_PRINTF(w.seq, "# HELP topdown_calls_total Calls of the pinned kernel "
			       "function or tracepoint per reason since it was pinned.\n");
		BPF_SEQ_PRINTF(w.seq, "# TYPE topdown_calls_total counter\n");
	} else {
		BPF_SEQ_PRINTF(w.seq, "%s: calls per reason since it was pinned\n", func_name);
	}
	bpf_loop(TD_NR_SLOTS, print_reason, &w, 0);
	not_found = slot_sum(w.values, TD_SLOT_NOT_FOUND);
	full = slot_sum(w.values, TD_SLOT_SITES_FULL);
	unresolved = slot_sum(w.values, TD_SLOT_NONE);
	/* Stacks not captured, by cause, as serve names them. */
	sampled_out = stack_sum(w.values, TD_STACK_SAMPLED_OUT);
	capped = stack_sum(w.values, TD_STACK_RATE_CAPPED);
	ringbuf_full = stack_sum(w.values, TD_STACK_RINGBUF_FULL);
	bg_lost = stack_sum(w.values, TD_STACK_BG_LOST);
	if (prom) {
		BPF_SEQ_PRINTF(w.seq, "# HELP topdown_drops_total Calls not counted under their "
			       "reason, and stacks not captured, by cause.\n");
		BPF_SEQ_PRINTF(w.seq, "# TYPE topdown_drops_total counter\n");
		BPF_SEQ_PRINTF(w.seq,
			       "topdown_drops_total{function=\"%s\",cause=\"caller_not_found\"} %llu\n",
			       func_name, not_found);
		BPF_SEQ_PRINTF(w.seq, "topdown_drops_total{function=\"%s\",cause=\"sites_full\"} %llu\n",
			       func_name, full);
		BPF_SEQ_PRINTF(w.seq,
			       "topdown_drops_total{function=\"%s\",cause=\"stacks_sampled_out\"} %llu\n",
			       func_name, sampled_out);
		BPF_SEQ_PRINTF(w.seq,
			       "topdown_drops_total{function=\"%s\",cause=\"stacks_rate_capped\"} %llu\n",
			       func_name, capped);
		BPF_SEQ_PRINTF(w.seq,
			       "topdown_drops_total{function=\"%s\",cause=\"stacks_ringbuf_full\"} %llu\n",
			       func_name, ringbuf_full);
		BPF_SEQ_PRINTF(w.seq,
			       "topdown_drops_total{function=\"%s\",cause=\"stacks_background_lost\"} %llu\n",
			       func_name, bg_lost);
		if (unresolved)
			BPF_SEQ_PRINTF(w.seq, "# %llu calls from call sites not resolved yet: "
				       "topdown show %s resolves them\n", unresolved, func_name);
	} else {
		BPF_SEQ_PRINTF(w.seq, "caller_not_found: %llu\n", not_found);
		BPF_SEQ_PRINTF(w.seq, "sites_full: %llu\n", full);
		BPF_SEQ_PRINTF(w.seq, "stacks_sampled_out: %llu\n", sampled_out);
		BPF_SEQ_PRINTF(w.seq, "stacks_rate_capped: %llu\n", capped);
		BPF_SEQ_PRINTF(w.seq, "stacks_ringbuf_full: %llu\n", ringbuf_full);
		BPF_SEQ_PRINTF(w.seq, "stacks_background_lost: %llu\n", bg_lost);
		if (unresolved)
			BPF_SEQ_PRINTF(w.seq, "unresolved: %llu (call sites not resolved yet: "
				       "topdown show %s resolves them)\n", unresolved, func_name);
	}
	return 0;
}

SEC("iter/bpf_map_elem")
int reasons_file(struct bpf_iter__bpf_map_elem *ctx)
{
	return print(ctx, false);
}

SEC("iter/bpf_map_elem")
int metrics_file(struct bpf_iter__bpf_map_elem *ctx)
{
	return print(ctx, true);
}
