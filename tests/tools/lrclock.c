/*
 * lrclock.so - an LD_PRELOAD shim that shows lockrun what a suspend looks
 * like, slows its fork, sets a host's clock wrong, and makes its clocks
 * run fast or slow. Test helper only, never installed.
 *
 *   LR_CLOCK_FREEZE=FILE     while FILE exists, CLOCK_MONOTONIC (and its
 *                            _COARSE and _RAW kin) stand still; once FILE
 *                            is gone they run on from where they stood.
 *                            CLOCK_BOOTTIME and CLOCK_REALTIME are left
 *                            alone. That is what a process sees across a
 *                            suspend: libuv's timers (on CLOCK_MONOTONIC)
 *                            fall behind while boottime runs on.
 *   LR_CLOCK_FORK_DELAY=MS   every fork() or vfork() first sleeps MS ms: a
 *                            slow start of the command.
 *   LR_CLOCK_SHIFT=S         CLOCK_REALTIME reads S seconds (an integer,
 *                            may be negative) off the true time: a host
 *                            whose clock is wrong.
 *   LR_CLOCK_BOOT_SCALE=N    CLOCK_BOOTTIME runs N times as fast as it
 *                            does (an integer, 1-3600), from the moment
 *                            the shim loads: a minute of lockrun's
 *                            boottime passes in 60/N seconds. Only for
 *                            runs that hold no lease (a waiter): leases
 *                            are timed on CLOCK_BOOTTIME.
 *   LR_CLOCK_RATE=R          CLOCK_MONOTONIC and CLOCK_BOOTTIME (and
 *                            their _COARSE and _RAW kin) run R times as
 *                            fast as they do (a decimal, 0.5-2, at most
 *                            9 places: 0.98, 1.005), from the moment the
 *                            shim loads, and so does every timed wait:
 *                            a wait of d as the process measures it
 *                            lasts d/R. That is epoll_wait, epoll_pwait,
 *                            epoll_pwait2, poll, ppoll, select, pselect,
 *                            nanosleep, clock_nanosleep (relative on any
 *                            clock, absolute on these), and timerfds on
 *                            these clocks (relative or TFD_TIMER_ABSTIME,
 *                            their intervals and timerfd_gettime). R < 1
 *                            is a host whose clock runs slow: its
 *                            deadlines fire late. Empty: no rate. A bad
 *                            R: a one-line message naming the variable,
 *                            exit 125.
 *                            LR_CLOCK_FREEZE and LR_CLOCK_BOOT_SCALE
 *                            apply on top of the rate, to readings only.
 *
 * The constructor removes LD_PRELOAD and these variables from the
 * environment, so the command lockrun runs does not inherit the shim.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define NCLOCKS 16
#define NFDS    65536
#define NS      1000000000LL
/* Waits and times past this many seconds are left as they are: scaling
 * them could overflow, and no test waits 30 years. */
#define MAX_S 1000000000

typedef pid_t (*fork_fn)(void);

static char *freeze_file;
static long fork_delay_ms;
static long shift_s;
static long boot_scale = 1;
static int64_t boot_start; /* the true CLOCK_BOOTTIME when the shim loaded */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

/* LR_CLOCK_RATE in billionths (NS: the true rate), and each scaled
 * clock's true reading when the shim loaded, from which it runs at it. */
static int64_t rate = NS;
static int64_t rate_from[NCLOCKS];
/* The clock of each timerfd, plus one (0: not a timerfd of ours). */
static unsigned char tfd_clock[NFDS];

/* Per clock: whether it stands still, its real reading when it stopped,
 * and how much time it has lost to standing still so far. */
static struct {
	bool frozen;
	int64_t stopped_at;
	int64_t lost;
} st[NCLOCKS];

/* The definition of the enclosing wrapper's function that comes after
 * ours (glibc's), looked up once, as next_. */
