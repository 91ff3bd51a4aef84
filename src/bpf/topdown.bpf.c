// SPDX-License-Identifier: GPL-2.0
/*
 * topdown's kernel side.
 *
 * Tier 1 (always on): on every call of the traced function, find the
 * caller's return address, map it through the site tables (filled by user
 * space) to a reason slot and bump that slot of a per-CPU array.  Return
 * addresses not yet resolved are counted per address in `pending` until
 * user space has resolved them, so no event is lost or misfiled meanwhile.
 *
 * The common path makes no helper call and tests nothing it can leave to
 * the slow one: the counters are looked up through a key user space makes
 * fail while it needs to see the calls (td_watch: topdown awake, stacks
 * captured), the caller's return address is one load (a plain load the
 * verifier guards, through bpf_rdonly_cast; a probe read where that kfunc
 * is missing), and a direct-mapped cache in .bss names the resolved site
 * and its slot. Everything else (new sites, deeper-frame rules, topdown's
 * own calls, the stack gate) is count_slow's. The --pid, --cgroup and
 * --cpu filters and --verify-caller have a program of their own, the
 * filters first, and only the ones asked for (load-time constants).
 *
 * Tier 2 (on demand): when the reason just counted is one user space
 * asked stacks of (ctl.captured), the same program sends its kernel (and
 * optionally user) stack to a ring buffer, rate-limited. The gate costs
 * the common path nothing, and is compiled out entirely when the run can
 * never capture (cfg.stacks false): switching capture on is stores to
 * mapped memory (the reasons, and a flag on each of their cached sites, so
 * that their calls alone leave the common path), with nothing to load or
 * attach.
 *
 * This file holds the programs and the counting path. What they call is in
 * headers included in this order, each after what it uses: common.bpf.h
 * (settings, global data, maps), caller.bpf.h (the caller's return address,
 * the site cache), resolve.bpf.h (new sites named in the kernel),
 * unnamed.bpf.h (the first calls of sites not named yet), deep.bpf.h
 * (deeper-frame rules), capture.bpf.h (the stack gate), drill.bpf.h (calls
 * counted by path), filters.bpf.h; and
 * last uprobe.bpf.h (user-space functions).
 */
#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "topdown.h"

char LICENSE[] SEC("license") = "GPL";

#include "common.bpf.h"
#include "caller.bpf.h"
#include "resolve.bpf.h"
#include "unnamed.bpf.h"
#include "deep.bpf.h"
#include "capture.bpf.h"
#include "drill.bpf.h"
#include "filters.bpf.h"

/*
 * Counts a call whose site is not in the cache (new, behind a deeper-frame
 * rule, or not found) on this CPU's counters `c`; returns its slot, or
 * TD_SLOT_NONE if it was counted as pending.
 */
static __always_inline __u32 count_uncached(void *ctx, struct td_counts *c, __u64 ret,
					    enum td_kind kind, bool loops)
{
	__u32 *slot, r = TD_SLOT_NONE;
	__u64 n;
	int dc;

	if (!ret) {
		r = TD_SLOT_NOT_FOUND;
	} else if (!surely_new(ret) && (slot = bpf_map_lookup_elem(&sites, &ret))) {
		r = *slot;
	} else if (cfg.deep_depth) {
		/* Read once, and before the tables it guards. */
		if (!*(volatile __u32 *)&deep.ready)
			return count_early(ctx, c, ret, kind, loops);
		asm volatile("" ::: "memory");
		/* Only callers with rules pay for an unwind. */
		dc = deep_caller(ret);
		if (dc >= 0)
			r = deep_reason(ctx, ret, dc, kind, loops);
		else if (loops && cfg.resolve && kind != TD_SELFTEST)
			r = resolve_site(ret, kind);
	} else if (loops && cfg.resolve && kind != TD_SELFTEST) {
		/* Named here where the kernel can (bpf_loop and bpf_snprintf). */
		r = resolve_site(ret, kind);
	}
	if (r != TD_SLOT_NONE) {
		c->n[r & (TD_NR_SLOTS - 1)]++;
		return r;
	}
	/* First calls from a site: counted per address until resolved. */
	if (count_pooled(c, ret, loops))
		return TD_SLOT_NONE;
	if (cfg.fresh && count_fresh(ret))
		return TD_SLOT_NONE;
	r = count_pending(&pending, &ret, &n);
	if (r == TD_SLOT_SITES_FULL)
		c->n[TD_SLOT_SITES_FULL]++;
	return r;
}

