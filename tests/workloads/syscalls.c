/*
 * syscalls -- one process, many kernel paths: files, directories, /proc and /sys,
 * pipes, splice, Unix, TCP and UDP sockets over loopback, epoll, eventfd, timerfd,
 * signalfd, inotify, memfd, mmap, SysV IPC, record locks, xattrs, netlink, a mount
 * namespace with a tmpfs mounted and unmounted, keys, POSIX message queues and timers,
 * file handles, pidfds.
 *
 * Build:  cc -static -O2 -fno-omit-frame-pointer -o syscalls syscalls.c
 * Usage:  syscalls ROUNDS DIR
 *
 * For an oracle of a function's callers (ftrace's function tracer limited to this pid,
 * against a BPF tool's -p): it never forks or starts a thread, so both see the same
 * task from start to end, and it makes no system call while a tracer is being set up.
 * It blocks SIGUSR1, prints "syscalls: ready" and waits for SIGUSR1 (blocked in
 * sigwaitinfo: no calls meanwhile); then it does ROUNDS rounds of everything, working
 * in DIR (made and removed), prints "syscalls: done" and waits for SIGUSR1 again before
 * it exits 0. A path that this kernel or guest lacks (no loopback, no xattrs on DIR's
 * file system, no SysV IPC) is left out and named on stderr: the oracle compares
 * whatever ran. Usage errors exit 2, a failed setup exits 1.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <mqueue.h>
#include <sched.h>
#include <sys/mount.h>
#include <time.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/utsname.h>
#include <sys/xattr.h>
#include <unistd.h>

static char buf[65536];
static const char *dir;
/* Each path left out is named once. */
static unsigned skipped;

static void skip(unsigned bit, const char *what)
{
	if (!(skipped & bit))
		fprintf(stderr, "syscalls: left out: %s: %s\n", what, strerror(errno));
	skipped |= bit;
}

static void wait_usr1(const sigset_t *set)
{
	while (sigwaitinfo(set, NULL) < 0 && errno == EINTR)
		;
}

/* Every file under `path`, to `depth` levels: opened, read, stat'ed. */
static void walk(const char *path, int depth)
{
	DIR *d = opendir(path);
	struct dirent *e;
	char sub[4096];

	if (!d)
		return;
	while ((e = readdir(d))) {
		struct stat st;
		int fd;

		if (e->d_name[0] == '.')
			continue;
		snprintf(sub, sizeof(sub), "%s/%s", path, e->d_name);
		if (lstat(sub, &st))
			continue;
		if (S_ISDIR(st.st_mode) && depth > 0) {
			walk(sub, depth - 1);
		} else if (S_ISLNK(st.st_mode)) {
			ssize_t n = readlink(sub, buf, sizeof(buf) - 1);
			(void)n;
		} else if (S_ISREG(st.st_mode)) {
			fd = open(sub, O_RDONLY | O_NONBLOCK);
			if (fd >= 0) {
				ssize_t n = read(fd, buf, 4096);
				(void)n;
				close(fd);
			}
		}
	}
	closedir(d);
}

static void files(void)
{
	char a[4096], b[4096];
	int fd;

	walk("/etc", 2);
	walk("/proc/self", 0);
	walk("/sys/kernel/mm", 1);
	snprintf(a, sizeof(a), "%s/a", dir);
	snprintf(b, sizeof(b), "%s/b", dir);
	fd = open(a, O_RDWR | O_CREAT | O_TRUNC, 0600);
	if (fd < 0)
		return;
	for (int i = 0; i < 16; i++)
		if (write(fd, buf, sizeof(buf)) < 0)
			break;
	fsync(fd);
	pread(fd, buf, sizeof(buf), 4096);
	ftruncate(fd, 4096);
	{
		/* a record lock, set and cleared */
		struct flock l = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_len = 10 };

		fcntl(fd, F_SETLK, &l);
		l.l_type = F_UNLCK;
		fcntl(fd, F_SETLK, &l);
	}
	if (fsetxattr(fd, "user.td", "x", 1, 0) == 0) {
		fgetxattr(fd, "user.td", buf, sizeof(buf));
		flistxattr(fd, buf, sizeof(buf));
		fremovexattr(fd, "user.td");
	} else {
		skip(1, "xattrs");
	}
	close(fd);
	rename(a, b);
	link(b, a);
	unlink(a);
	if (symlink(b, a) == 0 && readlink(a, buf, sizeof(buf)) > 0)
		stat(a, &(struct stat){ 0 });
	unlink(a);
	unlink(b);
	snprintf(a, sizeof(a), "%s/d", dir);
	mkdir(a, 0700);
	rmdir(a);
}

