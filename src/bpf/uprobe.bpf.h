/* SPDX-License-Identifier: GPL-2.0 */
/*
 * User-space functions (topdown -x PATH FUNC): a uprobe at FUNC's entry.
 * Included at the end of topdown.bpf.c; it shares the counters, filters,
 * stack gate and ring buffer with the kernel-function programs.
 *
 * A user return address means something only in its process (ASLR, PIE,
 * shared libraries), so sites are keyed by (tgid, return address): user
 * space symbolizes each new one in its process and puts its slot in
 * usites; until then its calls are counted per key in upending (and added
 * under the slot by user space), so no call is lost or misfiled.
 */
#ifndef TOPDOWN_UPROBE_H
#define TOPDOWN_UPROBE_H

struct td_ukey {
	__u32 tgid;
	__u32 pad;
	__u64 ret;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, TD_MAX_SITES);
	__type(key, struct td_ukey);
	__type(value, __u32);	/* reason slot */
} usites SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, TD_MAX_SITES);
	__type(key, struct td_ukey);
	__type(value, __u64);
} upending SEC(".maps");

/*
 * Where a process that called FUNC from a site not resolved yet had its
 * code, for naming the site after the process has gone (its maps with
 * it): a caller in FUNC's file is at return address - func_ip + FUNC's
 * address in the file; one in the program's own text (start_code to
 * end_code: the lowest executable segment's address in the file, moved
 * by the load bias) is found by the program's file, known by its device,
 * inode and name. Least recently used out: a fork storm forgets the
 * oldest.
 */
struct td_uproc {
	__u64 func_ip;
	__u64 start_code;
	__u64 end_code;
	__u64 exe_ino;
	__u32 exe_dev;		/* the kernel's dev_t: major << 20 | minor */
	__u32 pad;
	char exe_name[TD_EXE_NAME];
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, TD_MAX_SITES);
	__type(key, __u32);	/* tgid */
	__type(value, struct td_uproc);
} ufuncs SEC(".maps");

struct td_ukey _td_ukey = {};
struct td_uproc _td_uproc = {};

/* The calling process's code, as td_uproc has it, and FUNC at `ip`. */
static __always_inline void note_process(__u32 tgid, __u64 ip)
{
	struct task_struct *t = (struct task_struct *)bpf_get_current_task();
	struct td_uproc p = { .func_ip = ip };
	struct file *exe = BPF_CORE_READ(t, mm, exe_file);
	const unsigned char *name;

	p.start_code = BPF_CORE_READ(t, mm, start_code);
	p.end_code = BPF_CORE_READ(t, mm, end_code);
	if (exe) {
		p.exe_ino = BPF_CORE_READ(exe, f_inode, i_ino);
		p.exe_dev = BPF_CORE_READ(exe, f_inode, i_sb, s_dev);
		name = BPF_CORE_READ(exe, f_path.dentry, d_name.name);
		bpf_probe_read_kernel_str(p.exe_name, sizeof(p.exe_name), name);
	}
	bpf_map_update_elem(&ufuncs, &tgid, &p, BPF_ANY);
}

/*
 * At FUNC's first instruction the caller's return address is the word at
 * the user stack pointer (x86: pushed by the call), or in LR (arm64: set
 * by bl); 0 if unreadable.
 */
static __always_inline __u64 uprobe_caller(struct pt_regs *ctx)
{
#if defined(__TARGET_ARCH_x86)
	__u64 ret = 0;

	if (bpf_probe_read_user(&ret, sizeof(ret), (void *)PT_REGS_SP(ctx)))
		return 0;
	return ret;
#else
	return PT_REGS_RET(ctx);
#endif
}

/*
 * Wakes topdown's ring-buffer reader now, not at its next tick: a site's
 * first call on a CPU. A short-lived process can exit within a tick, and
 * its return addresses are named through its memory maps, so topdown
 * reads them while it lives (and names its sites, whose later calls are
 * then tagged). An empty record, discarded: nothing to read. The trap
 * costs microseconds; the kernel programs do not do this (a wake-up on the
 * workload's CPU costs it more there than the pending calls it saves).
 */
static __always_inline void wake_reader(void)
{
	void *e = bpf_ringbuf_reserve(&samples, 8, 0);

	if (e)
		bpf_ringbuf_discard(e, BPF_RB_FORCE_WAKEUP);
}

/*
 * One program for every setting: the trap costs microseconds, so the
 * filters' and the switches' loads are not worth a program each.
 */
SEC("uprobe")
int BPF_KPROBE(td_uprobe)
{
	struct td_ukey k = {};
	struct td_counts *c;
	__u32 *slot, r, on;
	__u64 n = 0;

	if (!wanted(ctx, TD_PATH_ANY))
		return 0;
	if (is_own_call()) {
		/* Symbolizing calls FUNC too where it is, say, malloc. */
		stat_inc(TD_STAT_OWN_CALLS);
		return 0;
	}
	c = bpf_map_lookup_elem(&counts, &zero);
	if (!c)
		return 0;
	k.tgid = bpf_get_current_pid_tgid() >> 32;
	k.ret = uprobe_caller(ctx);
	if (!k.ret)
		r = TD_SLOT_NOT_FOUND;
	else if ((slot = bpf_map_lookup_elem(&usites, &k)))
		r = *slot & (TD_NR_SLOTS - 1);
	else
		r = count_pending(&upending, &k, &n);
	if (r != TD_SLOT_NONE)
		c->n[r & (TD_NR_SLOTS - 1)]++;
	if (n == 1)
		/* A new site's first call on this CPU: where the code is. */
		note_process(k.tgid, PT_REGS_IP(ctx));
	if (!cfg.stacks)
		return 0;
	if (n == 1)
		wake_reader();
	on = *(volatile __u32 *)&ctl.nr_captured;
	if (on && captured(r))
		sample(ctx, c, k.ret, r, false);
	else if (on && r == TD_SLOT_NONE)
		/*
		 * A site not resolved yet (a burst of calls can be over before
		 * user space sees it): sent untagged, from an allowance apart
		 * from the reasons' budgets, and kept by user space if the
		 * caller it symbolizes is a captured reason's. A site's calls
		 * past its first on this CPU leave part of the allowance to
		 * the other sites' first calls.
		 */
		sample(ctx, c, k.ret, TD_SLOT_NONE, n > TD_UNTAGGED_PER_SITE);
	else if (cfg.bg_every_ns && (r != TD_SLOT_NONE || n <= TD_BG_UNTAGGED_PER_SITE))
		/*
		 * The trap costs microseconds: every call may take a token;
		 * an unresolved site's first calls only, so that one busy
		 * site does not empty the bucket they share.
		 */
		background(ctx, c, k.ret, r, 0);
	return 0;
}

/* The cost baseline: a bare per-CPU counter on the same uprobe. */
TD_BARE("uprobe", td_bare_uprobe)

#endif
