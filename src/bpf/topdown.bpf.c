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
const volatile struct td_config cfg = {};

/* Changed by user space at run time (mmap'ed .data); see td_control. */
struct td_control ctl = { .reason = TD_SLOT_NONE };

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

/* Keep these types (and the enums in them) in the skeleton's `types`. */
struct td_sample _td_sample = {};
struct td_counts _td_counts = {};
struct td_stats _td_stats = {};
enum td_abi _td_abi = TD_NR_SLOTS;
enum td_stat _td_stat = TD_NR_STATS;
enum td_slot_none _td_slot_none = TD_SLOT_NONE;

static __always_inline bool in_entry(__u64 ip)
{
	return ip - cfg.func_addr < TD_ENTRY_WINDOW;
}

/*
 * arm64, fentry: where the caller's return address lies in the trampoline
 * frame.  x86: the trampoline's return address (FUNC+5, FUNC+9 with IBT)
 * is pushed by the call from FUNC's entry, right below the caller's return
 * address.  arm64: FUNC's patched entry is "mov x9, x30; bl <trampoline>",
 * and the trampoline pushes two frame records, {FP, x9 = the caller's
 * return address} for the parent, then {FP, LR = FUNC+8 (+12 behind a
 * BTI)} for FUNC (arch/arm64/net/bpf_jit_comp.c, prepare_trampoline; seen
 * on Debian's 6.12), so the parent record's FP slot lies between the two.  The slots below the
 * records (return value, padding) are not written before the programs run:
 * a stale FUNC+8 there was taken for the entry in 68 of 2005 calls with an
 * fexit program attached.  So on arm64 the entry slot must also be in a
 * frame record whose FP points at the parent record, i.e. at the slot after
 * the entry slot.
 */
#if defined(__TARGET_ARCH_arm64)
#define TD_CALLER_SLOT 2
static __always_inline bool entry_record(void *ctx, __u64 *slots, int i)
{
	return i > 0 && slots[i - 1] == (__u64)ctx + (i + 1) * 8;
}
#else
#define TD_CALLER_SLOT 1
static __always_inline bool entry_record(void *ctx, __u64 *slots, int i)
{
	return true;
}
#endif

/*
 * The cheap way to find the caller under fentry: the trampoline was called
 * from FUNC's entry, so FUNC's entry address sits a few slots above the
 * argument block at ctx and the caller's return address TD_CALLER_SLOT
 * slots above it.  Scanning for it, instead of using fixed offsets, keeps
 * this right whatever the trampoline layout (an fexit program adds a
 * return-value slot).
 */
static __always_inline __u64 fentry_caller(void *ctx)
{
	__u64 slots[TD_SCAN_SLOTS];

	if (bpf_probe_read_kernel(slots, sizeof(slots), ctx))
		return 0;
	for (int i = 0; i < TD_SCAN_SLOTS - TD_CALLER_SLOT; i++) {
		if (in_entry(slots[i]) && entry_record(ctx, slots, i))
			return slots[i + TD_CALLER_SLOT];
	}
	return 0;
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
static __always_inline int entry_caller(void *ctx, struct td_scratch *s, int i)
{
	struct pt_regs *regs = ctx;
	__u64 lr, call;
	__u32 insn;

	if (s->ips[i] != cfg.func_addr)
		return i + 1;
	if (bpf_probe_read_kernel(&lr, sizeof(lr), &regs->regs[30]))
		return -1;
	call = lr - 4;
	if (bpf_probe_read_kernel(&insn, sizeof(insn), (void *)call))
		return -1;
	if ((insn & 0xfffffc1f) != 0xd63f0000 &&	/* blr xN */
	    ((insn & 0xfc000000) != 0x94000000 ||	/* bl FUNC */
	     call + (__s64)((__s32)(insn << 6) >> 4) != cfg.func_addr))
		return -1;
	s->ips[i] = lr;
	return i;
}
#else
static __always_inline int entry_caller(void *ctx, struct td_scratch *s, int i)
{
	return i + 1;
}
#endif

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
			return entry_caller(ctx, s, i);
	}
	return -1;
}

static __always_inline void stat_inc(enum td_stat which)
{
	__u32 zero = 0;
	struct td_stats *st = bpf_map_lookup_elem(&stats, &zero);

	if (st)
		st->n[which]++;
}

/*
 * For td_selftest: the caller's return address and the frames above it are
 * the raw tracepoint arguments, so rule matching can be tested on stacks
 * made up by the test.  Production programs never take this path (the
 * verifier drops it: cfg.synthetic_stack is a constant false there).
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
	__u32 zero = 0, first = cfg.callers[c].rule_first;
	__u32 nr = cfg.callers[c].rule_count;
	struct td_scratch *s = bpf_map_lookup_elem(&scratch, &zero);
	int ci;

	if (!s)
		return cfg.callers[c].reason;
	ci = cfg.synthetic_stack ? synthetic_unwind(ctx, s) : unwind_caller(ctx, s);
	if (ci < 0) {
		stat_inc(TD_STAT_DEEP_UNWIND_FAILED);
		return cfg.callers[c].reason;
	}
	for (__u32 r = 0; r < TD_MAX_RULES; r++) {
		__u32 idx = first + r;

		if (r >= nr || idx >= TD_MAX_RULES)
			break;
		for (__u32 d = 1; d <= TD_MAX_RULE_DEPTH; d++) {
			__u32 f = ci + d;
			__u64 ip;

			if (d > cfg.rules[idx].depth || f >= TD_UNWIND_FRAMES)
				break;
			ip = s->ips[f & (TD_UNWIND_FRAMES - 1)];
			if (!ip)
				break;
			/* -1: a call can be a function's last instruction */
			if (ip - 1 >= cfg.rules[idx].lo && ip - 1 < cfg.rules[idx].hi)
				return cfg.rules[idx].reason;
		}
	}
	return cfg.callers[c].reason;
}