static void pipes(void)
{
	int p[2], q[2];
	struct iovec v = { .iov_base = buf, .iov_len = 4096 };

	if (pipe2(p, O_NONBLOCK) || pipe2(q, O_NONBLOCK))
		return;
	for (int i = 0; i < 4; i++) {
		struct pollfd f = { .fd = p[0], .events = POLLIN };

		if (write(p[1], buf, 4096) < 0 || poll(&f, 1, 0) < 0 || read(p[0], buf, 4096) < 0)
			break;
	}
	vmsplice(p[1], &v, 1, 0);
	splice(p[0], NULL, q[1], NULL, 4096, SPLICE_F_NONBLOCK);
	read(q[0], buf, 4096);
	fcntl(p[1], F_SETPIPE_SZ, 1 << 16);
	close(p[0]);
	close(p[1]);
	close(q[0]);
	close(q[1]);
}

/* A descriptor sent over a Unix socket pair. */
static void unix_sockets(void)
{
	int s[2], fd = -1;
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec v = { .iov_base = buf, .iov_len = 1 };
	struct msghdr m = { .msg_iov = &v, .msg_iovlen = 1, .msg_control = cbuf,
			    .msg_controllen = sizeof(cbuf) };
	struct cmsghdr *c;

	if (socketpair(AF_UNIX, SOCK_STREAM, 0, s))
		return;
	c = CMSG_FIRSTHDR(&m);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &s[0], sizeof(int));
	if (sendmsg(s[0], &m, 0) == 1 && recvmsg(s[1], &m, 0) == 1) {
		c = CMSG_FIRSTHDR(&m);
		if (c && c->cmsg_type == SCM_RIGHTS)
			memcpy(&fd, CMSG_DATA(c), sizeof(int));
	}
	if (fd >= 0)
		close(fd);
	close(s[0]);
	close(s[1]);
	if (socketpair(AF_UNIX, SOCK_DGRAM, 0, s))
		return;
	send(s[0], buf, 512, 0);
	recv(s[1], buf, 512, 0);
	close(s[0]);
	close(s[1]);
}

static void inet_sockets(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	int l, c, s, u, one = 1;

	l = socket(AF_INET, SOCK_STREAM, 0);
	if (l < 0)
		return;
	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(l, (struct sockaddr *)&a, sizeof(a)) || listen(l, 4) ||
	    getsockname(l, (struct sockaddr *)&a, &len)) {
		skip(2, "TCP over loopback");
		close(l);
		return;
	}
	c = socket(AF_INET, SOCK_STREAM, 0);
	if (c >= 0 && connect(c, (struct sockaddr *)&a, sizeof(a)) == 0) {
		s = accept(l, NULL, NULL);
		if (s >= 0) {
			for (int i = 0; i < 4; i++)
				if (send(c, buf, 8192, 0) < 0 || recv(s, buf, 8192, MSG_WAITALL) < 0)
					break;
			shutdown(s, SHUT_RDWR);
			close(s);
		}
	} else {
		skip(2, "TCP over loopback");
	}
	if (c >= 0)
		close(c);
	close(l);
	u = socket(AF_INET, SOCK_DGRAM, 0);
	a.sin_port = 0;
	if (u >= 0 && bind(u, (struct sockaddr *)&a, sizeof(a)) == 0 &&
	    getsockname(u, (struct sockaddr *)&a, &len) == 0) {
		sendto(u, buf, 512, 0, (struct sockaddr *)&a, sizeof(a));
		recv(u, buf, 512, 0);
	}
	if (u >= 0)
		close(u);
}