#define NEXT(name)                                                                                 \
	static __typeof__(&name) next_;                                                            \
	if (!next_)                                                                                \
	*(void **)&next_ = dlsym(RTLD_NEXT, #name)

static bool is_monotonic(clockid_t id)
{
	return id == CLOCK_MONOTONIC || id == CLOCK_MONOTONIC_COARSE || id == CLOCK_MONOTONIC_RAW;
}

/* Whether LR_CLOCK_RATE applies to clock id. */
static bool is_rated(clockid_t id)
{
	return rate != NS && (is_monotonic(id) || id == CLOCK_BOOTTIME);
}

/* LR_CLOCK_RATE's value in billionths: a decimal with at most 9 places,
 * from 0.5 to 2. False if it is anything else. */
static bool parse_rate(const char *v, int64_t *out)
{
	int64_t whole = 0, frac = 0;
	int places = 0;

	if (*v < '0' || *v > '9')
		return false;
	for (; *v >= '0' && *v <= '9'; v++)
		if ((whole = whole * 10 + (*v - '0')) > 2)
			return false;
	if (*v == '.') {
		if (*++v < '0' || *v > '9')
			return false;
		for (; *v >= '0' && *v <= '9'; v++, places++)
			frac = frac * 10 + (*v - '0');
	}
	if (*v || places > 9)
		return false;
	while (places++ < 9)
		frac *= 10;
	*out = whole * NS + frac;
	return *out >= NS / 2 && *out <= 2 * NS;
}

/* Takes LR_CLOCK_RATE: notes where each scaled clock starts from, then
 * turns the rate on. A bad value ends the process: a test that asked for
 * a drift must not run without one. */
static void init_rate(const char *v)
{
	static const clockid_t ids[] = {CLOCK_MONOTONIC, CLOCK_MONOTONIC_COARSE,
	                                CLOCK_MONOTONIC_RAW, CLOCK_BOOTTIME};
	struct timespec ts;
	int64_t r;

	if (!parse_rate(v, &r)) {
		dprintf(2, "lrclock: LR_CLOCK_RATE must be a decimal from 0.5 to 2 "
		           "with at most 9 places\n");
		_exit(125);
	}
	for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++)
		if (syscall(SYS_clock_gettime, ids[i], &ts) == 0)
			rate_from[ids[i]] = (int64_t)ts.tv_sec * NS + ts.tv_nsec;
	rate = r;
}

__attribute__((constructor)) static void lrclock_init(void)
{
	const char *f = getenv("LR_CLOCK_FREEZE");
	const char *d = getenv("LR_CLOCK_FORK_DELAY");
	const char *sh = getenv("LR_CLOCK_SHIFT");
	const char *bs = getenv("LR_CLOCK_BOOT_SCALE");
	const char *r = getenv("LR_CLOCK_RATE");

	if (f && *f)
		freeze_file = strdup(f);
	if (d)
		fork_delay_ms = strtol(d, NULL, 10);
	if (sh)
		shift_s = strtol(sh, NULL, 10);
	if (bs) {
		struct timespec ts;
		long n = strtol(bs, NULL, 10);
		clock_gettime(CLOCK_BOOTTIME, &ts); /* unscaled: the scale is still 1 */
		boot_start = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
		boot_scale = n >= 1 && n <= 3600 ? n : 1;
	}
	if (r && *r)
		init_rate(r);
	unsetenv("LR_CLOCK_FREEZE");
	unsetenv("LR_CLOCK_FORK_DELAY");
	unsetenv("LR_CLOCK_SHIFT");
	unsetenv("LR_CLOCK_BOOT_SCALE");
	unsetenv("LR_CLOCK_RATE");
	unsetenv("LD_PRELOAD");
}

static int64_t ns_of(const struct timespec *ts)
{
	return (int64_t)ts->tv_sec * NS + ts->tv_nsec;
}

static struct timespec ts_of(int64_t ns)
{
	struct timespec ts = {(time_t)(ns / NS), (long)(ns % NS)};

	return ts;
}

/* a * b / c, rounded up if up, for 0 <= a <= MAX_S * NS and b, c from
 * NS / 2 to 2 * NS: no step overflows 64 bits. */
static int64_t mul_div(int64_t a, int64_t b, int64_t c, bool up)
{
	return a / c * b + (a % c * b + (up ? c - 1 : 0)) / c;
}

/* A span of ns as the process sees it, in true ns (rounded up: a wait
 * never ends early in the process's view), and a true span as the
 * process sees it. */
static int64_t true_span(int64_t ns)
{
	return mul_div(ns, NS, rate, true);
}

static int64_t seen_span(int64_t ns)
{
	return mul_div(ns, rate, NS, false);
}

/* Whether a timespec is a span or time the rate may scale: valid and
 * short of MAX_S. Others go to the kernel as they are, to be judged. */
static bool scalable(const struct timespec *ts)
{
	return rate != NS && ts && ts->tv_sec >= 0 && ts->tv_sec < MAX_S && ts->tv_nsec >= 0 &&
	       ts->tv_nsec < NS;
}

/* A relative wait in true time, in *buf; t itself if it is not scaled. */
static const struct timespec *true_wait(const struct timespec *t, struct timespec *buf)
{
	if (!scalable(t))
		return t;
	*buf = ts_of(true_span(ns_of(t)));
	return buf;
}