/*
 * Reason slot of a return address, or TD_SLOT_NONE if user space has not
 * resolved it yet.  Only callers listed in cfg.callers pay for an unwind.
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
		if (c >= cfg.nr_callers)
			break;
		if (ret - 1 >= cfg.callers[c].lo && ret - 1 < cfg.callers[c].hi)
			return deep_reason(ctx, c);
	}
	return TD_SLOT_NONE;
}

static __always_inline void verify(void *ctx, __u64 cheap)
{
	__u32 zero = 0;
	struct td_scratch *s = bpf_map_lookup_elem(&scratch, &zero);
	int ci;

	if (!s)
		return;
	ci = unwind_caller(ctx, s);
	stat_inc(TD_STAT_VERIFY_CHECKED);
	if (ci < 0 || ci >= TD_UNWIND_FRAMES) {
		stat_inc(TD_STAT_VERIFY_UNWIND_FAILED);
		return;
	}
	if (s->ips[ci] != cheap)
		stat_inc(TD_STAT_VERIFY_MISMATCH);
}

static __always_inline bool is_own_call(void)
{
	return cfg.own_tgid && bpf_get_current_pid_tgid() >> 32 == cfg.own_tgid;
}

static __always_inline void count(void *ctx, __u64 ret)
{
	__u32 zero = 0;
	struct td_counts *c = bpf_map_lookup_elem(&counts, &zero);
	__u64 one = 1, *p;
	__u32 r;

	if (!c)
		return;
	if (is_own_call()) {
		/* Symbolizing reads files: don't count what we cause. */
		stat_inc(TD_STAT_OWN_CALLS);
		return;
	}
	if (cfg.verify_caller)
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

/*
 * Whether a call from `ret` belongs to stack reason `want`: its site's
 * reason, or for a site not resolved yet, a caller range of that reason.
 * Ranges carry their reason, so ranges being rewritten for another reason
 * never make a call count for `want`.
 */
static __always_inline bool is_stack_reason(void *ctx, __u64 ret, __u32 want)
{
	__u32 r = site_reason(ctx, ret);
	__u32 nr;

	if (r != TD_SLOT_NONE)
		return r == want;
	nr = *(volatile __u32 *)&ctl.nr_ranges;
	for (__u32 i = 0; i < TD_MAX_STACK_RANGES; i++) {
		if (i >= nr)
			break;
		if (ctl.ranges[i].reason == want && ret - 1 >= ctl.ranges[i].lo &&
		    ret - 1 < ctl.ranges[i].hi)
			return true;
	}
	return false;
}

static __always_inline void sample(void *ctx, __u64 ret)
{
	/* Read once: user space may move capture meanwhile. */
	__u32 want = *(volatile __u32 *)&ctl.reason;
	__u32 zero = 0;
	struct td_rate *rt;
	struct td_sample *e;
	__u64 now, id;

	if (want == TD_SLOT_NONE || is_own_call())
		return;
	rt = bpf_map_lookup_elem(&rate, &zero);
	if (!rt || !is_stack_reason(ctx, ret, want))
		return;
	stat_inc(TD_STAT_STACK_MATCHED);
	if (cfg.sample_every > 1 && rt->seen++ % cfg.sample_every) {
		stat_inc(TD_STAT_STACK_SAMPLED_OUT);
		return;
	}
	now = bpf_ktime_get_ns();
	if (now - rt->window_start >= 1000000000ULL) {
		rt->window_start = now;
		rt->in_window = 0;
	}
	if (rt->in_window >= cfg.max_per_cpu_sec) {
		stat_inc(TD_STAT_STACK_RATE_CAPPED);
		return;
	}
	rt->in_window++;
	e = bpf_ringbuf_reserve(&samples, sizeof(*e), 0);
	if (!e) {
		stat_inc(TD_STAT_STACK_RINGBUF_FULL);
		return;
	}
	id = bpf_get_current_pid_tgid();
	e->ts = now;
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
	bpf_ringbuf_submit(e, 0);
	stat_inc(TD_STAT_STACK_EMITTED);
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
 * Runs the counting path, then the stack path, on a return address given
 * as the first raw tracepoint argument (the other arguments: frames above
 * the caller, with cfg.synthetic_stack), so BPF_PROG_TEST_RUN can exercise
 * the site table, pending counts, slots, deeper-frame rules and the choice
 * of stacks on kernels that refuse fentry.
 */
SEC("raw_tp")
int td_selftest(struct bpf_raw_tracepoint_args *ctx)
{
	count(ctx, ctx->args[0]);
	sample(ctx, ctx->args[0]);
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
