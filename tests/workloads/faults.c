/*
 * faults -- page faults of one origin each, for topdown's handle_mm_fault
 * profile.  usage: faults MODE PAGES [GOFILE] [REPEAT [PAUSE_MS]]
 *
 * Every mode maps PAGES fresh anonymous pages (never touched before), prints
 * "faults: ready" and waits until GOFILE exists (if given and not "-": so
 * that a tracer can attach after the process started), then faults each
 * page in exactly once:
 *   touch     write one byte per page: PAGES CPU faults (do_user_addr_fault)
 *   populate  madvise(MADV_POPULATE_WRITE): PAGES faults from GUP
 *   futex     FUTEX_WAKE_OP with the op's word on each page: the op faults
 *             with page faults disabled, then fault_in_user_writeable ->
 *             fixup_user_fault: PAGES faults from fixup_user_fault
 *   readv     a child maps the pages; process_vm_readv reads them all:
 *             PAGES remote faults (pin_user_pages_remote)
 *   procmem   the same through pread of /proc/CHILD/mem, one page at a time
 *             (access_remote_vm)
 *   exec      execve of itself with PAGES pages of arguments: at least PAGES
 *             faults from get_arg_page (the rest of exec faults as usual)
 * REPEAT (default 1) repeats the faulting part, after MADV_DONTNEED of the
 * pages (in the child for readv and procmem), PAUSE_MS milliseconds apart
 * (default 0).  Prints "faults: MODE pages=N
 * repeat=R" at the end.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

static long page;

static void die(const char *what)
{
	fprintf(stderr, "faults: %s: %s\n", what, strerror(errno));
	exit(1);
}

static char *map(long pages)
{
	char *p = mmap(NULL, pages * page, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		die("mmap");
	/* Small pages only: one fault per page. */
	madvise(p, pages * page, MADV_NOHUGEPAGE);
	return p;
}

static void wait_go(const char *go)
{
	struct timespec ts = { 0, 10 * 1000 * 1000 };

	if (!go)
		return;
	printf("faults: ready\n");
	fflush(stdout);
	while (access(go, F_OK) != 0)
		nanosleep(&ts, NULL);
}

int main(int argc, char **argv)
{
	const char *mode, *go;
	long pages, repeat, pause_ms, r, i;
	char *p;

	if (argc < 3) {
		fprintf(stderr, "usage: faults touch|populate|futex|readv|procmem|exec PAGES [GOFILE] [REPEAT [PAUSE_MS]]\n");
		return 2;
	}
	if (!strcmp(argv[1], "execd")) {
		printf("faults: exec pages=%s repeat=1\n", argv[2]);
		return 0;
	}
	page = sysconf(_SC_PAGESIZE);
	mode = argv[1];
	pages = atol(argv[2]);
	go = argc > 3 && strcmp(argv[3], "-") ? argv[3] : NULL;
	repeat = argc > 4 ? atol(argv[4]) : 1;
	pause_ms = argc > 5 ? atol(argv[5]) : 0;
	if (pages <= 0 || repeat <= 0) {
		fprintf(stderr, "faults: bad PAGES or REPEAT\n");
		return 2;
	}

	if (!strcmp(mode, "exec")) {
		/* Strings of 16 pages (a single one may have at most 32). */
		long chunk = 16 * page, n = (pages * page + chunk - 1) / chunk, k;
		char **args = calloc(n + 4, sizeof(*args));

		if (!args)
			die("calloc");
		args[0] = argv[0];
		args[1] = "execd";
		args[2] = argv[2];
		for (k = 0; k < n; k++) {
			long len = k < n - 1 ? chunk : pages * page - k * chunk;

			args[3 + k] = malloc(len);
			if (!args[3 + k])
				die("malloc");
			memset(args[3 + k], 'x', len - 1);
			args[3 + k][len - 1] = 0;
		}
		wait_go(go);
		execv("/proc/self/exe", args);
		die("execv");
	}
	if (!strcmp(mode, "readv") || !strcmp(mode, "procmem")) {
		int up[2], down[2];
		pid_t child;
		char c = 0;

		if (pipe(up) || pipe(down))
			die("pipe");
		child = fork();
		if (child < 0)
			die("fork");
		if (child == 0) {
			/* Owns the pages; drops them again on each byte read. */
			close(up[0]);
			close(down[1]);
			p = map(pages);
			if (write(up[1], &p, sizeof(p)) != sizeof(p))
				_exit(1);
			while (read(down[0], &c, 1) == 1) {
				madvise(p, pages * page, MADV_DONTNEED);
				if (write(up[1], &c, 1) != 1)
					_exit(1);
			}
			_exit(0);
		}
		close(up[1]);
		close(down[0]);
		if (read(up[0], &p, sizeof(p)) != sizeof(p))
			die("read child address");
		char *buf = malloc(pages * page);
		char path[64];
		int fd;

		if (!buf)
			die("malloc");
		memset(buf, 1, pages * page);	/* our own faults before go */
		snprintf(path, sizeof(path), "/proc/%d/mem", child);
		fd = open(path, O_RDONLY);
		if (fd < 0)
			die(path);
		wait_go(go);
		for (r = 0; r < repeat; r++) {
			if (r) {
				if (write(down[1], &c, 1) != 1 || read(up[0], &c, 1) != 1)
					die("child");
			}
			if (!strcmp(mode, "readv")) {
				struct iovec local = { buf, pages * page };
				struct iovec remote = { p, pages * page };

				if (process_vm_readv(child, &local, 1, &remote, 1, 0) != pages * page)
					die("process_vm_readv");
			} else {
				for (i = 0; i < pages; i++)
					if (pread(fd, buf + i * page, page, (off_t)(p + i * page)) != page)
						die("pread /proc/PID/mem");
			}
		}
		close(down[1]);
		waitpid(child, NULL, 0);
	} else {
		p = map(pages);
		wait_go(go);
		for (r = 0; r < repeat; r++) {
			if (r) {
				struct timespec ts = { pause_ms / 1000, pause_ms % 1000 * 1000000 };

				nanosleep(&ts, NULL);
				madvise(p, pages * page, MADV_DONTNEED);
			}
			if (!strcmp(mode, "touch")) {
				for (i = 0; i < pages; i++)
					p[i * page] = 1;
			} else if (!strcmp(mode, "populate")) {
				if (madvise(p, pages * page, MADV_POPULATE_WRITE))
					die("MADV_POPULATE_WRITE");
			} else if (!strcmp(mode, "futex")) {
				int word = 0;
				/* *uaddr2 = 0 (FUTEX_OP_SET), wake if it was 0. */
				int op = FUTEX_OP(FUTEX_OP_SET, 0, FUTEX_OP_CMP_EQ, 0);

				for (i = 0; i < pages; i++)
					if (syscall(SYS_futex, &word, FUTEX_WAKE_OP_PRIVATE, 0,
						    NULL, (int *)(p + i * page), op) < 0)
						die("FUTEX_WAKE_OP");
			} else {
				fprintf(stderr, "faults: unknown mode %s\n", mode);
				return 2;
			}
		}
	}
	printf("faults: %s pages=%ld repeat=%ld\n", mode, pages, repeat);
	return 0;
}
