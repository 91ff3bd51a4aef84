/*
 * directread -- read a block device N times, 4 KiB each, with O_DIRECT.
 *
 * Build:  cc -static -O2 -fno-omit-frame-pointer -o directread directread.c
 *
 * Usage:  directread DEVICE N [GOFILE]
 *
 * Opens DEVICE with O_DIRECT once, then makes exactly N pread(fd, buf, 4096, off)
 * calls over the device's first 1 MiB, each returning 4096. O_DIRECT bypasses the page
 * cache: every read is one bio of one 4 KiB segment, submitted and (on a RAM disk,
 * brd) completed in this process, so it is exactly one bio_endio() call of its own.
 * Then it prints "directread: reads=N" and exits 0. Usage errors exit 2, a failed open
 * or read exits 1.
 *
 * With GOFILE it opens DEVICE, prints "directread: ready" and waits until GOFILE exists
 * (stat() every 10 ms) before its reads, so that a tracer can be pointed at its pid
 * (topdown -p) before the first one.
 */
#define _GNU_SOURCE
#include <sys/stat.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BLOCK 4096
#define SPAN (1 << 20)

int main(int argc, char **argv)
{
	static char buf[BLOCK] __attribute__((aligned(BLOCK)));
	unsigned long long n, i;
	struct stat st;
	char *end;
	int fd;

	if (argc < 3 || argc > 4) {
		fputs("usage: directread DEVICE N [GOFILE]\n"
		      "Reads DEVICE N times, 4 KiB a read with O_DIRECT (one bio each), then\n"
		      "prints \"directread: reads=N\".  With GOFILE: prints \"directread: ready\"\n"
		      "and waits for GOFILE to exist before the first read.\n",
		      stderr);
		return 2;
	}
	errno = 0;
	n = strtoull(argv[2], &end, 10);
	if (errno || *end || end == argv[2]) {
		fprintf(stderr, "directread: N must be a whole number, not '%s'\n", argv[2]);
		return 2;
	}
	fd = open(argv[1], O_RDONLY | O_DIRECT);
	if (fd < 0) {
		fprintf(stderr, "directread: cannot open %s with O_DIRECT: %s\n", argv[1],
			strerror(errno));
		return 1;
	}
	if (argc == 4) {
		const struct timespec tick = { 0, 10 * 1000 * 1000 };

		puts("directread: ready");
		fflush(stdout);
		while (stat(argv[3], &st) != 0)
			nanosleep(&tick, NULL);
	}
	for (i = 0; i < n; i++) {
		ssize_t r = pread(fd, buf, BLOCK, (off_t)((i * BLOCK) % SPAN));

		if (r != BLOCK) {
			fprintf(stderr, "directread: read %llu of %s: %s\n", i, argv[1],
				r < 0 ? strerror(errno) : "short read");
			return 1;
		}
	}
	printf("directread: reads=%llu\n", n);
	return 0;
}
