/*
 * memhog -- memory pressure of one kind at a time, for topdown's shrink_node
 * and compact_zone profiles, in a guest without swap or disks.
 *
 * usage: memhog [-l MB] [-f MB] [-K N] [-g GOFILE] [-k] [-a MB] [-c KB]
 *               [-s US] [-T THREADS] [-t N] [-w]
 *
 * Setup, before "memhog: ready" is printed:
 *   -l MB   lazyfree memory: map MB, write every page, MADV_FREE it.  Reclaim
 *           can drop these pages without swap, so reclaim has something to do.
 *   -f MB   fragmented memory: map MB of small pages, write every page, then
 *           MADV_DONTNEED every other page: the free memory it leaves is in
 *           single pages, which only compaction turns into large blocks.
 *   -K N    N 2 MiB-aligned regions written as small pages (MADV_NOHUGEPAGE),
 *           for khugepaged to collapse once the work starts.
 *   -g FILE then wait until FILE exists (so that a tracer attaches first).
 * The work:
 *   -k      from the allocation on, run kswapd0 as SCHED_IDLE, so that the
 *           allocating threads do most of the reclaim themselves; until the end
 *           (with -w, until the signal), so that kswapd does not catch up while
 *           a tracer still looks.  kswapd0 is SCHED_OTHER again then.
 *   -a MB   allocate and write MB of small pages, in chunks of -c KB (1024),
 *           each thread pausing -s US microseconds (0) between chunks, over
 *           -T threads (1).
 *   (-K N)  MADV_HUGEPAGE on the -K regions, which hands them to khugepaged,
 *           then wait (up to 60 s) until all of them are THPs.
 *   -t N    fault in N THPs: N 2 MiB-aligned MADV_HUGEPAGE regions, one byte
 *           written in each (-s US apart); prints how many became THPs.
 *   -w      then wait for SIGTERM or SIGINT, keeping all the memory.
 * Ends with "memhog: done lazyfree_left=KB thp=N", N the THPs it gained since
 * "ready".
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define MB (1024L * 1024)
#define HPAGE (2 * MB)

static long page, alloc_mb, chunk_kb = 1024, pause_us, threads = 1;

static void die(const char *what)
{
	fprintf(stderr, "memhog: %s: %s\n", what, strerror(errno));
	exit(1);
}

static char *map(long bytes, int advice)
{
	char *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		die("mmap");
	if (advice >= 0)
		madvise(p, bytes, advice);
	return p;
}

static void touch(char *p, long bytes)
{
	for (long i = 0; i < bytes; i += page)
		p[i] = 1;
}

static pid_t kswapd_pid = -1;

static void *allocator(void *arg)
{
	long mb = (long)arg, done;
	long chunk = chunk_kb * 1024;
	struct timespec ts = { pause_us / 1000000, pause_us % 1000000 * 1000 };

	for (done = 0; done < mb * MB; done += chunk) {
		touch(map(chunk, MADV_NOHUGEPAGE), chunk);
		if (pause_us)
			nanosleep(&ts, NULL);
	}
	return NULL;
}

/* The pid of kswapd0, or -1. */
static pid_t kswapd(void)
{
	DIR *d = opendir("/proc");
	struct dirent *e;
	pid_t found = -1;

	if (!d)
		return -1;
	while ((e = readdir(d)) && found < 0) {
		char path[300], comm[64] = "";
		FILE *f;

		if (e->d_name[0] < '0' || e->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%s/comm", e->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;
		if (fgets(comm, sizeof(comm), f) && !strcmp(comm, "kswapd0\n"))
			found = atoi(e->d_name);
		fclose(f);
	}
	closedir(d);
	return found;
}

static long thp_kb(void)
{
	FILE *f = fopen("/proc/self/smaps_rollup", "r");
	char line[256];
	long kb = 0;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "AnonHugePages: %ld kB", &kb) == 1)
			break;
	fclose(f);
	return kb;
}

static void on_signal(int sig)
{
	(void)sig;
}

