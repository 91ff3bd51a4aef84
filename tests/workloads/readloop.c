/*
 * readloop -- read 1 byte from /dev/zero N times.
 *
 * Build:  cc -static -O2 -fno-omit-frame-pointer -o readloop readloop.c
 *
 * Each read goes through read_one(), a function of its own with a frame pointer: the
 * kernel's user-stack unwinder follows frame pointers, and libc's read() sets up no
 * frame, so the frame pointer it leaves names read_one's caller, main().
 * Usage:  readloop N [GOFILE]
 *
 * Opens /dev/zero once, then makes exactly N read(fd, buf, 1) system calls, i.e. N calls
 * of vfs_read() (ksys_read -> vfs_read), each returning 1.  Being static, the program
 * makes no other read() calls (no dynamic loader).  Then it prints
 *   readloop: reads=N
 * on stdout, the loop's wall time on stderr (for benchmarks, as ratios within one run)
 *   readloop: elapsed_ns=T ns_per_read=T/N
 * and exits 0.  Usage errors exit 2, a failed open/read exits 1.
 *
 * With GOFILE it opens /dev/zero, prints "readloop: ready" and waits until GOFILE exists
 * (stat() every 10 ms: no read() meanwhile) before its reads, so that a tracer can be
 * pointed at its pid (topdown -p) before the first one.
 */
#include <sys/stat.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

__attribute__((noinline)) static ssize_t read_one(int fd, char *c)
{
	ssize_t r = read(fd, c, 1);

	/* Keeps the call from becoming a tail call, which would drop this frame. */
	__asm__ volatile("" ::: "memory");
	return r;
}

int main(int argc, char **argv)
{
	unsigned long long n, i;
	char *end, c;
	int fd;

	if (argc < 2 || argc > 3 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
		fputs("usage: readloop N [GOFILE]\n"
		      "Reads 1 byte from /dev/zero N times (N read() calls, one vfs_read() each),\n"
		      "then prints \"readloop: reads=N\".  With GOFILE: prints \"readloop: ready\"\n"
		      "and waits for GOFILE to exist first.\n",
		      argc == 2 ? stdout : stderr);
		return argc == 2 ? 0 : 2;
	}
	errno = 0;
	n = strtoull(argv[1], &end, 10);
	if (errno || end == argv[1] || *end || argv[1][0] == '-') {
		fprintf(stderr, "readloop: bad count '%s'\n", argv[1]);
		return 2;
	}
	fd = open("/dev/zero", O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		fprintf(stderr, "readloop: open /dev/zero: %s\n", strerror(errno));
		return 1;
	}
	if (argc == 3) {
		struct timespec tick = { 0, 10 * 1000 * 1000 };
		struct stat st;

		printf("readloop: ready\n");
		fflush(stdout);
		while (stat(argv[2], &st) != 0)
			nanosleep(&tick, NULL);
	}
	struct timespec t0, t1;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (i = 0; i < n; i++) {
		ssize_t r = read_one(fd, &c);

		if (r != 1) {
			fprintf(stderr, "readloop: read %llu returned %zd: %s\n", i + 1, r,
				r < 0 ? strerror(errno) : "short read");
			return 1;
		}
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	{
		long long ns = (t1.tv_sec - t0.tv_sec) * 1000000000LL + (t1.tv_nsec - t0.tv_nsec);

		fprintf(stderr, "readloop: elapsed_ns=%lld ns_per_read=%lld\n", ns, n ? ns / (long long)n : 0);
	}
	printf("readloop: reads=%llu\n", n);
	return 0;
}
