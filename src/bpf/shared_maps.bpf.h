/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The maps a pinned instance's file iterators (iter.bpf.c) reuse from the
 * counting programs: one definition for both objects, so that the reused
 * maps' types and sizes cannot drift apart. Needs topdown.h.
 */
#ifndef TOPDOWN_SHARED_MAPS_H
#define TOPDOWN_SHARED_MAPS_H

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
	__type(value, struct td_fresh);
} fresh SEC(".maps");

/* New sites' pool slots (see td_pool). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct td_pool);
} pool SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, TD_NR_SLOTS);
	__type(key, __u32);
	__type(value, struct td_name);
} names SEC(".maps");

#endif
