// SPDX-License-Identifier: GPL-2.0
/*
 * topdown's kernel side.
 *
 * Tier 1 (always on): on every call of the traced function, find the
 * caller's return address, map it through the `sites` table (filled by user
 * space) to a reason slot and bump that slot of a per-CPU array.  Return
 * addresses not yet in `sites` are counted per address in `pending` until
 * user space has resolved them, so no event is lost or misfiled meanwhile.
 *
 * Tier 2 (on demand): a second program, attached only while stack mode is
 * on, sends rate-limited kernel (and optionally user) stacks of one reason
 * to a ring buffer.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "topdown.h"

char LICENSE[] SEC("license") = "GPL";

/* Set by user space before load. */
const volatile __u64 func_addr = 0;	/* traced function's entry (kallsyms) */
const volatile __u64 entry_window = 16;	/* FUNC+5, or +9 with IBT, lies in it */
const volatile bool verify_caller = false;	/* also unwind and compare */
const volatile bool user_stacks = false;
const volatile __u32 stack_bytes = TD_MAX_FRAMES * 8;
const volatile __u32 sample_every = 1;	/* keep 1 in N matching events */
const volatile __u64 max_per_cpu_sec = 100; /* stack cap, per CPU and second */
const volatile __u32 own_tgid = 0;	/* topdown itself: its calls are not counted */
/* Self-test only: frames above the caller come from the test's context. */
const volatile bool synthetic_stack = false;
/* Callers whose reason depends on deeper frames, and the rules that decide. */
const volatile __u32 nr_callers = 0;
const volatile struct td_caller callers[TD_MAX_CALLERS] = {};
const volatile struct td_rule rules[TD_MAX_RULES] = {};

/* Changed by user space at run time (mmap'ed .data and .bss). */
__u32 stack_reason = TD_SLOT_NONE;
/*
 * The caller functions of stack_reason, so that calls from call sites not
 * resolved yet (a caller's first calls) are captured too.
 */
__u32 nr_stack_ranges = 0;
struct td_range stack_ranges[TD_MAX_STACK_RANGES] = {};

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

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct td_stats);
} stats SEC(".maps");

/* Scratch space for unwinds: too big for the 512-byte BPF stack. */
struct td_scratch {
	__u64 ips[TD_UNWIND_FRAMES];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct td_scratch);
} scratch SEC(".maps");

struct td_rate {
	__u64 window_start;
	__u64 in_window;
	__u64 seen;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct td_rate);
} rate SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 22);
} samples SEC(".maps");

/* Keep these types in the skeleton's `types` module. */
struct td_sample _td_sample = {};
struct td_counts _td_counts = {};
struct td_stats _td_stats = {};

static __always_inline bool in_entry(__u64 ip)
{
	return ip - func_addr < entry_window;
}

/*
 * The cheap way to find the caller under fentry: the trampoline was called
 * from FUNC's entry, so FUNC+5 (FUNC+9 with IBT) sits a few slots above the
 * argument block at ctx and the caller's return address right above it.
 * Scanning for it, instead of using fixed offsets, keeps this right whatever
 * the trampoline layout (an fexit program adds a return-value slot).
 */
static __always_inline __u64 fentry_caller(void *ctx)
{
	__u64 slots[TD_SCAN_SLOTS];

	if (bpf_probe_read_kernel(slots, sizeof(slots), ctx))
		return 0;
	for (int i = 0; i < TD_SCAN_SLOTS - 1; i++) {
		if (in_entry(slots[i]))
			return slots[i + 1];
	}
	return 0;
}

/*
 * The expensive way: a full unwind.  Returns the index of the caller's
 * frame in s->ips, or -1.
 */
static __always_inline int unwind_caller(void *ctx, struct td_scratch *s)
{
	long n = bpf_get_stack(ctx, s->ips, sizeof(s->ips), 0);

	if (n <= 0)
		return -1;
	n /= 8;
	for (int i = 0; i < TD_UNWIND_FRAMES - 1; i++) {
		if (i + 1 >= n)
			break;
		if (in_entry(s->ips[i]))
			return i + 1;
	}
	return -1;
}