/*
 * A reader killed by SIGKILL cannot put back what it set: the program
 * would send its calls down the slow path, and take stacks nobody reads,
 * until the next reader came. Its lease lets the first watched or
 * captured call after it do that instead (the captured reason's flagged
 * sites are then cleared as their calls come: see count_slow_body). A
 * reader found to have lost its lease publishes its state again.
 *
 * `atomics`: the kernel has BPF's compare-and-swap (5.12; passed as
 * `loops`: a kernel with bpf_loop, 5.17, has it, and one without may not,
 * whose verifier refuses the instruction even where .rodata leaves it
 * dead). Then the lease is taken back only if it is still the one that ran
 * out (a reader that renewed it meanwhile keeps it, and its state), and
 * held as TD_LEASE_TAKING until the state is put back: a stalled reader
 * waits for that before it publishes its state again, so that these
 * stores cannot land after its own. Without, the lease is given up first
 * and the two can cross; the reader's next renewal then finds nothing
 * amiss.
 */
static __always_inline void lease_check(bool atomics)
{
	__u64 lease = *(volatile __u64 *)&ctl.lease_ns;

	if (!lease || bpf_ktime_get_ns() < lease)
		return;
	if (atomics) {
		if (__sync_val_compare_and_swap(&ctl.lease_ns, lease, TD_LEASE_TAKING) != lease)
			return;
	} else {
		*(volatile __u64 *)&ctl.lease_ns = 0;
	}
	*(volatile __u32 *)&ctl.nr_captured = 0;
	for (int i = 0; i < TD_NR_SLOTS / 64; i++)
		*(volatile __u64 *)&ctl.captured[i] = 0;
	*(volatile __u32 *)&ctl.own_tgid = 0;
	*(volatile __u8 *)&watch.why[TD_WATCH_OWN] = 0;
	*(volatile __u8 *)&watch.why[TD_WATCH_STACKS] = 0;
	/* fully ordered: the stores above are seen before the lease is free */
	if (atomics)
		__sync_lock_test_and_set(&ctl.lease_ns, 0);
}

/* Whether every call of path `path` is checked against an unwind (--verify-caller). */
static __always_inline bool verifies_all(enum td_path path)
{
	return path == TD_PATH_ANY && cfg.verify_caller;
}

/*
 * Every call the common path does not count: those user space watches
 * (`c` NULL: see td_watch; with --verify-caller, every call), and those
 * whose quick read the site cache did not know. Leaves out topdown's own
 * calls, finds the caller the checked way where the quick read may be
 * wrong (fentry on x86), counts the call, then runs the stack gate. One
 * subprogram called once: the verifier walks the new-site path (and its
 * deeper-frame rules) once, and the common path keeps no values for it.
 */
static __always_inline void count_slow_body(void *ctx, struct td_counts *c, enum td_kind kind,
					    enum td_path path, bool loops)
{
	bool verify_all = verifies_all(path);
	__u64 quick, ret, flag = 0;
	__u32 r;
	bool hit;

