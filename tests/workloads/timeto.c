/*
 * timeto -- run a command until it prints a line, and say how long that took.
 *
 * usage: timeto TEXT CMD [ARG...]
 *
 * Runs CMD (looked up in PATH) with its stdout and stderr both going to a pipe, and
 * copies what it prints to stdout. At the first line that contains TEXT it prints
 * "timeto: ns=N" to stderr (N: nanoseconds on CLOCK_MONOTONIC from just before the
 * fork to the moment the line was read), sends CMD SIGINT, copies the rest of its
 * output and waits for it; SIGINT again every second until it ends (a program that
 * takes the signal while it is still attaching may miss it: bpftrace 0.17 then waits
 * for events forever). Exit status: 0 if the line was seen (whatever CMD's status
 * after SIGINT), 1 if CMD ended without printing it, 2 on a usage error, 127 if CMD
 * could not be run. For the start-up benchmark in the test guest: exec to
 * "attached", as a program announces it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long long now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char **argv)
{
	char buf[4096], line[4096];
	size_t len = 0;
	long long t0, seen = -1;
	int fds[2], status;
	pid_t pid;

	if (argc < 3) {
		fprintf(stderr, "usage: timeto TEXT CMD [ARG...]\n");
		return 2;
	}
	if (pipe(fds) < 0) {
		perror("timeto: pipe");
		return 127;
	}
	t0 = now_ns();
	pid = fork();
	if (pid < 0) {
		perror("timeto: fork");
		return 127;
	}
	if (pid == 0) {
		close(fds[0]);
		dup2(fds[1], 1);
		dup2(fds[1], 2);
		close(fds[1]);
		execvp(argv[2], argv + 2);
		perror("timeto: exec");
		_exit(127);
	}
	close(fds[1]);
	for (;;) {
		struct pollfd p = { .fd = fds[0], .events = POLLIN };
		ssize_t n;

		if (poll(&p, 1, seen < 0 ? -1 : 1000) == 0) {
			kill(pid, SIGINT);
			continue;
		}
		n = read(fds[0], buf, sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		fwrite(buf, 1, n, stdout);
		/* Lines are matched whole (up to sizeof(line) - 1 bytes of each). */
		for (ssize_t i = 0; i < n && seen < 0; i++) {
			if (buf[i] != '\n' && len < sizeof(line) - 1) {
				line[len++] = buf[i];
				continue;
			}
			if (buf[i] != '\n')
				continue;
			line[len] = 0;
			len = 0;
			if (strstr(line, argv[1])) {
				seen = now_ns() - t0;
				fprintf(stderr, "timeto: ns=%lld\n", seen);
				kill(pid, SIGINT);
			}
		}
	}
	fflush(stdout);
	if (waitpid(pid, &status, 0) < 0) {
		perror("timeto: waitpid");
		return 127;
	}
	if (seen < 0) {
		fprintf(stderr, "timeto: no line with \"%s\" before %s ended\n", argv[1], argv[2]);
		return WIFEXITED(status) && WEXITSTATUS(status) == 127 ? 127 : 1;
	}
	return 0;
}
