#include "btimer.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

struct lr_btimer {
	uv_poll_t poll; /* first: the close callback gets the struct back */
	int fd;
	bool armed;
	lr_btimer_fn fn;
	void *arg;
};

/* CLOCK_BOOTTIME in ms: monotonic, and unlike CLOCK_MONOTONIC it keeps
 * counting while the machine is suspended, during which leases run out. */
uint64_t lr_btimer_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_BOOTTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Empties the timerfd's expiry count; true if it had fired. One read. */
static bool consume(lr_btimer *t)
{
	uint64_t n;
	ssize_t r;

	do
		r = read(t->fd, &n, sizeof(n));
	while (r < 0 && errno == EINTR);
	return r == (ssize_t)sizeof(n);
}

/* The timerfd is readable: it expired (or was re-armed since, in which
 * case the read finds nothing and we keep waiting). Stops the loop, like
 * every callback a `while (!flag) uv_run(UV_RUN_ONCE)` loop may wait on. */
static void on_readable(uv_poll_t *h, int status, int events)
{
	lr_btimer *t = (lr_btimer *)h;

	(void)status;
	(void)events;
	if (!consume(t))
		return;
	t->armed = false;
	uv_poll_stop(&t->poll);
	uv_stop(h->loop);
	t->fn(t->arg);
}

/* A timerfd on CLOCK_BOOTTIME and a poll handle on it. Costs two
 * syscalls; NULL on failure (errno set). */
lr_btimer *lr_btimer_create(uv_loop_t *loop, lr_btimer_fn fn, void *arg)
{
	lr_btimer *t = calloc(1, sizeof(*t));

	if (!t)
		return NULL;
	t->fn = fn;
	t->arg = arg;
	t->fd = timerfd_create(CLOCK_BOOTTIME, TFD_NONBLOCK | TFD_CLOEXEC);
	if (t->fd < 0)
		goto fail;
	if (uv_poll_init(loop, &t->poll, t->fd) != 0) {
		close(t->fd);
		goto fail;
	}
	return t;
fail:
	free(t);
	return NULL;
}

static void on_closed(uv_handle_t *h)
{
	lr_btimer *t = (lr_btimer *)h;

	close(t->fd);
	free(t);
}

/* Closes the handle; the owner runs the loop once more to free it. */
void lr_btimer_destroy(lr_btimer *t)
{
	if (t)
		uv_close((uv_handle_t *)&t->poll, on_closed);
}

/* (Re)arms the timer to fire at boottime at_ms; a time already past fires
 * on the loop's next iteration. One timerfd_settime, one epoll_ctl. */
bool lr_btimer_arm(lr_btimer *t, uint64_t at_ms)
{
	struct itimerspec its;

	memset(&its, 0, sizeof(its));
	if (!at_ms)
		at_ms = 1; /* an all-zero it_value would disarm */
	its.it_value.tv_sec = (time_t)(at_ms / 1000);
	its.it_value.tv_nsec = (long)(at_ms % 1000) * 1000000;
	if (timerfd_settime(t->fd, TFD_TIMER_ABSTIME, &its, NULL) != 0)
		return false;
	t->armed = true;
	return uv_poll_start(&t->poll, UV_READABLE, on_readable) == 0;
}

void lr_btimer_disarm(lr_btimer *t)
{
	struct itimerspec its;

	memset(&its, 0, sizeof(its));
	timerfd_settime(t->fd, 0, &its, NULL);
	consume(t);
	t->armed = false;
	uv_poll_stop(&t->poll);
}

bool lr_btimer_armed(const lr_btimer *t)
{
	return t->armed;
}