	if (!c)
		lease_check(loops);
	if (!c || verify_all) {
		if (is_own_call()) {
			/* Symbolizing reads files: don't count what we cause. */
			stat_inc(TD_STAT_OWN_CALLS);
			return;
		}
		c = bpf_map_lookup_elem(&counts, &zero);
		if (!c)
			return;
	}
	/* read again: passed from the common path, it took a register there */
	ret = quick = quick_caller(ctx, kind, false);
	r = site_reason(quick, &flag);
	hit = r != TD_SLOT_NONE && (kind != TD_TP || r != TD_SLOT_NOT_FOUND);
	if (kind == TD_FENTRY && quick_fentry() && (!hit || verify_all)) {
		ret = fentry_caller(ctx);
		r = site_reason(ret, &flag);
	}
	/*
	 * A deeper-frame caller's frames the quick way where they were
	 * learned (x86-64, 5.17 and later), else the checked way's unwind.
	 */
	if (kind == TD_TP && (!hit || verify_all)) {
		r = TD_SLOT_NONE;
		if (loops && !verify_all)
			r = tp_quick_reason(ctx, quick, loops);
		if (r == TD_SLOT_NONE) {
			ret = tp_caller(ctx, quick);
			r = site_reason(ret, &flag);
		}
	}
	/*
	 * `hit` stays the quick read's (a flagged entry it names counts): the
	 * caller check compares what the quick read claimed.
	 */
	if (!hit)
		stat_inc(TD_STAT_UNCACHED);
	if (verify_all) {
		if (loops)
			verify_loop(ctx, ret, kind);
		else
			verify(ctx, ret, kind);
		/* the quick read's claim: a cached site it gives is the caller */
		if (hit && quick != ret)
			stat_inc(TD_STAT_VERIFY_MISMATCH);
	}
	if (r == TD_SLOT_NONE) {
		r = count_uncached(ctx, c, ret, kind, loops);
	} else {
		c->n[r & (TD_ALL_SLOTS - 1)]++;
		/* a pooled site has no reason yet: to the gate, as a pending one */
		if (r >= TD_NR_SLOTS)
			r = TD_SLOT_NONE;
	}
	/*
	 * --drill: a captured reason's calls by path too, a pending site's by
	 * its caller's range as at the gate (compiled in if asked).
	 */
	if (cfg.drill_levels && *(volatile __u32 *)&ctl.nr_captured) {
		if (loops)
			drill_loop(ctx, ret, r, kind);
		else
			drill(ctx, ret, r, kind);
	}
	/* the stack gate, compiled in if stacks may be captured in this run */
	if (!cfg.stacks)
		return;
	if (*(volatile __u32 *)&ctl.nr_captured) {
		lease_check(loops);
		if (stack_gate(ctx, c, ret, r, loops))
			return;
	}
	/*
	 * Not a captured reason's: the background sampler's if the site is
	 * flagged or not in the cache, not for a watched call of a cached
	 * site (the bucket is empty, or its flag would be set). A flagged
	 * site that neither wants (capture moved on, no sampler) is cleared:
	 * its next calls take the common path.
	 */
	if (cfg.bg_every_ns && (flag || !hit))
		background(ctx, c, ret, r, flag);
	else
		unflag_site(ret, flag);
}

/* count_slow_body, without bpf_loop and with it (see verify). */
static __noinline void count_slow(void *ctx, struct td_counts *c, enum td_kind kind,
				  enum td_path path)
{
	count_slow_body(ctx, c, kind, path, false);
}

static __noinline void count_slow_loop(void *ctx, struct td_counts *c, enum td_kind kind,
				       enum td_path path)
{
	count_slow_body(ctx, c, kind, path, true);
}

/*
 * Whether the quick read names a resolved site (its cache entry in *e). A
 * tracepoint's word may be no return address at all (an argument, before
 * the first call taught the read where to look).
 */
static __always_inline bool quick_hit(void *ctx, enum td_kind kind, enum td_path path, __u64 *e)
{
	__u64 ret = quick_caller(ctx, kind, path == TD_PATH_KNOWN);

	if (kind != TD_TP)
		return cached(ret, e);
	/*
	 * A word that is no return address can match an empty entry (one
	 * that names address 0, "not found"), which a tracepoint's sites
	 * never resolve to: taken as a miss.
	 */
	return cached(ret, e) && *e >> TD_SLOT_SHIFT != TD_SLOT_NOT_FOUND;
}