static void events(void)
{
	struct epoll_event ev = { .events = EPOLLIN }, out[4];
	struct itimerspec t = { .it_value = { .tv_nsec = 1000 } };
	sigset_t set;
	int ep, e, tf, sf, in;
	uint64_t n = 1;

	ep = epoll_create1(0);
	e = eventfd(0, EFD_NONBLOCK);
	tf = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK);
	sigemptyset(&set);
	sigaddset(&set, SIGUSR2);
	sigprocmask(SIG_BLOCK, &set, NULL);
	sf = signalfd(-1, &set, SFD_NONBLOCK);
	if (ep >= 0 && e >= 0) {
		ev.data.fd = e;
		epoll_ctl(ep, EPOLL_CTL_ADD, e, &ev);
		write(e, &n, sizeof(n));
		epoll_wait(ep, out, 4, 0);
		read(e, &n, sizeof(n));
		epoll_ctl(ep, EPOLL_CTL_DEL, e, NULL);
	}
	if (tf >= 0) {
		timerfd_settime(tf, 0, &t, NULL);
		usleep(1000);
		read(tf, &n, sizeof(n));
	}
	if (sf >= 0) {
		struct signalfd_siginfo si;

		kill(getpid(), SIGUSR2);
		read(sf, &si, sizeof(si));
	}
	in = inotify_init1(IN_NONBLOCK);
	if (in >= 0) {
		int w = inotify_add_watch(in, dir, IN_ALL_EVENTS);

		if (w >= 0)
			inotify_rm_watch(in, w);
		close(in);
	}
	for (int fd = 0, *f = (int[]){ ep, e, tf, sf }; fd < 4; fd++)
		if (f[fd] >= 0)
			close(f[fd]);
}

static void memory(void)
{
	int fd = memfd_create("syscalls", MFD_CLOEXEC);
	char *p;

	if (fd >= 0) {
		ftruncate(fd, 1 << 20);
		p = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (p != MAP_FAILED) {
			memset(p, 1, 1 << 20);
			munmap(p, 1 << 20);
		}
		close(fd);
	}
	p = mmap(NULL, 4 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p != MAP_FAILED) {
		memset(p, 1, 4 << 20);
		mprotect(p, 1 << 20, PROT_READ);
		madvise(p, 2 << 20, MADV_DONTNEED);
		p = mremap(p, 4 << 20, 8 << 20, MREMAP_MAYMOVE);
		if (p != MAP_FAILED)
			munmap(p, 8 << 20);
	}
}

static void sysv(void)
{
	struct { long type; char text[64]; } m = { .type = 1 };
	int q, s, sh;

	q = msgget(IPC_PRIVATE, 0600);
	if (q < 0) {
		skip(4, "SysV IPC");
		return;
	}
	msgsnd(q, &m, sizeof(m.text), 0);
	msgrcv(q, &m, sizeof(m.text), 0, IPC_NOWAIT);
	msgctl(q, IPC_RMID, NULL);
	s = semget(IPC_PRIVATE, 2, 0600);
	if (s >= 0) {
		struct sembuf op = { .sem_num = 0, .sem_op = 1, .sem_flg = SEM_UNDO };

		semop(s, &op, 1);
		semctl(s, 0, IPC_RMID);
	}
	sh = shmget(IPC_PRIVATE, 1 << 16, 0600);
	if (sh >= 0) {
		void *p = shmat(sh, NULL, 0);

		if (p != (void *)-1)
			shmdt(p);
		shmctl(sh, IPC_RMID, NULL);
	}
}

static void misc(void)
{
	struct utsname u;

	uname(&u);
	syscall(SYS_getrandom, buf, 64, 0);
	for (const char *f = "/proc/self/status\0/proc/self/maps\0/proc/self/mountinfo\0"
			     "/proc/meminfo\0/proc/stat\0/proc/net/dev\0";
	     *f; f += strlen(f) + 1) {
		int fd = open(f, O_RDONLY);

		if (fd >= 0) {
			while (read(fd, buf, sizeof(buf)) > 0)
				;
			close(fd);
		}
	}
}

