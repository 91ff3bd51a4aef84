/* SPDX-License-Identifier: GPL-2.0 */
/* Layout shared by the BPF programs and (through the skeleton) user space. */
#ifndef TOPDOWN_H
#define TOPDOWN_H

#define TD_NR_SLOTS 256		/* reason slots; a power of two */
#define TD_SLOT_NOT_FOUND 0	/* caller's return address not found */
#define TD_SLOT_SITES_FULL 1	/* site tables full: caller unknown */
#define TD_FIRST_REASON 2
#define TD_SLOT_NONE 0xffffffff	/* site not resolved yet */

#define TD_MAX_SITES 16384
#define TD_MAX_CALLERS 16
#define TD_MAX_RULES 32
#define TD_MAX_RULE_DEPTH 16
/* fentry takes at most 12 arguments; FUNC+5 lies a few slots above them. */
#define TD_SCAN_SLOTS 16
#define TD_UNWIND_FRAMES 32	/* a power of two */
#define TD_MAX_FRAMES 127
#define TD_MAX_STACK_RANGES 32
#define TD_SELFTEST_ARGS 12	/* raw_tp test runs take at most 12 arguments */

struct td_range {
	__u64 lo;
	__u64 hi;
};

struct td_counts {
	__u64 n[TD_NR_SLOTS];
};

/* A caller function (one address range) whose reason needs deeper frames. */
struct td_caller {
	__u64 lo;
	__u64 hi;
	__u32 rule_first;	/* rules[rule_first .. +rule_count] decide */
	__u32 rule_count;
	__u32 reason;		/* slot when no rule matches */
	__u32 pad;
};

/* A deeper-frame rule: a frame within `depth` frames above the caller. */
struct td_rule {
	__u64 lo;
	__u64 hi;
	__u32 reason;
	__u32 depth;
};

struct td_stats {
	__u64 verify_checked;
	__u64 verify_mismatch;
	__u64 verify_unwind_failed;
	__u64 deep_unwind_failed;
	__u64 stack_matched;
	__u64 stack_sampled_out;
	__u64 stack_rate_capped;
	__u64 stack_ringbuf_full;
	__u64 stack_emitted;
	__u64 own_calls;
};

struct td_sample {
	__u64 ts;
	__u32 pid;
	__u32 tid;
	__u32 cpu;
	__u32 reason;
	__s32 kstack_bytes;
	__s32 ustack_bytes;
	char comm[16];
	__u64 kstack[TD_MAX_FRAMES];
	__u64 ustack[TD_MAX_FRAMES];
};

#endif
