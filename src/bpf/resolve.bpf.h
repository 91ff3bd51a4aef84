/* SPDX-License-Identifier: GPL-2.0 */
/*
 * New call sites named in the kernel, at their first call: a pinned
 * instance counts every call under its final reason with no topdown
 * process running, and a reader finds the reasons already there.
 *
 * The rules are user space's (reasons/mod.rs, tailcall.rs), applied to
 * what the kernel prints of an address (bpf_snprintf's %pS, from 5.13;
 * the parsing takes bpf_loop, 5.17): the caller is the function the
 * return address lies in, clone suffixes folded; the call instruction
 * before it tells a tail call (a direct call to another function than
 * FUNC) and an indirect one apart. A profile's routes (caller name ->
 * slot) come from user space in `routes`; a new reason takes the next free
 * slot, claimed in `names` (as a reader claims one) and indexed by name in
 * `by_name`, which user space's claims fill too, so that both agree on a
 * name's slot. What cannot be named here (a name that cannot be printed or
 * stored) is left to the pending path, counted by address as before.
 *
 * Needs common.bpf.h and caller.bpf.h.
 */
#ifndef TOPDOWN_RESOLVE_H
#define TOPDOWN_RESOLVE_H

/* See td_kres. */
struct td_kres kres;

/*
 * A reason's name -> its slot: every name in `names`, by name; and the
 * callers merged into OTHER (the reasons used up), under OTHER's slot.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, TD_BY_NAME);
	__type(key, struct td_name);
	__type(value, __u32);
} by_name SEC(".maps");

/* A profile's caller function -> its reason's slot (read only here). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, TD_MAX_ROUTES);
	__type(key, struct td_name);
	__type(value, __u32);
} routes SEC(".maps");

/* The parse of "name+0xOFF/0xSIZE [module]" (%pS) under way. */
struct td_parse {
	__u32 phase;		/* 0: the name, 1: the offset, 2: the size */
	__u32 j;		/* bytes of the name copied into g */
	__u32 cut;		/* a clone suffix began: no more copied */
	__u32 pad;
	__u64 v[2];		/* the offset, the size */
};

/* The decoding of `call *r/m` forms under way (tailcall.rs's decode_x86). */
struct td_decode {
	__u8 c[8];
	__u64 ret;
	__u64 at;		/* a fixed pointer's address (`call *disp32(%rip)`) */
	__u32 indirect;
	__u32 pad;
};

/*
 * Where the names are printed and parsed: too large for the stack. The
 * loops' state lives here too, not on the stack: a verifier before 6.7
 * walks a bpf_loop callback once, and would take the caller's stack after
 * the loop for what one pass leaves there (and drop the code that reads
 * what later passes set).
 */
struct td_names {
	char sym[TD_NAME_LEN];	/* %pS of a call's target */
	struct td_name caller;	/* the caller function, folded */
	struct td_name g;	/* the function a call entered, folded */
	struct td_name key;	/* a reason's name */
	struct td_name other;	/* "OTHER" */
	struct td_parse p;
	struct td_decode d;
	__u32 cut;		/* fold_step's */
};

/* What a loop's callback is given: the buffers, through a pointer. */
struct td_cb {
	struct td_names *b;
	struct td_name *n;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct td_names);
} resolve_buf SEC(".maps");

/* What the instruction before a return address says (tailcall.rs's Caller). */
enum td_judged {
	TD_PLAIN,
	TD_TAIL,		/* a direct call to g, which jumped to FUNC */
	TD_INDIRECT_TAIL,	/* through a pointer that was not FUNC */
	TD_INDIRECT,		/* through a pointer or a thunk: FUNC, or a jump to it */
};

/* How far before a function a call may land and still be that function's. */
#if defined(__TARGET_ARCH_arm64)
#define TD_PADDING 0
#else
#define TD_PADDING 32
#endif

static long parse_step(__u32 i, struct td_cb *cb)
{
	struct td_names *b = cb->b;
	struct td_parse *p = &b->p;
	char c = b->sym[i & (TD_NAME_LEN - 1)];
	__u32 k = (p->phase - 1) & 1;
	__u64 d;

	if (!c)
		return 1;
	if (p->phase == 0) {
		if (c == '+') {
			p->phase = 1;
			return 0;
		}
		if (c == '.' && p->j)
			p->cut = 1;
		if (!p->cut && p->j < TD_NAME_LEN - 1) {
			b->g.s[p->j & (TD_NAME_LEN - 1)] = c;
			p->j++;
		}
		return 0;
	}
	if (c == 'x')
		return 0;
	if (c == '/') {
		p->phase = 2;
		return 0;
	}
	if (c >= '0' && c <= '9')
		d = c - '0';
	else if (c >= 'a' && c <= 'f')
		d = c - 'a' + 10;
	else
		return 1;
	p->v[k] = p->v[k] * 16 + d;
	return 0;
}