/* What remains of a wait (true time, from the kernel), as the process
 * sees it; in place. */
static void seen_wait(struct timespec *t)
{
	if (scalable(t))
		*t = ts_of(seen_span(ns_of(t)));
}

/* A timeout in ms (negative: none) in true ms, rounded up. */
static int true_ms(int ms)
{
	int64_t t;

	if (ms <= 0 || rate == NS)
		return ms;
	t = (true_span((int64_t)ms * 1000000) + 999999) / 1000000;
	return t > INT_MAX ? INT_MAX : (int)t;
}

/* An absolute time on rated clock id, as the process sees it, to the true
 * time at which that clock shows it. A time from before the shim loaded
 * is past either way and stays. */
static struct timespec true_time(clockid_t id, const struct timespec *at)
{
	int64_t a = ns_of(at), from = rate_from[id];

	if (!scalable(at) || a <= from)
		return *at;
	return ts_of(from + true_span(a - from));
}

/* The true reading is the kernel's, by the system call, not glibc's
 * clock_gettime found with dlsym: on glibc 2.41 (Debian 13) a first dlsym
 * frees its error buffer, AddressSanitizer's free reads a clock, and that
 * read came back here into a second dlsym, which freed the buffer again
 * (a double free that killed lockrun under ASan). */
int clock_gettime(clockid_t id, struct timespec *ts)
{
	int64_t now, shown;
	int rc;

	rc = (int)syscall(SYS_clock_gettime, id, ts);
	if (rc == 0 && id == CLOCK_REALTIME)
		ts->tv_sec += (time_t)shift_s;
	if (rc == 0 && is_rated(id) && ns_of(ts) > rate_from[id])
		*ts = ts_of(rate_from[id] + seen_span(ns_of(ts) - rate_from[id]));
	if (rc == 0 && id == CLOCK_BOOTTIME && boot_scale > 1) {
		int64_t t = (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec;
		t = boot_start + (t - boot_start) * boot_scale;
		ts->tv_sec = (time_t)(t / 1000000000);
		ts->tv_nsec = (long)(t % 1000000000);
	}
	if (rc != 0 || !freeze_file || !is_monotonic(id) || id < 0 || id >= NCLOCKS)
		return rc;
	now = (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec;
	pthread_mutex_lock(&mu);
	if (access(freeze_file, F_OK) == 0) {
		if (!st[id].frozen) {
			st[id].frozen = true;
			st[id].stopped_at = now;
		}
		shown = st[id].stopped_at - st[id].lost;
	} else {
		if (st[id].frozen) {
			st[id].frozen = false;
			st[id].lost += now - st[id].stopped_at;
		}
		shown = now - st[id].lost;
	}
	pthread_mutex_unlock(&mu);
	ts->tv_sec = (time_t)(shown / 1000000000);
	ts->tv_nsec = (long)(shown % 1000000000);
	return rc;
}

pid_t fork(void)
{
	static fork_fn real;

	if (!real)
		*(void **)&real = dlsym(RTLD_NEXT, "fork");
	if (fork_delay_ms > 0) {
		struct timespec d = {fork_delay_ms / 1000, (fork_delay_ms % 1000) * 1000000};
		while (nanosleep(&d, &d) != 0)
			;
	}
	return real();
}

/* lockrun spawns with vfork, which no wrapper can call on a caller's
 * behalf (the child would return into a frame the parent then reuses).
 * A fork is a valid vfork, as POSIX allows, and it takes the delay. */
pid_t vfork(void)
{
	return fork();
}

/*
 * The timed waits, for LR_CLOCK_RATE: each takes its timeout as the
 * process sees it to true time and calls glibc's (looked up once by
 * dlsym). Without a rate they pass everything on as it is. No extra
 * system call.
 */
int epoll_wait(int fd, struct epoll_event *ev, int n, int ms)
{
	NEXT(epoll_wait);
	return next_(fd, ev, n, true_ms(ms));
}

int epoll_pwait(int fd, struct epoll_event *ev, int n, int ms, const sigset_t *mask)
{
	NEXT(epoll_pwait);
	return next_(fd, ev, n, true_ms(ms), mask);
}

int epoll_pwait2(int fd, struct epoll_event *ev, int n, const struct timespec *t,
                 const sigset_t *mask)
{
	struct timespec buf;

	NEXT(epoll_pwait2);
	return next_(fd, ev, n, true_wait(t, &buf), mask);
}

int poll(struct pollfd *fds, nfds_t n, int ms)
{
	NEXT(poll);
	return next_(fds, n, true_ms(ms));
}

int ppoll(struct pollfd *fds, nfds_t n, const struct timespec *t, const sigset_t *mask)
{
	struct timespec buf;

	NEXT(ppoll);
	return next_(fds, n, true_wait(t, &buf), mask);
}

/* Linux's select leaves what remains of the timeout in *tv: taken back
 * to the process's view. */
int select(int n, fd_set *r, fd_set *w, fd_set *e, struct timeval *tv)
{
	struct timespec t, buf;
	struct timeval tt;
	int rc;

	NEXT(select);
	if (!tv)
		return next_(n, r, w, e, tv);
	t.tv_sec = tv->tv_sec;
	t.tv_nsec = tv->tv_usec * 1000;
	if (!scalable(&t))
		return next_(n, r, w, e, tv);
	t = *true_wait(&t, &buf);
	tt.tv_sec = t.tv_sec + (t.tv_nsec > 999999000); /* up: never early */
	tt.tv_usec = t.tv_nsec > 999999000 ? 0 : (t.tv_nsec + 999) / 1000;
	rc = next_(n, r, w, e, &tt);
	t.tv_sec = tt.tv_sec;
	t.tv_nsec = tt.tv_usec * 1000;
	seen_wait(&t);
	tv->tv_sec = t.tv_sec;
	tv->tv_usec = t.tv_nsec / 1000;
	return rc;
}

int pselect(int n, fd_set *r, fd_set *w, fd_set *e, const struct timespec *t, const sigset_t *mask)
{
	struct timespec buf;

	NEXT(pselect);
	return next_(n, r, w, e, true_wait(t, &buf), mask);
}

int nanosleep(const struct timespec *req, struct timespec *rem)
{
	struct timespec buf;
	int rc;

	NEXT(nanosleep);
	rc = next_(true_wait(req, &buf), rem);
	if (rc != 0 && errno == EINTR && rem)
		seen_wait(rem);
	return rc;
}

/* Relative sleeps on any clock are spans; absolute ones are scaled on a
 * rated clock only. */
int clock_nanosleep(clockid_t id, int flags, const struct timespec *req, struct timespec *rem)
{
	struct timespec buf;
	int rc;

	NEXT(clock_nanosleep);
	if (flags & TIMER_ABSTIME) {
		if (is_rated(id) && req) {
			buf = true_time(id, req);
			req = &buf;
		}
		return next_(id, flags, req, rem);
	}
	rc = next_(id, flags, true_wait(req, &buf), rem);
	if (rc == EINTR && rem)
		seen_wait(rem);
	return rc;
}

/* Notes each timerfd's clock, for timerfd_settime and _gettime. */
int timerfd_create(clockid_t id, int flags)
{
	int fd;

	NEXT(timerfd_create);
	fd = next_(id, flags);
	if (fd >= 0 && fd < NFDS)
		tfd_clock[fd] = id >= 0 && id < NCLOCKS ? (unsigned char)(id + 1) : 0;
	return fd;
}

/* The rated clock of timerfd fd, or -1. */
static clockid_t rated_timer(int fd)
{
	clockid_t id = fd >= 0 && fd < NFDS ? (clockid_t)tfd_clock[fd] - 1 : -1;

	return is_rated(id) ? id : -1;
}

/* A timer's setting as the kernel keeps it (true time, relative), as the
 * process sees it; in place. */
static void seen_timer(struct itimerspec *it)
{
	seen_wait(&it->it_value);
	seen_wait(&it->it_interval);
}

int timerfd_settime(int fd, int flags, const struct itimerspec *nv, struct itimerspec *old)
{
	clockid_t id = rated_timer(fd);
	struct itimerspec t, buf;
	int rc;

	NEXT(timerfd_settime);
	if (id < 0 || !nv)
		return next_(fd, flags, nv, old);
	t = *nv;
	if (nv->it_value.tv_sec || nv->it_value.tv_nsec) /* all zero disarms */
		t.it_value = flags & TFD_TIMER_ABSTIME ? true_time(id, &nv->it_value)
		                                       : *true_wait(&nv->it_value, &buf.it_value);
	t.it_interval = *true_wait(&nv->it_interval, &buf.it_interval);
	rc = next_(fd, flags, &t, old);
	if (rc == 0 && old)
		seen_timer(old);
	return rc;
}

int timerfd_gettime(int fd, struct itimerspec *cur)
{
	int rc;

	NEXT(timerfd_gettime);
	rc = next_(fd, cur);
	if (rc == 0 && rated_timer(fd) >= 0)
		seen_timer(cur);
	return rc;
}
