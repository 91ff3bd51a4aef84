/*
 * pidloop -- make N getpid() system calls.
 *
 * Build:  cc -static -O2 -o pidloop pidloop.c
 * Usage:  pidloop N [GOFILE]
 *
 * Calls syscall(SYS_getpid) exactly N times (libc does not cache it that way), i.e. N
 * calls of the kernel's __x64_sys_getpid(), then prints "pidloop: calls=N".
 * With GOFILE it prints "pidloop: ready" and waits until GOFILE exists (stat() every
 * 10 ms) before its calls, so that a tracer can be started on its pid first.
 * Usage errors exit 2.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	unsigned long long n, i;
	struct stat st;
	char *end;

	if ((argc != 2 && argc != 3) || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
		fputs("usage: pidloop N [GOFILE]\nMakes N getpid() system calls, then prints \"pidloop: calls=N\".\n"
		      "With GOFILE: prints \"pidloop: ready\" and waits for GOFILE to exist first.\n",
		      argc == 2 ? stdout : stderr);
		return argc == 2 ? 0 : 2;
	}
	errno = 0;
	n = strtoull(argv[1], &end, 10);
	if (errno || end == argv[1] || *end || argv[1][0] == '-') {
		fprintf(stderr, "pidloop: bad count '%s'\n", argv[1]);
		return 2;
	}
	if (argc == 3) {
		printf("pidloop: ready\n");
		fflush(stdout);
		while (stat(argv[2], &st) != 0)
			usleep(10000);
	}
	for (i = 0; i < n; i++)
		syscall(SYS_getpid);
	printf("pidloop: calls=%llu\n", n);
	return 0;
}