/* Shifts b->g left by 6 bytes: "__pfx_G" or "__cfi_G" becomes "G". */
static long unprefix_step(__u32 i, struct td_cb *cb)
{
	struct td_names *b = cb->b;
	__u32 from = i + 6;

	b->g.s[i & (TD_NAME_LEN - 1)] = from < TD_NAME_LEN ? b->g.s[from & (TD_NAME_LEN - 1)] : 0;
	return 0;
}

static const char fmt_sym[] = "%pS";
static const char fmt_fn[] = "%ps";
static const char pfx[] = "__pfx_";
static const char cfi[] = "__cfi_";

/*
 * The function a call to `t` enters (tailcall.rs's `entered`): the symbol
 * starting at t, or the one whose padding (__pfx_, __cfi_) t is in. Its
 * folded name goes to b->g, its entry to *start.
 */
static __always_inline bool entered(struct td_names *b, __u64 t, __u64 *start)
{
	__u64 args[1] = { t };
	struct td_cb cb = { .b = b };
	struct td_parse *p = &b->p;

	__builtin_memset(&b->g, 0, sizeof(b->g));
	__builtin_memset(p, 0, sizeof(*p));
	if (bpf_snprintf(b->sym, sizeof(b->sym), fmt_sym, args, sizeof(args)) <= 0)
		return false;
	bpf_loop(TD_NAME_LEN, parse_step, &cb, 0);
	if (*(volatile __u32 *)&p->phase != 2)
		return false;
	if (!bpf_strncmp(b->g.s, 6, pfx) || !bpf_strncmp(b->g.s, 6, cfi)) {
		bpf_loop(TD_NAME_LEN, unprefix_step, &cb, 0);
		*start = t - p->v[0] + p->v[1];
		return *start - t <= TD_PADDING;
	}
	*start = t;
	return p->v[0] == 0;
}

static const char pi[] = "__pi_";
static const char thunk[] = "__x86_indirect_thunk_";
static const char call_thunk[] = "__x86_indirect_call_thunk_";
static const char its_thunk[] = "__x86_indirect_its_thunk_";

/* Retpoline and related thunks (with or without their __pi_ alias). */
static __always_inline bool is_thunk(struct td_names *b)
{
	const char *s = b->g.s;

	if (!bpf_strncmp(s, 5, pi))
		s += 5;
	return !bpf_strncmp(s, sizeof(thunk) - 1, thunk) ||
	       !bpf_strncmp(s, sizeof(call_thunk) - 1, call_thunk) ||
	       !bpf_strncmp(s, sizeof(its_thunk) - 1, its_thunk);
}

/* A direct call's verdict: FUNC's (or its padding's), a thunk's, or g's. */
static __always_inline int judge_direct(struct td_names *b, __u64 t, __u64 func, int *judged)
{
	__u64 start;

	if (t <= func && func - t <= TD_PADDING) {
		*judged = TD_PLAIN;
		return 1;
	}
	if (!entered(b, t, &start))
		return 0;
	if (start == func)
		*judged = TD_PLAIN;
	else if (is_thunk(b))
		*judged = TD_INDIRECT;
	else
		*judged = TD_TAIL;
	return 1;
}

