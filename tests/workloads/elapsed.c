/*
 * elapsed -- run a command and print how long it took, on CLOCK_MONOTONIC.
 *
 * usage: elapsed CMD [ARG...]
 *
 * Runs CMD (looked up in PATH) with its stdin, stdout and stderr, waits for it, then
 * prints "elapsed: ns=N" to stderr and exits with CMD's exit status (128+signal if it
 * was killed, 127 if it could not be run). For benchmarks in the test guest, where
 * busybox's time has 10 ms resolution.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
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
	long long t0;
	int status;
	pid_t pid;

	if (argc < 2) {
		fprintf(stderr, "usage: elapsed CMD [ARG...]\n");
		return 2;
	}
	t0 = now_ns();
	pid = fork();
	if (pid < 0) {
		perror("elapsed: fork");
		return 127;
	}
	if (pid == 0) {
		execvp(argv[1], argv + 1);
		perror("elapsed: exec");
		_exit(127);
	}
	if (waitpid(pid, &status, 0) < 0) {
		perror("elapsed: waitpid");
		return 127;
	}
	fprintf(stderr, "elapsed: ns=%lld\n", now_ns() - t0);
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return WEXITSTATUS(status);
}