static __always_inline struct td_stats *get_stats(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&stats, &zero);
}

/*
 * For td_selftest: the caller's return address and the frames above it are
 * the raw tracepoint arguments, so rule matching can be tested on stacks
 * made up by the test.  Production programs never take this path (the
 * verifier drops it: synthetic_stack is a constant false there).
 */
static __always_inline int synthetic_unwind(void *ctx, struct td_scratch *s)
{
	struct bpf_raw_tracepoint_args *a = ctx;

	for (int i = 0; i < TD_SELFTEST_ARGS; i++)
		s->ips[i] = a->args[i];
	return 0;
}

/* Reason of an event from a caller that needs a look at deeper frames. */
static __always_inline __u32 deep_reason(void *ctx, __u32 c)
{
	__u32 zero = 0, first = callers[c].rule_first, nr = callers[c].rule_count;
	struct td_scratch *s = bpf_map_lookup_elem(&scratch, &zero);
	int ci;

	if (!s)
		return callers[c].reason;
	ci = synthetic_stack ? synthetic_unwind(ctx, s) : unwind_caller(ctx, s);
	if (ci < 0) {
		struct td_stats *st = get_stats();

		if (st)
			st->deep_unwind_failed++;
		return callers[c].reason;
	}
	for (__u32 r = 0; r < TD_MAX_RULES; r++) {
		__u32 idx = first + r;

		if (r >= nr || idx >= TD_MAX_RULES)
			break;
		for (__u32 d = 1; d <= TD_MAX_RULE_DEPTH; d++) {
			__u32 f = ci + d;
			__u64 ip;

			if (d > rules[idx].depth || f >= TD_UNWIND_FRAMES)
				break;
			ip = s->ips[f & (TD_UNWIND_FRAMES - 1)];
			if (!ip)
				break;
			/* -1: a call can be a function's last instruction */
			if (ip - 1 >= rules[idx].lo && ip - 1 < rules[idx].hi)
				return rules[idx].reason;
		}
	}
	return callers[c].reason;
}

/*
 * Reason slot of a return address, or TD_SLOT_NONE if user space has not
 * resolved it yet.  Only callers listed in `callers` pay for an unwind.
 */
static __always_inline __u32 site_reason(void *ctx, __u64 ret)
{
	__u32 *slot;

	if (!ret)
		return TD_SLOT_NOT_FOUND;
	slot = bpf_map_lookup_elem(&sites, &ret);
	if (slot)
		return *slot;
	for (__u32 c = 0; c < TD_MAX_CALLERS; c++) {
		if (c >= nr_callers)
			break;
		if (ret - 1 >= callers[c].lo && ret - 1 < callers[c].hi)
			return deep_reason(ctx, c);
	}
	return TD_SLOT_NONE;
}

static __always_inline void verify(void *ctx, __u64 cheap)
{
	__u32 zero = 0;
	struct td_scratch *s = bpf_map_lookup_elem(&scratch, &zero);
	struct td_stats *st = get_stats();
	int ci;

	if (!s || !st)
		return;
	ci = unwind_caller(ctx, s);
	st->verify_checked++;
	if (ci < 0 || ci >= TD_UNWIND_FRAMES) {
		st->verify_unwind_failed++;
		return;
	}
	if (s->ips[ci] != cheap)
		st->verify_mismatch++;
}