/*
 * Counts the call: the common path, a lookup of the counters through the
 * watch key, the quick read and the site cache, and the count. Anything
 * else is count_slow's: a watched call, a site not cached or flagged (its
 * reason captured, or sampled in the background), --verify-caller.
 */
static __always_inline void count_call(void *ctx, enum td_kind kind, enum td_path path,
				       bool loops)
{
	struct td_counts *c;
	__u64 e;

	c = bpf_map_lookup_elem(&counts, &watch);
	if (c && !verifies_all(path) && quick_hit(ctx, kind, path, &e)) {
		/* the slot's counter: its byte offset is the entry's top bits */
		(*(__u64 *)((void *)c->n + (e >> TD_SITE_SHIFT)))++;
		return;
	}
	if (loops)
		count_slow_loop(ctx, c, kind, path);
	else
		count_slow(ctx, c, kind, path);
}

/* The counting path `path`: filtered before the caller is looked for. */
static __always_inline void count_on(void *ctx, enum td_kind kind, enum td_path path,
				     bool loops)
{
	if (wanted(ctx, path))
		count_call(ctx, kind, path, loops);
}

/*
 * The counting programs, one per kind, path and use of bpf_loop: user space
 * loads the one its settings call for (TD_PATH_ANY with a filter or
 * --verify-caller), with bpf_loop where the kernel has it (5.17 and later),
 * else its "_nl" twin. Every one is count_on with constants; the context's
 * type is the program type's, whatever the C says.
 */
#define TD_PROG(sec, name, kind, path, loops)			\
	SEC(sec) int name(void *ctx)				\
	{							\
		count_on(ctx, kind, path, loops);		\
		return 0;					\
	}

#define TD_PROGS(sec, stem, kind)					\
	TD_PROG(sec, stem, kind, TD_PATH_COMMON, true)			\
	TD_PROG(sec, stem##_any, kind, TD_PATH_ANY, true)		\
	TD_PROG(sec, stem##_nl, kind, TD_PATH_COMMON, false)		\
	TD_PROG(sec, stem##_any_nl, kind, TD_PATH_ANY, false)

TD_PROGS("fentry", td_fentry, TD_FENTRY)
/* td_fentry where the kernel has bpf_rdonly_cast (6.2): see TD_PATH_KNOWN. */
TD_PROG("fentry", td_fentry_known, TD_FENTRY, TD_PATH_KNOWN, true)
TD_PROGS("kprobe", td_kprobe, TD_KPROBE)
/*
 * A tracepoint's: a BTF tracepoint (5.5), else a raw one (4.17), counted
 * by the code that fired it.
 */
TD_PROGS("tp_btf", td_tp, TD_TP)
TD_PROGS("raw_tp", td_rawtp, TD_TP)
/*
 * The counting paths run on a return address given as the first raw
 * tracepoint argument (the other arguments: frames above the caller, with
 * cfg.synthetic_stack; see td_raw_tp_args), so BPF_PROG_TEST_RUN can
 * exercise the site table, pending counts, slots, deeper-frame rules and
 * the choice of stacks on kernels that refuse fentry.
 */
TD_PROGS("raw_tp", td_selftest, TD_SELFTEST)

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

/* The cost baseline: what a bare per-CPU counter costs on the same calls. */
#define TD_BARE(sec, name)					\
	SEC(sec) int name(void *ctx)				\
	{							\
		__u64 *n = bpf_map_lookup_elem(&bare, &zero);	\
								\
		if (n)						\
			(*n)++;					\
		return 0;					\
	}

TD_BARE("fentry", td_bare_fentry)
TD_BARE("kprobe", td_bare_kprobe)
TD_BARE("tp_btf", td_bare_tp)
TD_BARE("raw_tp", td_bare_rawtp)

#include "uprobe.bpf.h"

