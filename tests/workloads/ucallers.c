/*
 * ucallers -- calls one function from three call sites a known number of times,
 * for topdown -x (a uprobe on a user-space function).
 *
 * usage: ucallers N1 N2 N3 [HOLD_MS]
 *
 * Prints "ready PID", waits for a line on stdin, then calls td_work() N1 times
 * from caller_one, N2 times from caller_two and N3 times from caller_three (and,
 * built with -DUCALLERS_WITH_LIB against the library below, td_lib_work() the
 * same way), prints "done", and exits HOLD_MS milliseconds later (default 1000:
 * time for topdown to name its call sites while the process lives).
 *
 * Built with -DUCALLERS_LIB -shared -fPIC it is that library instead: just
 * td_lib_work(). The guest builds it as a static program; the host tests
 * (tests/uprobe.rs) build the PIE program and the shared library.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

volatile long ucallers_sink;

#ifdef UCALLERS_LIB

NOINLINE void td_lib_work(long i)
{
	asm volatile("" ::: "memory");
	ucallers_sink += i;
}

#else

#ifdef UCALLERS_WITH_LIB
void td_lib_work(long i);
#define LIB_CALL(i) td_lib_work(i)
#else
#define LIB_CALL(i) ((void)0)
#endif

NOINLINE void td_work(long i)
{
	asm volatile("" ::: "memory");
	ucallers_sink += i;
}

/* Each call is followed by a store: no tail call, the return address is here. */
#define CALLER(name)                            \
	NOINLINE void name(long n)              \
	{                                       \
		for (long i = 0; i < n; i++) {  \
			td_work(i);             \
			ucallers_sink++;        \
			LIB_CALL(i);            \
			ucallers_sink++;        \
		}                               \
	}

CALLER(caller_one)
CALLER(caller_two)
CALLER(caller_three)

int main(int argc, char **argv)
{
	char line[64];
	long hold_ms = 1000;
	struct timespec ts;

	if (argc < 4) {
		fprintf(stderr, "usage: ucallers N1 N2 N3 [HOLD_MS]\n");
		return 2;
	}
	if (argc > 4)
		hold_ms = atol(argv[4]);
	printf("ready %d\n", (int)getpid());
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		return 1;
	caller_one(atol(argv[1]));
	caller_two(atol(argv[2]));
	caller_three(atol(argv[3]));
	printf("done\n");
	fflush(stdout);
	ts.tv_sec = hold_ms / 1000;
	ts.tv_nsec = (hold_ms % 1000) * 1000000L;
	nanosleep(&ts, NULL);
	return 0;
}

#endif
