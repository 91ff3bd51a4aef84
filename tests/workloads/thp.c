/*
 * thp -- a transparent-huge-page workload with exact, documented effects.
 *
 * Build:  cc -static -O2 -o thp thp.c      (x86-64: 4 KiB pages, 2 MiB PMD THPs)
 * Run as root, in a kernel whose THP mode is "madvise" or "always".
 *
 * A "region" is a 2 MiB-aligned, 2 MiB private anonymous mapping.  Every region is
 * its own VMA: regions are placed 4 MiB apart inside a PROT_NONE reservation, so a
 * 2 MiB PROT_NONE gap separates neighbours and they can never merge.
 *
 * Per round (see --repeat), in this order:
 *   --faults F           F regions: MADV_HUGEPAGE, then one write per 4 KiB page.  The first
 *                        write faults in a PMD-mapped THP, the other 511 hit it.  Left mapped.
 *   --munmap-halves P    P regions faulted in as THPs as above, then munmap() of the upper
 *                        1 MiB (the PMD is split, 256 PTEs of the THP are zapped).  The lower
 *                        half stays mapped.
 *   --dontneed-halves Q  Q regions faulted in as THPs as above, then MADV_NOHUGEPAGE (a VMA
 *                        flag only: it keeps khugepaged from collapsing the region back), then
 *                        MADV_DONTNEED of the upper 1 MiB (PMD split, 256 PTEs zapped).
 *   --collapse C         C regions: MADV_NOHUGEPAGE, one write per 4 KiB page (512 small
 *                        pages), then MADV_HUGEPAGE and MADV_COLLAPSE (25), which replaces them
 *                        with a THP.  Left mapped.
 *   --repeat R           do the whole set R times (default 1).  Regions of earlier rounds stay
 *                        mapped, so memory use is R * ((F + C) * 2 MiB + (P + Q) * 1 MiB).
 *   --hold-ms N          sleep N ms after the work, before exiting (default 0).
 *   --wait-usr1          in the first round, after faulting in the --munmap-halves regions
 *                        and before unmapping their halves, print "thp: ready" and wait for
 *                        SIGUSR1: a tracer can start after the faults and see only unmaps.
 *   --unmap-gap-ms N     sleep N ms before each half munmap (default 0), to spread them
 *                        over time.
 *   --fault-gap-ms N     sleep N ms before faulting in each region (default 0), to
 *                        spread the THP faults of --faults, --munmap-halves,
 *                        --dontneed-halves and --mix over time (a burst that outlasts a
 *                        tracer's reaction).
 *   --mix M              after the other phases: M regions, each faulted in as a THP and
 *                        at once half unmapped, so THP faults and half unmaps alternate
 *                        (a steady 50/50 mix of the two deferred-split callers).
 *   --stamps FILE        write one line "fault NS" or "munmap NS" to FILE just before each
 *                        THP fault of --faults and --mix and each half munmap, NS being
 *                        CLOCK_MONOTONIC in nanoseconds (the clock of bpf_ktime_get_ns).
 *
 * Checks: after each step it reads /proc/self/smaps and requires, for every region,
 * exactly the expected VMA: after a THP fault or a collapse AnonHugePages 2048 kB (a
 * PMD-mapped THP); before a collapse Rss 2048 kB and AnonHugePages 0; after a half unmap
 * or a half MADV_DONTNEED Rss 1024 kB and AnonHugePages 0.  On any mismatch, or if a
 * system call fails, it prints "thp: error: ..." and exits 1 (usage errors: 2).
 *
 * khugepaged: before the work it sets /sys/kernel/mm/transparent_hugepage/khugepaged/
 * scan_sleep_millisecs and alloc_sleep_millisecs to 86400000 (one day).  khugepaged would
 * still make one pass over this process as soon as the process is registered with it
 * (at its first THP fault), i.e. in the middle of the work.  So that pass is provoked
 * first: a read fault in an untouched MADV_HUGEPAGE region maps the huge zero page and
 * registers the process (no THP is allocated, no deferred-split call is made), and thp
 * waits (up to 7 s) until khugepaged's full_scans counter moves; then khugepaged sleeps
 * through the work.  Besides, MADV_NOHUGEPAGE on the MADV_DONTNEED regions keeps
 * khugepaged off the only regions it could collapse after the work.  The old sysfs values
 * are restored at exit (also on SIGINT/SIGTERM/SIGHUP, not on SIGKILL).  If they cannot be
 * written it warns and carries on; the checks above still catch a region that khugepaged
 * changed.
 *
 * Output, after all rounds (the counts are what was done and verified, totals over
 * the rounds): one line per phase, then a summary line:
 *   thp: faults=F*R (THP faults, left mapped)
 *   thp: munmap_halves=P*R (THP faults, then munmap of the upper 1 MiB)
 *   thp: dontneed_halves=Q*R (THP faults, then MADV_DONTNEED of the upper 1 MiB)
 *   thp: collapses=C*R (small pages collapsed into a THP by MADV_COLLAPSE)
 *   thp: collapse_retries=N (MADV_COLLAPSE attempts that failed with EAGAIN or ENOMEM,
 *        documented as transient, and were retried after a pause; up to 29 a region)
 *   thp: faults=F*R munmap_halves=P*R dontneed_halves=Q*R collapses=C*R
 *
 * Expected kernel effects (Debian 6.12 cloud kernel), for the whole run:
 *   /proc/vmstat (the same on Debian 12's 6.1): thp_fault_alloc += (F+P+Q)*R,
 *     thp_collapse_alloc += C*R, thp_split_pmd += (P+Q)*R,
 *     thp_deferred_split_page += (P+Q)*R, thp_fault_fallback += 0,
 *     thp_collapse_alloc_failed += 0; thp_zero_page_alloc may go up by one (the huge
 *     zero page mapped by the khugepaged preparation, if it was not allocated yet).
 *   deferred_split_folio() calls, all in this process:
 *     (F+P+Q)*R from do_huge_pmd_anonymous_page  (THP fault),
 *     (P+Q)*R   from folio_remove_rmap_ptes      (half munmap / half MADV_DONTNEED),
 *     C*R       from collapse_huge_page          (MADV_COLLAPSE);
 *   unmapping whole regions and process exit add none.
 * On Debian 12's 6.1 kernel the function is deferred_split_huge_page() and behaves
 * differently: it is not called at fault or collapse time, but page_remove_rmap() calls
 * it once per PTE-mapped subpage that gets unmapped, i.e. 512 times per half-unmapped
 * region (256 at the half unmap, 256 more when the rest goes away at exit).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#ifndef MADV_HUGEPAGE
#define MADV_HUGEPAGE 14
#endif
#ifndef MADV_NOHUGEPAGE
#define MADV_NOHUGEPAGE 15
#endif
#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif

#define KIB 1024UL
#define MIB (1024UL * KIB)
#define PAGE (4 * KIB)
#define HPAGE (2 * MIB)
#define HALF (1 * MIB)
#define STRIDE (2 * HPAGE)

#define THP_SYSFS "/sys/kernel/mm/transparent_hugepage"
#define KHP_SYSFS THP_SYSFS "/khugepaged"
#define QUIET_MS "86400000"

static const char usage_text[] =
	"usage: thp [--faults F] [--munmap-halves P] [--dontneed-halves Q] [--collapse C]\n"
	"           [--repeat R] [--hold-ms N] [--wait-usr1] [--unmap-gap-ms N]\n"
	"           [--fault-gap-ms N] [--mix M]\n"
	"           [--stamps FILE]\n"
	"\n"
	"Transparent-huge-page workload with exact effects (x86-64, run as root).\n"
	"Each region is a 2 MiB-aligned 2 MiB anonymous mapping and a VMA of its own.\n"
	"Per round:\n"
	"  --faults F           F regions: MADV_HUGEPAGE, one write per 4 KiB page, so the\n"
	"                       first write faults in a THP.  Left mapped.\n"
	"  --munmap-halves P    P regions faulted in as THPs, then munmap of the upper 1 MiB.\n"
	"  --dontneed-halves Q  Q regions faulted in as THPs, then MADV_NOHUGEPAGE (keeps\n"
	"                       khugepaged away) and MADV_DONTNEED of the upper 1 MiB.\n"
	"  --collapse C         C regions: MADV_NOHUGEPAGE, one write per 4 KiB page (small\n"
	"                       pages), then MADV_HUGEPAGE and MADV_COLLAPSE into a THP.\n"
	"  --repeat R           do the whole set R times (default 1); everything stays mapped.\n"
	"  --hold-ms N          sleep N ms at the end, before exiting (default 0).\n"
	"  --wait-usr1          round 1: after the --munmap-halves faults, print \"thp: ready\"\n"
	"                       and wait for SIGUSR1 before unmapping the halves.\n"
	"  --unmap-gap-ms N     sleep N ms before each half munmap (default 0).\n"
	"  --fault-gap-ms N     sleep N ms before faulting in each region (default 0).\n"
	"  --mix M              after the rest: M regions, each a THP fault then at once a\n"
	"                       half munmap (faults and half unmaps alternate).\n"
	"  --stamps FILE        write \"fault NS\" / \"munmap NS\" (CLOCK_MONOTONIC) to FILE\n"
	"                       before each THP fault of --faults/--mix and each half munmap.\n"
	"\n"
	"Every step is verified in /proc/self/smaps (AnonHugePages / Rss of the region's VMA);\n"
	"a mismatch is reported as \"thp: error: ...\" with exit status 1.  khugepaged is put\n"
	"to sleep for the run (scan_sleep_millisecs and alloc_sleep_millisecs set to one day,\n"
	"restored at exit), after it was made to finish its first pass over this process\n"
	"(registered by a read fault on the huge zero page) before the work starts.\n"
	"\n"
	"Output: one line per phase, then\n"
	"  thp: faults=F*R munmap_halves=P*R dontneed_halves=Q*R collapses=C*R\n"
	"\n"
	"Expected on Debian's 6.12 kernel: /proc/vmstat thp_fault_alloc += (F+P+Q)*R,\n"
	"thp_collapse_alloc += C*R, thp_split_pmd += (P+Q)*R, thp_deferred_split_page += (P+Q)*R;\n"
	"deferred_split_folio() is called (F+P+Q)*R times from do_huge_pmd_anonymous_page,\n"
	"(P+Q)*R times from folio_remove_rmap_ptes and C*R times from collapse_huge_page;\n"
	"unmapping whole regions and exiting add no calls.\n";

/* ---------------------------------------------------------------- errors */