/* A dump of the links and addresses over rtnetlink. */
static void netlink(void)
{
	struct { struct nlmsghdr h; struct rtgenmsg g; } req = {
		.h = { .nlmsg_len = sizeof(req), .nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP },
		.g = { .rtgen_family = AF_UNSPEC },
	};
	int types[] = { RTM_GETLINK, RTM_GETADDR, RTM_GETROUTE };
	int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);

	if (fd < 0)
		return;
	for (unsigned t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
		req.h.nlmsg_type = types[t];
		req.h.nlmsg_seq = t + 1;
		if (send(fd, &req, sizeof(req), 0) < 0)
			break;
		for (;;) {
			ssize_t n = recv(fd, buf, sizeof(buf), 0);
			struct nlmsghdr *h = (struct nlmsghdr *)buf;

			if (n <= 0 || !NLMSG_OK(h, n) || h->nlmsg_type == NLMSG_DONE ||
			    h->nlmsg_type == NLMSG_ERROR)
				break;
		}
	}
	close(fd);
}

/* A mount namespace of its own, a tmpfs mounted in it and unmounted. */
static void mounts(void)
{
	char m[4096];

	if (unshare(CLONE_NEWNS) || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL)) {
		skip(8, "a mount namespace");
		return;
	}
	snprintf(m, sizeof(m), "%s/m", dir);
	mkdir(m, 0700);
	if (mount("td", m, "tmpfs", 0, "size=1m") == 0) {
		char f[4200];
		int fd;

		snprintf(f, sizeof(f), "%s/f", m);
		fd = open(f, O_RDWR | O_CREAT, 0600);
		if (fd >= 0) {
			write(fd, buf, 4096);
			close(fd);
		}
		umount2(m, MNT_DETACH);
	}
	rmdir(m);
}

static void others(void)
{
	struct sigevent sev = { .sigev_notify = SIGEV_NONE };
	struct mq_attr qa = { .mq_maxmsg = 4, .mq_msgsize = 64 };
	struct { struct file_handle h; unsigned char b[128]; } fh = { .h.handle_bytes = 128 };
	timer_t tm;
	mqd_t q;
	int key, mnt, pfd;

	key = syscall(SYS_add_key, "user", "topdown-syscalls", "x", 1, -2 /* process */);
	if (key >= 0)
		syscall(SYS_keyctl, 3 /* KEYCTL_REVOKE */, key);
	q = mq_open("/topdown-syscalls", O_RDWR | O_CREAT, 0600, &qa);
	if (q != (mqd_t)-1) {
		mq_send(q, buf, 64, 0);
		mq_receive(q, buf, 64, NULL);
		mq_close(q);
		mq_unlink("/topdown-syscalls");
	}
	if (timer_create(CLOCK_MONOTONIC, &sev, &tm) == 0)
		timer_delete(tm);
	if (name_to_handle_at(AT_FDCWD, "/etc", &fh.h, &mnt, 0) == 0) {
		int fd = open_by_handle_at(AT_FDCWD, &fh.h, O_RDONLY);

		if (fd >= 0)
			close(fd);
	}
	pfd = syscall(SYS_pidfd_open, getpid(), 0);
	if (pfd >= 0)
		close(pfd);
}

int main(int argc, char **argv)
{
	sigset_t set;
	char *end;
	long rounds;

	if (argc != 3 || (rounds = strtol(argv[1], &end, 10)) < 1 || *end) {
		fprintf(stderr, "usage: syscalls ROUNDS DIR\n");
		return 2;
	}
	dir = argv[2];
	if (mkdir(dir, 0700) && errno != EEXIST) {
		perror("syscalls: mkdir");
		return 1;
	}
	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	sigprocmask(SIG_BLOCK, &set, NULL);
	printf("syscalls: ready\n");
	fflush(stdout);
	wait_usr1(&set);
	for (long r = 0; r < rounds; r++) {
		files();
		pipes();
		unix_sockets();
		inet_sockets();
		events();
		memory();
		sysv();
		misc();
		netlink();
		mounts();
		others();
	}
	rmdir(dir);
	printf("syscalls: done\n");
	fflush(stdout);
	wait_usr1(&set);
	return 0;
}
