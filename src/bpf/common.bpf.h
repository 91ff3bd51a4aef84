/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What every part of topdown's kernel side shares: the settings, the global
 * data and maps user space reads and writes (through the skeleton), and the
 * small helpers the parts use on them. Included first by topdown.bpf.c.
 */
#ifndef TOPDOWN_COMMON_H
#define TOPDOWN_COMMON_H

/* Set by user space before load. */
const volatile struct td_config cfg = {};

/*
 * The key of the single-entry arrays. Passed from .rodata, a lookup takes
 * one instruction for its key where one on the stack takes four: a store,
 * and the stack pointer copied and moved.
 */
static const __u32 zero = 0;

/* Changed by user space at run time (mmap'ed .data); see td_control. */
struct td_control ctl SEC(".data") = {};

/* See td_watch: 0 but while user space watches the calls. */
struct td_watch watch;

/*
 * Resolved sites, by hash of the return address (mmap'ed .bss, written by
 * user space, each entry once, in one 8-byte store): an array load instead
 * of a hash lookup.
 */
__u64 site_cache[TD_SITE_CACHE];

/*
 * Where the first calls found FUNC's entry address among the words above
 * ctx (fentry), as a byte offset from ctx (the common path then has no
 * shift to make); the caller's return address is a fixed step further. A
 * trampoline rebuilt with another layout (an fexit program added) makes
 * the next call search again. Shared by the CPUs: a race only repeats a
 * search.
 */
__u32 entry_off;

/*
 * A tracepoint's program: where the first calls found the return address
 * into the code that fired it, among the words above ctx (the arguments,
 * in bpf_trace_runN's frame), as a byte offset from ctx. The glue between
 * is the same code on every call, so the offset holds until the static
 * call changes (another program on the tracepoint), and the next call
 * that misses searches again.
 */
__u32 tp_off;

/* A tracepoint's program: the frames its unwind needs to reach the firing frame. */
__u32 tp_frames;

/*
 * Set when a call site is first counted as pending (mmap'ed .bss): user
 * space, whatever its print interval, clears it and resolves the new
 * sites within a tick, so their calls leave the pending path soon.
 */
__u32 new_sites;

/* The deeper-frame rules; see td_deep. */
struct td_deep deep;

#include "shared_maps.bpf.h"

/*
 * Calls counted before the deeper-frame rules were ready (see td_early_key):
 * user space adds them to their reasons on every poll, as it does pending
 * sites. Sized to one entry when the run has no deeper-frame rules.
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, TD_MAX_SITES);
	__type(key, struct td_early_key);
	__type(value, __u64);
} early SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct td_stats);
} stats SEC(".maps");

/* Scratch space for unwinds: too big for the 512-byte BPF stack. */
struct td_scratch {
	/*
	 * An unwind's frames, then TD_MAX_RULE_DEPTH zeros that nothing
	 * writes: the frames above any caller index below TD_UNWIND_FRAMES
	 * are read without a bounds test (see frames_above).
	 */
	__u64 ips[TD_UNWIND_FRAMES + TD_MAX_RULE_DEPTH];
	__s32 caller;		/* the caller's index in ips (see caller_index) */
	__s32 deep_caller;	/* its index in deep.callers (see deep_reason) */
	__u64 at;		/* a stack address, as a number (see tp_quick_frames) */
	struct td_early_key early;
	struct td_path_key path;	/* a drilled call's (drill.bpf.h) */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct td_scratch);
} scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, TD_NR_SLOTS + 1);
	__type(key, __u32);
	__type(value, struct td_budget);
} budget SEC(".maps");