static void restore_khugepaged(void);

static void die(const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	fputs("thp: error: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

static void warn(const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	fputs("thp: warning: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* ------------------------------------------------------------ small files */

/* Reads a small file into buf (NUL-terminated, trailing newline removed). */
static int read_small(const char *path, char *buf, size_t size)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -1;
	n = read(fd, buf, size - 1);
	close(fd);
	if (n < 0)
		return -1;
	buf[n] = '\0';
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
		buf[--n] = '\0';
	return 0;
}

/* Async-signal-safe: used from the signal handler too. */
static int write_small(const char *path, const char *val)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	size_t len = strlen(val);
	ssize_t n;

	if (fd < 0)
		return -1;
	n = write(fd, val, len);
	close(fd);
	return n == (ssize_t)len ? 0 : -1;
}

/* ------------------------------------------------------------- khugepaged */

static char thp_mode[128] = "unknown";      /* .../transparent_hugepage/enabled */
static char thp_size_mode[128] = "inherit"; /* .../hugepages-2048kB/enabled (6.8+) */

static const char *const khp_files[2] = {
	KHP_SYSFS "/scan_sleep_millisecs",
	KHP_SYSFS "/alloc_sleep_millisecs",
};
static char khp_saved[2][32];
static volatile sig_atomic_t khp_changed[2];

static void restore_khugepaged(void)
{
	for (int i = 0; i < 2; i++) {
		if (khp_changed[i]) {
			write_small(khp_files[i], khp_saved[i]);
			khp_changed[i] = 0;
		}
	}
}

static void on_signal(int sig)
{
	restore_khugepaged();
	signal(sig, SIG_DFL);
	raise(sig);
	_exit(128 + sig);
}

static long read_full_scans(void)
{
	char buf[32];

	if (read_small(KHP_SYSFS "/full_scans", buf, sizeof(buf)) < 0)
		return -1;
	return strtol(buf, NULL, 10);
}

static char *map_aligned_reservation(size_t nregions, char **reservation, size_t *len);
static void map_region(char *addr, int advice);
static void sleep_ms(long ms);

/* Waits up to ms milliseconds for khugepaged's full_scans counter to move past before. */
static int wait_full_scans(long before, long ms)
{
	for (long waited = 0; waited < ms; waited += 10) {
		if (read_full_scans() != before)
			return 1;
		sleep_ms(10);
	}
	return read_full_scans() != before;
}

/*
 * Puts khugepaged to sleep for the run.  Writing scan_sleep_millisecs wakes khugepaged
 * and makes it sleep for the new period after its next pass; registering an mm with an
 * idle khugepaged (no mm registered) wakes it for a pass at once.  That pass must not
 * happen in the middle of the work, so it is provoked here, while this mm has nothing
 * to collapse: an untouched MADV_HUGEPAGE region gets one read fault, which maps the huge
 * zero page and registers the mm with khugepaged (on 6.12, MADV_HUGEPAGE alone does not
 * register it), without allocating a THP or calling the deferred-split functions.  Then
 * we wait until khugepaged has finished a pass (full_scans changes).
 */
static void quiet_khugepaged(void)
{
	char *res, *dummy, buf[16];
	size_t reslen;
	long before;
	int i;

	for (i = 0; i < 2; i++) {
		if (read_small(khp_files[i], khp_saved[i], sizeof(khp_saved[i])) < 0) {
			warn("cannot read %s (%s): khugepaged not quieted, counts may be disturbed",
			     khp_files[i], strerror(errno));
			return;
		}
	}
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	signal(SIGHUP, on_signal);
	atexit(restore_khugepaged);
	for (i = 0; i < 2; i++) {
		khp_changed[i] = 1;
		if (write_small(khp_files[i], QUIET_MS) < 0) {
			khp_changed[i] = 0;
			warn("cannot write %s (%s): khugepaged not quieted, counts may be disturbed",
			     khp_files[i], strerror(errno));
			return;
		}
	}

	before = read_full_scans();
	if (before < 0) {
		warn("cannot read " KHP_SYSFS "/full_scans: not waiting for khugepaged");
		return;
	}
	/* With 2 MiB THPs switched off, a fault registers nothing: nothing to wait for. */
	if (strstr(thp_size_mode, "[never]")) {
		warn(THP_SYSFS "/hugepages-2048kB/enabled is never: not waiting for khugepaged");
		return;
	}
	/* Without the huge zero page a read fault would allocate a THP: don't. */
	if (read_small(THP_SYSFS "/use_zero_page", buf, sizeof(buf)) < 0 || strcmp(buf, "1")) {
		warn(THP_SYSFS "/use_zero_page is not 1: not waiting for khugepaged");
		return;
	}
	dummy = map_aligned_reservation(1, &res, &reslen);
	map_region(dummy, MADV_HUGEPAGE);
	(void)*(volatile char *)dummy;
	if (!wait_full_scans(before, 2000)) {
		/* khugepaged was asleep with other work: wake it for a pass over us too. */
		before = read_full_scans();
		if (write_small(khp_files[0], QUIET_MS) < 0)
			die("cannot write %s: %s", khp_files[0], strerror(errno));
		if (!wait_full_scans(before, 5000))
			warn("khugepaged did not finish a pass within 7 s; carrying on");
	}
	if (munmap(res, reslen) < 0)
		die("munmap: %s", strerror(errno));
}

/* ------------------------------------------------------------------ smaps */

struct vma {
	unsigned long start, end;
	long rss_kb, ahp_kb;
};

static struct vma *vmas;
static size_t nvmas, vmas_cap;
static char *smaps_buf;
static size_t smaps_cap;

static void read_smaps(void)
{
	int fd = open("/proc/self/smaps", O_RDONLY | O_CLOEXEC);
	size_t len = 0;
	char *line, *next;
	struct vma *cur = NULL;

	if (fd < 0)
		die("open /proc/self/smaps: %s", strerror(errno));
	for (;;) {
		ssize_t n;

		if (smaps_cap - len < 65536) {
			smaps_cap = smaps_cap ? 2 * smaps_cap : 1 << 20;
			smaps_buf = realloc(smaps_buf, smaps_cap);
			if (!smaps_buf)
				die("out of memory");
		}
		n = read(fd, smaps_buf + len, smaps_cap - len - 1);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			die("read /proc/self/smaps: %s", strerror(errno));
		}
		if (n == 0)
			break;
		len += n;
	}
	close(fd);
	smaps_buf[len] = '\0';

	nvmas = 0;
	for (line = smaps_buf; *line; line = next) {
		char *nl = strchr(line, '\n');

		next = nl ? nl + 1 : line + strlen(line);
		if (nl)
			*nl = '\0';
		if ((*line >= '0' && *line <= '9') || (*line >= 'a' && *line <= 'f')) {
			/* "start-end perms offset dev inode [name]" */
			char *end;
			unsigned long s = strtoul(line, &end, 16);

			if (*end != '-')
				continue;
			if (nvmas == vmas_cap) {
				vmas_cap = vmas_cap ? 2 * vmas_cap : 256;
				vmas = realloc(vmas, vmas_cap * sizeof(*vmas));
				if (!vmas)
					die("out of memory");
			}
			cur = &vmas[nvmas++];
			cur->start = s;
			cur->end = strtoul(end + 1, NULL, 16);
			cur->rss_kb = cur->ahp_kb = -1;
		} else if (cur && strncmp(line, "Rss:", 4) == 0) {
			cur->rss_kb = strtol(line + 4, NULL, 10);
		} else if (cur && strncmp(line, "AnonHugePages:", 14) == 0) {
			cur->ahp_kb = strtol(line + 14, NULL, 10);
		}
	}
}

/* smaps lists VMAs in address order. */
static const struct vma *find_vma(const char *addr)
{
	unsigned long a = (unsigned long)addr;
	size_t lo = 0, hi = nvmas;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (vmas[mid].start < a)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < nvmas && vmas[lo].start == a ? &vmas[lo] : NULL;
}


static void expect_region(const char *phase, const char *step, size_t idx, const char *addr,
			  size_t size, long rss_kb, long ahp_kb)
{
	const struct vma *v = find_vma(addr);

	if (!v)
		die("%s: region %zu at %p: no VMA starts there after %s", phase, idx, (void *)addr,
		    step);
	if (v->end - v->start != size)
		die("%s: region %zu at %p: VMA is %lu kB after %s, want %zu kB (merged or split?)",
		    phase, idx, (void *)addr, (v->end - v->start) / KIB, step, size / KIB);
	if (v->ahp_kb < 0 || v->rss_kb < 0)
		die("%s: region %zu at %p: no Rss/AnonHugePages in /proc/self/smaps", phase, idx,
		    (void *)addr);
	if (v->ahp_kb != ahp_kb || (rss_kb >= 0 && v->rss_kb != rss_kb)) {
		const char *hint = "";

		if (ahp_kb > 0 && v->ahp_kb == 0 && strcmp(step, "MADV_COLLAPSE") == 0)
			hint = " -- the collapse did not leave a PMD-mapped THP";
		else if (ahp_kb > 0 && v->ahp_kb == 0)
			hint = " -- not a THP: the fault fell back to small pages (THP mode,"
			       " memory fragmentation?)";
		else if (ahp_kb == 0 && v->ahp_kb > 0)
			hint = " -- still (or again) a PMD-mapped THP: khugepaged interfered?";
		die("%s: region %zu at %p after %s: Rss %ld kB, AnonHugePages %ld kB; want Rss %ld kB,"
		    " AnonHugePages %ld kB%s (THP mode: %s; 2 MiB: %s)",
		    phase, idx, (void *)addr, step, v->rss_kb, v->ahp_kb,
		    rss_kb >= 0 ? rss_kb : v->rss_kb, ahp_kb, hint, thp_mode, thp_size_mode);
	}
}

/* ---------------------------------------------------------------- regions */

/* Reserves PROT_NONE space for n regions at a 4 MiB stride; returns the first region. */
static char *map_aligned_reservation(size_t nregions, char **reservation, size_t *len)
{
	char *r;
	uintptr_t a;

	*len = nregions * STRIDE + HPAGE;
	r = mmap(NULL, *len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (r == MAP_FAILED)
		die("mmap reservation of %zu MiB: %s", *len / MIB, strerror(errno));
	*reservation = r;
	a = ((uintptr_t)r + HPAGE - 1) & ~(uintptr_t)(HPAGE - 1);
	return (char *)a;
}

static void map_region(char *addr, int advice)
{
	if (mmap(addr, HPAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1,
		 0) != addr)
		die("mmap 2 MiB at %p: %s", (void *)addr, strerror(errno));
	if (madvise(addr, HPAGE, advice) < 0)
		die("madvise(%p, %s): %s", (void *)addr,
		    advice == MADV_HUGEPAGE ? "MADV_HUGEPAGE" : "MADV_NOHUGEPAGE", strerror(errno));
}

static long fault_gap_ms; /* --fault-gap-ms */

/* Writes every 4 KiB page of the region: the first write is the THP fault. */
static void touch_region(char *addr)
{
	volatile char *p = addr;

	if (fault_gap_ms)
		sleep_ms(fault_gap_ms);

	for (size_t off = 0; off < HPAGE; off += PAGE)
		p[off] = 1;
}

/*
 * MADV_COLLAPSE, retried on its documented transient failures: EAGAIN ("could not
 * take a lock or isolate a page", e.g. pages still in a per-CPU LRU batch) and ENOMEM
 * (the huge page could not be allocated: compaction can fail at any moment under
 * emulation).  A failed attempt queues no THP for deferred split, so the calls counted
 * stay one per region; the kernel's allocation counters may move once per attempt that
 * got as far as allocating (reported as collapse_retries, for the vmstat checks).
 */
#define COLLAPSE_TRIES 30
static long collapse_retries;

static void collapse_region(char *a)
{
	for (int t = 1;; t++) {
		int err;

		if (madvise(a, HPAGE, MADV_COLLAPSE) == 0)
			return;
		err = errno;
		if ((err == EAGAIN || err == ENOMEM) && t < COLLAPSE_TRIES) {
			collapse_retries++;
			sleep_ms(t < 10 ? 10 * t : 100);
			continue;
		}
		die("madvise(%p, MADV_COLLAPSE): %s%s (attempt %d of %d)", (void *)a, strerror(err),
		    err == EINVAL ? " (kernel without MADV_COLLAPSE? needs 6.1+)" : "", t,
		    COLLAPSE_TRIES);
	}
}

/* ------------------------------------------------------------------- main */

static volatile sig_atomic_t got_usr1;

static void on_usr1(int sig)
{
	(void)sig;
	got_usr1 = 1;
}

/* Prints "thp: ready" and returns once SIGUSR1 has arrived (installed early, so none is lost). */
static void wait_usr1(void)
{
	sigset_t block, old;

	sigemptyset(&block);
	sigaddset(&block, SIGUSR1);
	sigprocmask(SIG_BLOCK, &block, &old);
	printf("thp: ready\n");
	fflush(stdout);
	while (!got_usr1)
		sigsuspend(&old);
	sigprocmask(SIG_SETMASK, &old, NULL);
}

static FILE *stamps;

/* Writes "KIND NS" to the --stamps file, NS being CLOCK_MONOTONIC nanoseconds. */
static void stamp(const char *kind)
{
	struct timespec ts;

	if (!stamps)
		return;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	fprintf(stamps, "%s %lld\n", kind, (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec);
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static long parse_count(const char *opt, const char *s)
{
	char *end;
	long v;

	if (!s) {
		fprintf(stderr, "thp: %s needs a value (see --help)\n", opt);
		exit(2);
	}
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < 0 || v > INT_MAX) {
		fprintf(stderr, "thp: bad value for %s: '%s'\n", opt, s);
		exit(2);
	}
	return v;
}

int main(int argc, char **argv)
{
	long faults = 0, munmaps = 0, dontneeds = 0, collapses = 0, repeat = 1, hold_ms = 0;
	long unmap_gap_ms = 0, mixes = 0;
	int wait_for_usr1 = 0;
	long done_f = 0, done_m = 0, done_d = 0, done_c = 0, done_x = 0;
	char buf[64];

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			fputs(usage_text, stdout);
			return 0;
		} else if (!strcmp(a, "--faults")) {
			faults = parse_count(a, v), i++;
		} else if (!strcmp(a, "--munmap-halves")) {
			munmaps = parse_count(a, v), i++;
		} else if (!strcmp(a, "--dontneed-halves")) {
			dontneeds = parse_count(a, v), i++;
		} else if (!strcmp(a, "--collapse")) {
			collapses = parse_count(a, v), i++;
		} else if (!strcmp(a, "--repeat")) {
			repeat = parse_count(a, v), i++;
		} else if (!strcmp(a, "--hold-ms")) {
			hold_ms = parse_count(a, v), i++;
		} else if (!strcmp(a, "--unmap-gap-ms")) {
			unmap_gap_ms = parse_count(a, v), i++;
		} else if (!strcmp(a, "--fault-gap-ms")) {
			fault_gap_ms = parse_count(a, v), i++;
		} else if (!strcmp(a, "--mix")) {
			mixes = parse_count(a, v), i++;
		} else if (!strcmp(a, "--stamps")) {
			if (!v) {
				fprintf(stderr, "thp: --stamps needs a value (see --help)\n");
				return 2;
			}
			stamps = fopen(v, "w");
			if (!stamps)
				die("cannot write %s: %s", v, strerror(errno));
			i++;
		} else if (!strcmp(a, "--wait-usr1")) {
			wait_for_usr1 = 1;
		} else {
			fprintf(stderr, "thp: unknown argument '%s' (see --help)\n", a);
			return 2;
		}
	}

	if (sysconf(_SC_PAGESIZE) != (long)PAGE)
		die("page size is %ld, this workload assumes 4096", sysconf(_SC_PAGESIZE));
	if (read_small(THP_SYSFS "/hpage_pmd_size", buf, sizeof(buf)) == 0 &&
	    strtoul(buf, NULL, 10) != HPAGE)
		die("PMD THP size is %s bytes, this workload assumes %lu", buf, HPAGE);
	if (read_small(THP_SYSFS "/enabled", thp_mode, sizeof(thp_mode)) < 0)
		die("cannot read " THP_SYSFS "/enabled (%s): no THP support?", strerror(errno));
	if (strstr(thp_mode, "[never]"))
		die("THP is disabled (" THP_SYSFS "/enabled: %s)", thp_mode);
	read_small(THP_SYSFS "/hugepages-2048kB/enabled", thp_size_mode, sizeof(thp_size_mode));

	if (wait_for_usr1)
		signal(SIGUSR1, on_usr1);
	quiet_khugepaged();

	for (long r = 0; r < repeat; r++) {
		size_t n = faults + munmaps + dontneeds + collapses, len;
		char *res, *base, *f, *m, *d, *c;
		size_t i;

		if (n == 0)
			break;
		base = map_aligned_reservation(n, &res, &len);
		f = base;
		m = f + faults * STRIDE;
		d = m + munmaps * STRIDE;
		c = d + dontneeds * STRIDE;

		/* Phase 1: THP faults, left mapped. */
		for (i = 0; i < (size_t)faults; i++) {
			map_region(f + i * STRIDE, MADV_HUGEPAGE);
			stamp("fault");
			touch_region(f + i * STRIDE);
		}
		read_smaps();
		for (i = 0; i < (size_t)faults; i++)
			expect_region("faults", "the THP fault", i, f + i * STRIDE, HPAGE, 2048, 2048);
		done_f += faults;

		/* Phase 2: THP faults, then munmap of the upper half. */
		for (i = 0; i < (size_t)munmaps; i++) {
			map_region(m + i * STRIDE, MADV_HUGEPAGE);
			touch_region(m + i * STRIDE);
		}
		read_smaps();
		for (i = 0; i < (size_t)munmaps; i++)
			expect_region("munmap_halves", "the THP fault", i, m + i * STRIDE, HPAGE, 2048,
				      2048);
		if (wait_for_usr1 && r == 0)
			wait_usr1();
		for (i = 0; i < (size_t)munmaps; i++) {
			if (unmap_gap_ms)
				sleep_ms(unmap_gap_ms);
			stamp("munmap");
			if (munmap(m + i * STRIDE + HALF, HALF) < 0)
				die("munmap of upper half at %p: %s", (void *)(m + i * STRIDE + HALF),
				    strerror(errno));
		}
		read_smaps();
		for (i = 0; i < (size_t)munmaps; i++)
			expect_region("munmap_halves", "munmap of the upper half", i, m + i * STRIDE,
				      HALF, 1024, 0);
		done_m += munmaps;

		/* Phase 3: THP faults, then MADV_DONTNEED of the upper half. */
		for (i = 0; i < (size_t)dontneeds; i++) {
			map_region(d + i * STRIDE, MADV_HUGEPAGE);
			touch_region(d + i * STRIDE);
		}
		read_smaps();
		for (i = 0; i < (size_t)dontneeds; i++)
			expect_region("dontneed_halves", "the THP fault", i, d + i * STRIDE, HPAGE, 2048,
				      2048);
		for (i = 0; i < (size_t)dontneeds; i++) {
			char *a = d + i * STRIDE;

			if (madvise(a, HPAGE, MADV_NOHUGEPAGE) < 0)
				die("madvise(%p, MADV_NOHUGEPAGE): %s", (void *)a, strerror(errno));
			if (madvise(a + HALF, HALF, MADV_DONTNEED) < 0)
				die("madvise(%p, MADV_DONTNEED): %s", (void *)(a + HALF), strerror(errno));
		}
		read_smaps();
		for (i = 0; i < (size_t)dontneeds; i++)
			expect_region("dontneed_halves", "MADV_DONTNEED of the upper half", i,
				      d + i * STRIDE, HPAGE, 1024, 0);
		done_d += dontneeds;

		/* Phase 4: small pages, then MADV_COLLAPSE into a THP. */
		for (i = 0; i < (size_t)collapses; i++) {
			map_region(c + i * STRIDE, MADV_NOHUGEPAGE);
			touch_region(c + i * STRIDE);
		}
		read_smaps();
		for (i = 0; i < (size_t)collapses; i++)
			expect_region("collapses", "faulting in small pages", i, c + i * STRIDE, HPAGE,
				      2048, 0);
		for (i = 0; i < (size_t)collapses; i++) {
			char *a = c + i * STRIDE;

			if (madvise(a, HPAGE, MADV_HUGEPAGE) < 0)
				die("madvise(%p, MADV_HUGEPAGE): %s", (void *)a, strerror(errno));
			collapse_region(a);
		}
		read_smaps();
		for (i = 0; i < (size_t)collapses; i++)
			expect_region("collapses", "MADV_COLLAPSE", i, c + i * STRIDE, HPAGE, 2048, 2048);
		done_c += collapses;
	}

	/* The mix: a THP fault, then at once a half munmap, region by region. */
	if (mixes > 0) {
		size_t len, i;
		char *res, *x = map_aligned_reservation(mixes, &res, &len);

		for (i = 0; i < (size_t)mixes; i++) {
			char *a = x + i * STRIDE;

			map_region(a, MADV_HUGEPAGE);
			stamp("fault");
			touch_region(a);
			stamp("munmap");
			if (munmap(a + HALF, HALF) < 0)
				die("munmap of upper half at %p: %s", (void *)(a + HALF), strerror(errno));
		}
		read_smaps();
		for (i = 0; i < (size_t)mixes; i++)
			expect_region("mix", "a THP fault and munmap of the upper half", i,
				      x + i * STRIDE, HALF, 1024, 0);
		done_x = mixes;
	}
	if (stamps && fclose(stamps) != 0)
		die("writing the --stamps file: %s", strerror(errno));

	printf("thp: faults=%ld (THP faults, left mapped)\n", done_f);
	printf("thp: munmap_halves=%ld (THP faults, then munmap of the upper 1 MiB)\n", done_m);
	printf("thp: dontneed_halves=%ld (THP faults, then MADV_DONTNEED of the upper 1 MiB)\n",
	       done_d);
	printf("thp: collapses=%ld (small pages collapsed into a THP by MADV_COLLAPSE)\n", done_c);
	printf("thp: collapse_retries=%ld (MADV_COLLAPSE attempts that failed with EAGAIN or ENOMEM"
	       " and were retried)\n",
	       collapse_retries);
	if (mixes > 0)
		printf("thp: mix=%ld (a THP fault, then munmap of its upper 1 MiB)\n", done_x);
	printf("thp: faults=%ld munmap_halves=%ld dontneed_halves=%ld collapses=%ld\n", done_f,
	       done_m, done_d, done_c);
	fflush(stdout);
	if (hold_ms > 0)
		sleep_ms(hold_ms);
	restore_khugepaged();
	return 0;
}