#if defined(__TARGET_ARCH_arm64)
/* `bl imm26`, or `blr` and its pointer-authenticating forms. */
static __always_inline int judge_call(struct td_names *b, __u64 ret, __u64 func)
{
	__u32 insn = 0;
	__s64 imm;
	int judged = TD_PLAIN;

	if (bpf_probe_read_kernel(&insn, sizeof(insn), (void *)(ret - 4)))
		return TD_PLAIN;
	if ((insn & 0xfc000000) == 0x94000000) {
		imm = (__s64)((__s32)(insn << 6) >> 6) * 4;
		judge_direct(b, ret - 4 + imm, func, &judged);
		return judged;
	}
	if ((insn & 0xfffffc1f) == 0xd63f0000 || (insn & 0xfffffc1f) == 0xd63f081f ||
	    (insn & 0xfffffc1f) == 0xd63f0c1f || (insn & 0xfffff800) == 0xd73f0800)
		return TD_INDIRECT;
	return TD_PLAIN;
}
#else
/* The form `len0 + 2` bytes long, with or without a REX prefix. */
static long decode_step(__u32 len0, struct td_cb *cb)
{
	struct td_decode *d = &cb->b->d;
	__u32 i = (6 - len0) & 7, r = i;
	__u8 op, modrm, md, rm;
	__u32 sib, disp;

	if (d->c[i] >= 0x40 && d->c[i] <= 0x4f)
		r = i + 1;
	if (r > 6)
		return 0;
	op = d->c[r & 7];
	modrm = d->c[(r + 1) & 7];
	if (op != 0xff || ((modrm >> 3) & 7) != 2)
		return 0;
	md = modrm >> 6;
	rm = modrm & 7;
	sib = md != 3 && rm == 4;
	disp = md == 1 ? 1 : md == 2 ? 4 : 0;
	if (md == 0 && (rm == 5 || (sib && r < 6 && (d->c[(r + 2) & 7] & 7) == 5)))
		disp = 4;
	if (8 - r != 2 + sib + disp)
		return 0;
	d->indirect = 1;
	if (md == 0 && rm == 5)
		d->at = d->ret + *(__s32 *)&d->c[4];
	return 0;
}

/*
 * `call rel32`, else `call *r/m` (FF /2) of every length from 2 to 8,
 * keeping a fixed pointer over a register form.
 */
static __always_inline int judge_call(struct td_names *b, __u64 ret, __u64 func)
{
	struct td_decode *d = &b->d;
	struct td_cb cb = { .b = b };
	__u64 ptr = 0, start;
	int judged = TD_PLAIN;

	__builtin_memset(d, 0, sizeof(*d));
	d->ret = ret;
	if (bpf_probe_read_kernel(d->c, sizeof(d->c), (void *)(ret - 8)))
		return TD_PLAIN;
	if (d->c[3] == 0xe8 && judge_direct(b, ret + *(__s32 *)&d->c[4], func, &judged))
		return judged;
	bpf_loop(7, decode_step, &cb, 0);
	if (!*(volatile __u32 *)&d->indirect)
		return TD_PLAIN;
	if (!d->at || bpf_probe_read_kernel(&ptr, sizeof(ptr), (void *)d->at))
		return TD_INDIRECT;
	if (!entered(b, ptr, &start))
		return TD_INDIRECT;
	return start == func ? TD_PLAIN : TD_INDIRECT_TAIL;
}
#endif

/* Cuts a name at its clone suffix or module (" [mod]"): from the cut on, the bytes are zeroed (the name is a hash key). */
static long fold_step(__u32 i, struct td_cb *cb)
{
	char *c = &cb->n->s[i & (TD_NAME_LEN - 1)];

	if (!*c)
		return 1;
	if ((*c == '.' && i) || *c == ' ')
		cb->b->cut = 1;
	if (cb->b->cut)
		*c = 0;
	return 0;
}

/* The caller function's folded name, from the return address. */
static __always_inline bool caller_name(struct td_names *b, __u64 ret)
{
	__u64 args[1] = { ret - 1 };
	struct td_name *n = &b->caller;
	struct td_cb cb = { .b = b, .n = n };

	__builtin_memset(n, 0, sizeof(*n));
	if (bpf_snprintf(n->s, sizeof(n->s), fmt_fn, args, sizeof(args)) <= 0)
		return false;
	/* No symbol: %ps prints the address. */
	if (n->s[0] == '0' && n->s[1] == 'x') {
		__builtin_memset(n, 0, sizeof(*n));
		__builtin_memcpy(n->s, "[unknown]", sizeof("[unknown]"));
		return true;
	}
	b->cut = 0;
	bpf_loop(TD_NAME_LEN, fold_step, &cb, 0);
	return true;
}

static __always_inline __u32 route_of(struct td_name *n)
{
	__u32 *s = bpf_map_lookup_elem(&routes, n);

	return s ? *s : TD_SLOT_NONE;
}

/* Names slot k `name`, in `names` then `by_name`; false if k is taken. */
static __always_inline int claim(struct td_name *name, __u32 k, __u32 *slot)
{
	__u32 *s;

	if (bpf_map_update_elem(&names, &k, name, BPF_NOEXIST))
		return 0;
	if (!bpf_map_update_elem(&by_name, name, &k, BPF_NOEXIST)) {
		*slot = k;
		return 1;
	}
	/* Named meanwhile, elsewhere: that slot, and k given back. */
	bpf_map_delete_elem(&names, &k);
	s = bpf_map_lookup_elem(&by_name, name);
	*slot = s ? *s : TD_SLOT_NONE;
	return 1;
}

