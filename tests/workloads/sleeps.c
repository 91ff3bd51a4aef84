/*
 * sleeps -- a process that blocks in nanosleep a known number of times, for
 * topdown's sched_switch checks.  usage: sleeps N MS [GOFILE]
 *
 * Prints "sleeps: ready" and, if GOFILE is given, waits for it (so that a
 * tracer can attach after the process started): a FIFO is opened, which
 * blocks once until a writer opens it (one switch, whatever the host's
 * load); another path is polled for without sleeping. Then it
 * calls nanosleep N times for MS milliseconds each and prints
 * "sleeps: n=N voluntary=V involuntary=I": the task's context switches
 * during those calls (getrusage), each one sched_switch.  A call that blocks
 * leaves the CPU in do_nanosleep, a voluntary switch (again after a spurious
 * wake-up, which the kernel allows). A preemption is involuntary, in
 * do_nanosleep or not: 6.12 on arm64 left do_nanosleep's schedule() 41
 * times for 40 calls, once involuntarily, in about one run in 20.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	long n, ms, i;
	struct timespec ts;
	struct rusage r0, r1;

	if (argc < 3 || (n = atol(argv[1])) <= 0 || (ms = atol(argv[2])) <= 0) {
		fprintf(stderr, "usage: sleeps N MS [GOFILE]\n");
		return 2;
	}
	ts.tv_sec = ms / 1000;
	ts.tv_nsec = ms % 1000 * 1000000;
	printf("sleeps: ready\n");
	fflush(stdout);
	if (argc > 3) {
		int fd = open(argv[3], O_RDONLY);

		if (fd >= 0)
			close(fd);
		else
			while (access(argv[3], F_OK) != 0)
				;
	}
	getrusage(RUSAGE_SELF, &r0);
	for (i = 0; i < n; i++)
		if (nanosleep(&ts, NULL)) {
			perror("nanosleep");
			return 1;
		}
	getrusage(RUSAGE_SELF, &r1);
	printf("sleeps: n=%ld voluntary=%ld involuntary=%ld\n", n,
	       r1.ru_nvcsw - r0.ru_nvcsw, r1.ru_nivcsw - r0.ru_nivcsw);
	return 0;
}
