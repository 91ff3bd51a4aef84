/*
 * asnobody -- run a command as uid/gid 65534 (nobody) with no capabilities.
 *
 * Build:  cc -static -O2 -o asnobody asnobody.c
 * Usage:  asnobody CMD [ARG...]
 *
 * Drops supplementary groups, then sets gid and uid to 65534 (which clears the
 * effective, permitted and ambient capability sets of a root process), and execs CMD.
 * Exits 2 on a usage error, 1 if a step fails.
 */
#define _GNU_SOURCE
#include <grp.h>
#include <stdio.h>
#include <string.h>
#include <errno.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc < 2) {
		fputs("usage: asnobody CMD [ARG...]\n", stderr);
		return 2;
	}
	if (setgroups(0, NULL) || setgid(65534) || setuid(65534)) {
		fprintf(stderr, "asnobody: dropping privileges: %s\n", strerror(errno));
		return 1;
	}
	execvp(argv[1], argv + 1);
	fprintf(stderr, "asnobody: %s: %s\n", argv[1], strerror(errno));
	return 1;
}
