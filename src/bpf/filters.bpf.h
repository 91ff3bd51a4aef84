/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Which calls count: the --cpu, --pid and --cgroup filters (compiled in
 * only where asked for), and topdown's own calls, left out while it is
 * awake. Included by topdown.bpf.c.
 */
#ifndef TOPDOWN_FILTERS_H
#define TOPDOWN_FILTERS_H

/* Whether thread group `tgid` is in the --pid filter's list. */
static __always_inline bool pid_listed(__u32 tgid)
{
	struct td_pids *p = bpf_map_lookup_elem(&pids, &zero);
	__u32 n;

	if (!p)
		return false;
	n = p->n;
	for (__u32 i = 0; i < TD_MAX_PIDS; i++) {
		if (i >= n)
			break;
		if (p->tgid[i] == tgid)
			return true;
	}
	return false;
}

/*
 * Whether a call of raw_syscalls's sys_enter or sys_exit (`ctx`: its
 * arguments, tp_btf's or raw_tp's) is of system call cfg.syscall_nr: the
 * number is sys_enter's second argument; sys_exit has the registers, where
 * the entry left it (the kernel's syscall_get_nr). As the syscalls perf
 * events do, but for 32-bit (compat) tasks: their numbers are another
 * table's, which these events leave out and this does not.
 */
static __always_inline bool syscall_wanted(void *ctx)
{
	__u64 *args = ctx;
	struct pt_regs *regs;
	long nr;

	if (cfg.filter_syscall == TD_SYSCALL_ENTER) {
		nr = args[1];
	} else {
		regs = (struct pt_regs *)args[0];
#if defined(__TARGET_ARCH_x86)
		nr = BPF_CORE_READ(regs, orig_ax);
#elif defined(__TARGET_ARCH_arm64)
		nr = BPF_CORE_READ(regs, syscallno);
#else
		return false;
#endif
	}
	return nr == cfg.syscall_nr;
}

/*
 * Whether this call passes the filters: the cheapest test first. A filter
 * that is off is a constant false in .rodata, so the verifier drops its
 * code: with no filter the counting path is as it was.
 */
static __always_inline bool wanted(void *ctx, enum td_path path)
{
	if (path != TD_PATH_ANY || !cfg.filtered)
		return true;
	if (cfg.filter_syscall && !syscall_wanted(ctx))
		return false;
	if (cfg.filter_cpus) {
		/* inlined on x86 and arm64: a per-CPU load */
		__u32 cpu = bpf_get_smp_processor_id();

		if (cpu >= TD_MAX_CPUS || !((cfg.cpus[cpu / 64] >> (cpu % 64)) & 1))
			return false;
	}
	if (cfg.filter_pids && !pid_listed(bpf_get_current_pid_tgid() >> 32))
		return false;
	/* 1: current is in the cgroup or below it */
	if (cfg.filter_cgroup && bpf_current_task_under_cgroup(&cgroup_filter, 0) != 1)
		return false;
	return true;
}
static __always_inline bool is_own_call(void)
{
	__u32 own = *(volatile __u32 *)&ctl.own_tgid;

	return own && bpf_get_current_pid_tgid() >> 32 == own;
}

#endif
