/*
 * capbound -- run a command as root with its capabilities cut to a list, as a
 * systemd unit's CapabilityBoundingSet= does.
 *
 * Build:  cc -static -O2 -o capbound capbound.c
 * Usage:  capbound CAP[,CAP...] CMD [ARG...]     (CAP: a number, or bpf, perfmon,
 *         syslog, sys_admin, sys_resource)
 *
 * Drops every other capability from the bounding set, then execs CMD: a root
 * process's permitted and effective sets after exec are its bounding set.
 * Exits 2 on a usage error, 1 if a step fails.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

static int cap_number(const char *name)
{
	static const struct { const char *name; int cap; } names[] = {
		{ "sys_admin", 21 }, { "sys_resource", 24 }, { "syslog", 34 },
		{ "perfmon", 38 }, { "bpf", 39 },
	};
	char *end;
	long n = strtol(name, &end, 10);
	if (*name && !*end)
		return (int)n;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (!strcmp(names[i].name, name))
			return names[i].cap;
	return -1;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fputs("usage: capbound CAP[,CAP...] CMD [ARG...]\n", stderr);
		return 2;
	}
	unsigned long long keep = 0;
	char *list = strdup(argv[1]);
	for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
		int cap = cap_number(tok);
		if (cap < 0 || cap > 63) {
			fprintf(stderr, "capbound: unknown capability '%s'\n", tok);
			return 2;
		}
		keep |= 1ULL << cap;
	}
	for (int cap = 0; cap < 64; cap++) {
		if (keep & (1ULL << cap))
			continue;
		if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) && errno != EINVAL) {
			fprintf(stderr, "capbound: dropping capability %d: %s\n", cap, strerror(errno));
			return 1;
		}
	}
	execvp(argv[2], argv + 2);
	fprintf(stderr, "capbound: %s: %s\n", argv[2], strerror(errno));
	return 1;
}