/* The slot of reason `name`: its own, or a new one (OTHER once they are used up). */
static __always_inline __u32 reason_slot(struct td_names *b, struct td_name *name)
{
	__u32 *s = bpf_map_lookup_elem(&by_name, name);
	__u32 slot = TD_SLOT_NONE, k;

	if (s)
		return *s;
	for (int i = 0; i < 4; i++) {
		k = __sync_fetch_and_add(&kres.next, 1);
		if (k >= cfg.max_slot)
			break;
		if (claim(name, k, &slot))
			return slot;
	}
	__builtin_memset(&b->other, 0, sizeof(b->other));
	__builtin_memcpy(b->other.s, "OTHER", sizeof("OTHER"));
	s = bpf_map_lookup_elem(&by_name, &b->other);
	if (s)
		slot = *s;
	else if (cfg.max_slot >= TD_NR_SLOTS || !claim(&b->other, cfg.max_slot, &slot))
		return TD_SLOT_NONE;
	/* Which callers OTHER holds, for readers to list; found here next time. */
	if (slot < TD_NR_SLOTS)
		bpf_map_update_elem(&by_name, name, &slot, BPF_NOEXIST);
	return slot;
}

static const char fmt_tail[] = "%s (tail call)";
static const char fmt_indirect[] = "%s \xe2\x86\x92 indirect";
static const char fmt_indirect_tail[] = "%s \xe2\x86\x92 indirect (tail call)";

/* b->key: `fmt` with the name at `s`, zero-padded as a hash key. */
static __always_inline bool key_of(struct td_names *b, const char *fmt, char *s)
{
	__u64 args[1] = { (__u64)s };

	__builtin_memset(&b->key, 0, sizeof(b->key));
	return bpf_snprintf(b->key.s, sizeof(b->key.s), fmt, args, sizeof(args)) > 0;
}

/*
 * The reason of a new site (reasons/mod.rs's Mapper::classify), or
 * TD_SLOT_NONE where it cannot be named here. `tail`: tail calls are told
 * apart (not at a tracepoint, whose sites call its static call). Global:
 * the verifier checks it once, on its own, not on every path to it.
 */
__noinline __u32 td_resolve_reason(__u64 ret, __u32 tail)
{
	struct td_names *b = bpf_map_lookup_elem(&resolve_buf, &zero);
	int judged = TD_PLAIN;
	__u32 r;

	if (!b || !caller_name(b, ret))
		return TD_SLOT_NONE;
	if (tail)
		judged = judge_call(b, ret, kres.func);
	switch (judged) {
	case TD_TAIL:
		r = route_of(&b->g);
		if (r == TD_SLOT_NONE)
			r = route_of(&b->caller);
		if (r != TD_SLOT_NONE)
			return r;
		if (!key_of(b, fmt_tail, b->g.s))
			return TD_SLOT_NONE;
		return reason_slot(b, &b->key);
	case TD_INDIRECT_TAIL:
		if (!key_of(b, fmt_indirect_tail, b->caller.s))
			return TD_SLOT_NONE;
		return reason_slot(b, &b->key);
	case TD_INDIRECT:
		r = route_of(&b->caller);
		if (r != TD_SLOT_NONE)
			return r;
		if (!key_of(b, fmt_indirect, b->caller.s))
			return TD_SLOT_NONE;
		return reason_slot(b, &b->key);
	default:
		r = route_of(&b->caller);
		return r != TD_SLOT_NONE ? r : reason_slot(b, &b->caller);
	}
}

/*
 * Names a new site and keeps it (in `sites`, and its empty cache entry,
 * flagged where stacks may be taken, as a pooled site's): its next calls
 * take the common path. Its slot, or TD_SLOT_NONE.
 */
static __always_inline __u32 resolve_site(__u64 ret, enum td_kind kind)
{
	__u64 *cell = &site_cache[site_index(ret)];
	__u32 r;

	if (!*(volatile __u32 *)&kres.ready)
		return TD_SLOT_NONE;
	r = td_resolve_reason(ret, kind != TD_TP && *(volatile __u32 *)&kres.tail);
	if (r >= TD_NR_SLOTS) {
		stat_inc(TD_STAT_RESOLVE_DECLINED);
		return TD_SLOT_NONE;
	}
	stat_inc(TD_STAT_RESOLVED);
	bpf_map_update_elem(&sites, &ret, &r, BPF_NOEXIST);
	if (cacheable(ret))
		__sync_val_compare_and_swap(cell, 0, cache_entry(ret, r) ^ !!cfg.stacks);
	return r;
}

#endif