int main(int argc, char **argv)
{
	long lazy_mb = 0, frag_mb = 0, thps = 0, lazy_left = 0, base_thp, khp = 0;
	const char *go = NULL;
	int idle_kswapd = 0, hold = 0, c;
	char *lazy = NULL, *kregions = NULL;

	page = sysconf(_SC_PAGESIZE);
	while ((c = getopt(argc, argv, "l:f:K:g:ka:c:s:T:t:w")) != -1) {
		switch (c) {
		case 'l': lazy_mb = atol(optarg); break;
		case 'f': frag_mb = atol(optarg); break;
		case 'K': khp = atol(optarg); break;
		case 'g': go = optarg; break;
		case 'k': idle_kswapd = 1; break;
		case 'a': alloc_mb = atol(optarg); break;
		case 'c': chunk_kb = atol(optarg); break;
		case 's': pause_us = atol(optarg); break;
		case 'T': threads = atol(optarg); break;
		case 't': thps = atol(optarg); break;
		case 'w': hold = 1; break;
		default:
			fprintf(stderr, "usage: memhog [-l MB] [-f MB] [-K N] [-g GOFILE] [-k] [-a MB] [-c KB] [-s US] [-T THREADS] [-t N] [-w]\n");
			return 2;
		}
	}
	if (chunk_kb < 4 || threads < 1 || threads > 64) {
		fprintf(stderr, "memhog: bad -c or -T\n");
		return 2;
	}

	if (lazy_mb) {
		lazy = map(lazy_mb * MB, MADV_NOHUGEPAGE);
		touch(lazy, lazy_mb * MB);
		if (madvise(lazy, lazy_mb * MB, MADV_FREE))
			die("MADV_FREE");
	}
	if (frag_mb) {
		char *f = map(frag_mb * MB, MADV_NOHUGEPAGE);

		touch(f, frag_mb * MB);
		for (long i = 0; i < frag_mb * MB; i += 2 * page)
			madvise(f + i, page, MADV_DONTNEED);
	}
	if (khp) {
		char *r = map((khp + 1) * HPAGE, MADV_NOHUGEPAGE);

		kregions = (char *)(((unsigned long)r + HPAGE - 1) & ~(HPAGE - 1));
		touch(kregions, khp * HPAGE);
	}
	base_thp = thp_kb();
	printf("memhog: ready\n");
	fflush(stdout);
	if (go) {
		struct timespec ts = { 0, 10 * 1000 * 1000 };

		while (access(go, F_OK) != 0)
			nanosleep(&ts, NULL);
	}

	if (idle_kswapd) {
		struct sched_param idle = { 0 };

		kswapd_pid = kswapd();
		if (kswapd_pid < 0 || sched_setscheduler(kswapd_pid, SCHED_IDLE, &idle))
			die("kswapd0 to SCHED_IDLE");
	}
	if (alloc_mb) {
		pthread_t tid[64];

		for (long t = 0; t < threads; t++)
			if (pthread_create(&tid[t], NULL, allocator, (void *)(alloc_mb / threads)))
				die("pthread_create");
		for (long t = 0; t < threads; t++)
			pthread_join(tid[t], NULL);
	}
	if (khp) {
		struct timespec ts = { 0, 100 * 1000 * 1000 };

		if (madvise(kregions, khp * HPAGE, MADV_HUGEPAGE))
			die("MADV_HUGEPAGE");
		for (int i = 0; i < 600 && thp_kb() - base_thp < khp * 2048; i++)
			nanosleep(&ts, NULL);
	}
	if (thps) {
		char *r = map((thps + 1) * HPAGE, -1);
		char *a = (char *)(((unsigned long)r + HPAGE - 1) & ~(HPAGE - 1));

		if (madvise(a, thps * HPAGE, MADV_HUGEPAGE))
			die("MADV_HUGEPAGE");
		for (long i = 0; i < thps; i++) {
			struct timespec ts = { pause_us / 1000000, pause_us % 1000000 * 1000 };

			if (i && pause_us)
				nanosleep(&ts, NULL);
			a[i * HPAGE] = 1;
		}
	}
	/* Lazyfree pages reclaim dropped are no longer mapped (mincore: no
	 * fault, unlike reading them). */
	if (lazy_mb) {
		unsigned char *vec = malloc(lazy_mb * MB / page);

		if (!vec || mincore(lazy, lazy_mb * MB, vec))
			die("mincore");
		for (long i = 0; i < lazy_mb * MB / page; i++)
			lazy_left += vec[i] & 1;
		free(vec);
	}
	printf("memhog: done lazyfree_left=%ld thp=%ld\n", lazy_left * page / 1024,
	       (thp_kb() - base_thp) / 2048);
	fflush(stdout);
	if (hold) {
		signal(SIGTERM, on_signal);
		signal(SIGINT, on_signal);
		pause();
	}
	if (kswapd_pid >= 0) {
		struct sched_param normal = { 0 };

		if (sched_setscheduler(kswapd_pid, SCHED_OTHER, &normal))
			die("kswapd0 back to SCHED_OTHER");
	}
	return 0;
}