/* Each reason's stack path counters (see td_rstack). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, TD_NR_SLOTS + 1);
	__type(key, __u32);
	__type(value, struct td_rstack);
} rstacks SEC(".maps");

/* The background sampler's token buckets (see td_config.bg_every_ns). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct td_buckets);
} buckets SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct td_meta);
} meta SEC(".maps");

#define TD_SAMPLES_BYTES (1 << 22)

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, TD_SAMPLES_BYTES);
} samples SEC(".maps");

/*
 * The --pid filter's list (an array map: its lookup is inlined, no helper
 * call; a short list is searched faster than a hash is).
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct td_pids);
} pids SEC(".maps");

/* The --cgroup filter: the cgroup (v2) whose tasks, descendants' included, count. */
struct {
	__uint(type, BPF_MAP_TYPE_CGROUP_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} cgroup_filter SEC(".maps");

/* A bare per-CPU counter, the cost baseline (--companion bare). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} bare SEC(".maps");

/* Keep these types (and the enums in them) in the skeleton's `types`. */
struct td_sample _td_sample = {};
struct td_counts _td_counts = {};
struct td_stats _td_stats = {};
struct td_budget _td_budget = {};
enum td_stack_stat _td_stack_stat = TD_NR_STACK_STATS;
enum td_abi _td_abi = TD_NR_SLOTS;
enum td_stat _td_stat = TD_NR_STATS;
enum td_slot_none _td_slot_none = TD_SLOT_NONE;
enum td_no_pid _td_no_pid = TD_NO_PID;
enum td_watch_byte _td_watch_byte = TD_WATCH_OWN;
enum td_syscall_filter _td_syscall_filter = TD_SYSCALL_ANY;
struct td_pids _td_pids = {};
struct td_early_key _td_early_key = {};
struct td_path_key _td_path_key = {};

/* Counts one event of topdown's own (td_stats), on this CPU. */
static __always_inline void stat_inc(enum td_stat which)
{
	struct td_stats *st = bpf_map_lookup_elem(&stats, &zero);

	if (st)
		st->n[which]++;
}

/* How count_in counted a call. */
enum td_counted {
	TD_COUNT_FULL,		/* not: the table is full */
	TD_COUNT_ADDED,
	TD_COUNT_INSERTED,	/* the key's first call on this CPU */
};

/*
 * Adds a call to `key`'s count in per-CPU hash `map` (pending, early),
 * inserting the key on its first call; *n: the count on this CPU now (0
 * where the table is full: the call is counted nowhere in it).
 */
static __always_inline enum td_counted count_in(void *map, void *key, __u64 *n)
{
	__u64 one = 1, *p;

	*n = 0;
	if ((p = bpf_map_lookup_elem(map, key))) {
		*n = ++*p;
	} else if (bpf_map_update_elem(map, key, &one, BPF_NOEXIST) == 0) {
		*n = 1;
		return TD_COUNT_INSERTED;
	} else if ((p = bpf_map_lookup_elem(map, key))) {
		*n = ++*p;	/* lost a race to insert */
	} else {
		return TD_COUNT_FULL;
	}
	return TD_COUNT_ADDED;
}

/*
 * Counts a call from a site not resolved yet in `map` (pending, upending):
 * TD_SLOT_NONE, or TD_SLOT_SITES_FULL where the table is full; *n: the
 * site's calls on this CPU counted there so far. A new site
 * sets new_sites, so user space resolves it within a tick, whatever its
 * print interval (a user site also while its process, whose maps
 * symbolize it, is likely alive).
 */
static __always_inline __u32 count_pending(void *map, void *key, __u64 *n)
{
	switch (count_in(map, key, n)) {
	case TD_COUNT_INSERTED:
		*(volatile __u32 *)&new_sites = 1;
		return TD_SLOT_NONE;
	case TD_COUNT_ADDED:
		return TD_SLOT_NONE;
	default:
		return TD_SLOT_SITES_FULL;
	}
}


/*
 * Whether return address `ret` returns into [lo, hi): ret - 1 is tested,
 * since a call can be a function's last instruction.
 */
static __always_inline bool returns_into(__u64 ret, __u64 lo, __u64 hi)
{
	return ret - 1 >= lo && ret - 1 < hi;
}

/*
 * Runs loop body `step` (a bpf_loop callback: step(i, w), 1 to stop) for i
 * from 0 while below nr and max: through bpf_loop where `loops` (5.17 and
 * later; the body is verified once), else as a bounded loop calling the
 * same body, which the verifier walks turn by turn. `loops` is a constant
 * in each caller, so a program without bpf_loop never names the callback
 * (see verify).
 */
#define td_loop(loops, nr, max, step, w)					\
	do {									\
		__u32 __nr = (nr);						\
										\
		if (loops)							\
			bpf_loop(__nr < (max) ? __nr : (max), step, w, 0);	\
		else								\
			for (__u32 __i = 0; __i < (max) && __i < __nr; __i++)	\
				if (step(__i, w))				\
					break;					\
	} while (0)

#endif