static __always_inline void count(void *ctx, __u64 ret)
{
	__u32 zero = 0;
	struct td_counts *c = bpf_map_lookup_elem(&counts, &zero);
	__u64 one = 1, *p;
	__u32 r;

	if (!c)
		return;
	if (own_tgid && bpf_get_current_pid_tgid() >> 32 == own_tgid) {
		/* Symbolizing reads files: don't count what we cause. */
		struct td_stats *st = get_stats();

		if (st)
			st->own_calls++;
		return;
	}
	if (verify_caller)
		verify(ctx, ret);
	r = site_reason(ctx, ret);
	if (r != TD_SLOT_NONE) {
		c->n[r & (TD_NR_SLOTS - 1)]++;
		return;
	}
	/* First calls from a site: count per address until it is resolved. */
	p = bpf_map_lookup_elem(&pending, &ret);
	if (p) {
		(*p)++;
		return;
	}
	if (bpf_map_update_elem(&pending, &ret, &one, BPF_NOEXIST) == 0)
		return;
	p = bpf_map_lookup_elem(&pending, &ret);	/* lost a race to insert */
	if (p) {
		(*p)++;
		return;
	}
	c->n[TD_SLOT_SITES_FULL]++;
}

static __always_inline bool is_stack_reason(void *ctx, __u64 ret)
{
	__u32 r = site_reason(ctx, ret);

	if (r != TD_SLOT_NONE)
		return r == stack_reason;
	for (__u32 i = 0; i < TD_MAX_STACK_RANGES; i++) {
		if (i >= nr_stack_ranges)
			break;
		if (ret - 1 >= stack_ranges[i].lo && ret - 1 < stack_ranges[i].hi)
			return true;
	}
	return false;
}

static __always_inline void sample(void *ctx, __u64 ret)
{
	__u32 zero = 0;
	struct td_stats *st = get_stats();
	struct td_rate *rt = bpf_map_lookup_elem(&rate, &zero);
	struct td_sample *e;
	__u64 now, id;

	if (!st || !rt)
		return;
	if (own_tgid && bpf_get_current_pid_tgid() >> 32 == own_tgid)
		return;
	if (!is_stack_reason(ctx, ret))
		return;
	st->stack_matched++;
	if (sample_every > 1 && rt->seen++ % sample_every) {
		st->stack_sampled_out++;
		return;
	}
	now = bpf_ktime_get_ns();
	if (now - rt->window_start >= 1000000000ULL) {
		rt->window_start = now;
		rt->in_window = 0;
	}
	if (rt->in_window >= max_per_cpu_sec) {
		st->stack_rate_capped++;
		return;
	}
	rt->in_window++;
	e = bpf_ringbuf_reserve(&samples, sizeof(*e), 0);
	if (!e) {
		st->stack_ringbuf_full++;
		return;
	}
	id = bpf_get_current_pid_tgid();
	e->ts = now;
	e->pid = id >> 32;
	e->tid = (__u32)id;
	e->cpu = bpf_get_smp_processor_id();
	e->reason = stack_reason;
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	e->kstack_bytes = bpf_get_stack(ctx, e->kstack, stack_bytes, 0);
	e->ustack_bytes = 0;
	if (user_stacks)
		e->ustack_bytes = bpf_get_stack(ctx, e->ustack, stack_bytes,
						BPF_F_USER_STACK);
	bpf_ringbuf_submit(e, 0);
	st->stack_emitted++;
}

SEC("fentry")
int BPF_PROG(td_fentry)
{
	count(ctx, fentry_caller(ctx));
	return 0;
}

SEC("fentry")
int BPF_PROG(td_fentry_stack)
{
	sample(ctx, fentry_caller(ctx));
	return 0;
}

SEC("kprobe")
int BPF_KPROBE(td_kprobe)
{
	__u64 ret = 0;

	BPF_KPROBE_READ_RET_IP(ret, ctx);
	count(ctx, ret);
	return 0;
}

SEC("kprobe")
int BPF_KPROBE(td_kprobe_stack)
{
	__u64 ret = 0;

	BPF_KPROBE_READ_RET_IP(ret, ctx);
	sample(ctx, ret);
	return 0;
}

/*
 * Runs the counting path on a return address given as the first raw
 * tracepoint argument (the other arguments: frames above the caller, with
 * synthetic_stack), so BPF_PROG_TEST_RUN can exercise the site table,
 * pending counts, slots and deeper-frame rules on kernels that refuse fentry.
 */
SEC("raw_tp")
int td_selftest(struct bpf_raw_tracepoint_args *ctx)
{
	count(ctx, ctx->args[0]);
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
