/*
 * lrclock.so - an LD_PRELOAD shim that shows lockrun what a suspend looks
 * like, slows its fork, and sets a host's clock wrong. Test helper only,
 * never installed.
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
 *
 * The constructor removes LD_PRELOAD and these variables from the
 * environment, so the command lockrun runs does not inherit the shim.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define NCLOCKS 16

typedef pid_t (*fork_fn)(void);

static char *freeze_file;
static long fork_delay_ms;
static long shift_s;
static long boot_scale = 1;
static int64_t boot_start; /* the true CLOCK_BOOTTIME when the shim loaded */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

/* Per clock: whether it stands still, its real reading when it stopped,
 * and how much time it has lost to standing still so far. */
static struct {
	bool frozen;
	int64_t stopped_at;
	int64_t lost;
} st[NCLOCKS];

__attribute__((constructor)) static void lrclock_init(void)
{
	const char *f = getenv("LR_CLOCK_FREEZE");
	const char *d = getenv("LR_CLOCK_FORK_DELAY");
	const char *sh = getenv("LR_CLOCK_SHIFT");
	const char *bs = getenv("LR_CLOCK_BOOT_SCALE");

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
	unsetenv("LR_CLOCK_FREEZE");
	unsetenv("LR_CLOCK_FORK_DELAY");
	unsetenv("LR_CLOCK_SHIFT");
	unsetenv("LR_CLOCK_BOOT_SCALE");
	unsetenv("LD_PRELOAD");
}

static bool is_monotonic(clockid_t id)
{
	return id == CLOCK_MONOTONIC || id == CLOCK_MONOTONIC_COARSE || id == CLOCK_MONOTONIC_RAW;
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
