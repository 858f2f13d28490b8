#include "request.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

/* 32 hex digits from the kernel's random pool: ids nobody can guess. */
static void new_id(char out[33])
{
	unsigned char b[16];
	size_t got = 0;

	while (got < sizeof(b)) {
		ssize_t n = getrandom(b + got, sizeof(b) - got, 0);
		if (n > 0)
			got += (size_t)n;
		else if (errno != EINTR)
			break;
	}
	for (size_t i = 0; i < sizeof(b); i++)
		snprintf(out + 2 * i, 3, "%02x", b[i]);
}

/* Called once per run, before anything is added. Costs two getrandom
 * calls and one allocation. */
bool lr_request_init(struct lr_request *rq, uv_loop_t *loop, lr_db *db,
                     const struct lr_owner *owner, unsigned ttl_ms)
{
	memset(rq, 0, sizeof(*rq));
	rq->loop = loop;
	rq->db = db;
	rq->owner = *owner;
	rq->ttl_ms = ttl_ms;
	new_id(rq->request_id);
	new_id(rq->lease);
	rq->timer = malloc(sizeof(*rq->timer));
	if (!rq->timer)
		return false;
	uv_timer_init(loop, rq->timer);
	rq->timer->data = rq;
	return true;
}

/* After a grant handed to us expired unclaimed: the old lease id is
 * spent (the server will not grant under it again). */
void lr_request_new_lease(struct lr_request *rq)
{
	new_id(rq->lease);
}

static void free_handle(uv_handle_t *h)
{
	free(h);
}

void lr_request_finish(struct lr_request *rq)
{
	free(rq->items);
	if (rq->timer)
		uv_close((uv_handle_t *)rq->timer, free_handle);
	memset(rq, 0, sizeof(*rq));
}

/* Keeps the list sorted by name, the order rows are locked in, so that
 * two requests for the same resources never lock them crosswise. */
bool lr_request_add(struct lr_request *rq, const struct lr_item *it, char *err, size_t errlen)
{
	struct lr_item *grown;
	size_t i;

	for (i = 0; i < rq->nitems; i++) {
		if (strcmp(rq->items[i].name, it->name) == 0) {
			snprintf(err, errlen, "'%s' is named more than once",
			         lr_item_display_name(it));
			return false;
		}
	}
	grown = realloc(rq->items, (rq->nitems + 1) * sizeof(*grown));
	if (!grown) {
		snprintf(err, errlen, "out of memory");
		return false;
	}
	rq->items = grown;
	for (i = rq->nitems; i > 0 && strcmp(rq->items[i - 1].name, it->name) > 0; i--)
		rq->items[i] = rq->items[i - 1];
	rq->items[i] = *it;
	rq->nitems++;
	if (it->kind == LR_KIND_NAMED)
		rq->nnamed++;
	else
		rq->ntable++;
	return true;
}

/* The table item (not a named lock) of that resource name, or NULL: how
 * an answer row of the procedures is matched to what was asked. */
struct lr_item *lr_request_find(struct lr_request *rq, const char *name)
{
	for (size_t i = 0; i < rq->nitems; i++)
		if (rq->items[i].kind != LR_KIND_NAMED && strcmp(rq->items[i].name, name) == 0)
			return &rq->items[i];
	return NULL;
}

void lr_request_set_db_error(struct lr_request *rq, lr_db *db)
{
	snprintf(rq->err, sizeof(rq->err), "%s", lr_db_error(db));
}

/* The pacing clock of waits and retries. Lease deadlines are not kept on
 * it (see btimer): it stops during a suspend. */
uint64_t lr_request_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Uniform in [ms/2, 3ms/2): waiters that started together drift apart. */
unsigned lr_request_jitter(unsigned ms)
{
	unsigned r;

	if (getrandom(&r, sizeof(r), GRND_NONBLOCK) != sizeof(r))
		r = (unsigned)rand();
	return ms / 2 + (ms ? r % ms : 0);
}

static void on_timer(uv_timer_t *t)
{
	struct lr_request *rq = t->data;
	rq->timer_fired = true;
	uv_stop(t->loop);
}

bool lr_request_canceled(const struct lr_request *rq)
{
	return rq->cancel && *rq->cancel;
}

/* Sleeps on the loop (signals and children are still served) for ms, or
 * until the cancel flag is raised. */
void lr_request_nap(struct lr_request *rq, unsigned ms)
{
	rq->timer_fired = false;
	uv_timer_start(rq->timer, on_timer, ms, 0);
	while (!rq->timer_fired && !lr_request_canceled(rq))
		uv_run(rq->loop, UV_RUN_ONCE);
	uv_timer_stop(rq->timer);
}
