/* F_OFD_SETLK and F_OFD_SETLKW. */
#define _GNU_SOURCE
#include "prequeue.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "duration.h"
#include "log.h"
#include "strbuf.h"

struct lr_prequeue {
	uv_loop_t *loop;
	int fd;
	char path[PATH_MAX];
	pthread_t thread;
	bool thread_running;   /* started and not joined */
	atomic_bool locked;    /* the thread got the lock */
	atomic_int lock_errno; /* the thread's fcntl failed with this (0: none) */
	uv_async_t *async;     /* the thread is done */
	uv_timer_t *timer;     /* the deadline */
	bool timer_fired;
	uint64_t waited_ms; /* behind other runs; 0 if the queue was free */
	dev_t dev;          /* the file's identity, as /proc/locks names it */
	ino_t ino;
	char lock_id[64];     /* "MAJ:MIN:INODE" as /proc/locks names our lock */
	unsigned behind;      /* runs of this host blocked on our file lock */
	uint64_t behind_read; /* CLOCK_MONOTONIC ms of the last count; 0: never */
	char err[PATH_MAX + 100];
};

/*
 * The text that names a request's queue: the database (hosts, port,
 * socket, schema, account, option file), then each item as kind, name and
 * count, in the request's order (sorted by name). Keys (--id) never wait
 * and are left out, so that runs that differ only in their key share a
 * queue. NULL when nothing in the request waits, or out of memory. Runs
 * whose texts differ never share a queue; runs whose texts match ask for
 * the same thing, so while one of them waits the others would too.
 */
char *lr_prequeue_key(const struct lr_item *items, size_t nitems, const struct lr_db_params *db)
{
	struct lr_sb sb;
	size_t waited = 0;
	char *key = NULL;

	lr_sb_init(&sb);
	lr_sb_printf(&sb, "database");
	for (size_t i = 0; i < db->nhosts; i++)
		lr_sb_printf(&sb, " %s", db->hosts[i]);
	lr_sb_printf(&sb, " port=%u socket=%s schema=%s user=%s options=%s[%s]\n", db->port,
	             db->socket ? db->socket : "", db->database ? db->database : "",
	             db->user ? db->user : "", db->option_file ? db->option_file : "",
	             db->option_group ? db->option_group : "");
	for (size_t i = 0; i < nitems; i++) {
		if (items[i].kind == LR_KIND_KEY)
			continue;
		lr_sb_printf(&sb, "%s %s %u\n",
		             items[i].kind == LR_KIND_READ    ? "read"
		             : items[i].kind == LR_KIND_WRITE ? "write"
		                                              : lr_kind_name(items[i].kind),
		             items[i].name, items[i].count);
		waited++;
	}
	if (waited && !sb.oom)
		key = strdup(lr_sb_str(&sb));
	lr_sb_finish(&sb);
	return key;
}

/* FNV-1a, 64 bits: a file name per key. A collision only makes two
 * requests share a queue, which costs waiting, never correctness. */
static uint64_t hash(const char *s)
{
	uint64_t h = 14695981039346656037ULL;

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ULL;
	return h;
}

/*
 * The directory of the queue files: the configured one, else /run/lockrun
 * for root, else $XDG_RUNTIME_DIR/lockrun, else /tmp/lockrun-UID. Made if
 * missing (mode 0700). It must be a directory of this user that nobody
 * else may write to: another user who could create or replace the files
 * could hold back our waiters. Costs a mkdir and an lstat.
 */
static bool pick_dir(const char *dir, char *buf, size_t n, char *err, size_t errlen)
{
	const char *xdg = getenv("XDG_RUNTIME_DIR");
	uid_t uid = geteuid();
	struct stat st;
	int len;

	if (dir)
		len = snprintf(buf, n, "%s", dir);
	else if (uid == 0)
		len = snprintf(buf, n, "/run/lockrun");
	else if (xdg && xdg[0] == '/')
		len = snprintf(buf, n, "%s/lockrun", xdg);
	else
		len = snprintf(buf, n, "/tmp/lockrun-%u", (unsigned)uid);
	if (len < 0 || (size_t)len >= n - 32) {
		snprintf(err, errlen, "directory name too long");
		return false;
	}
	if (mkdir(buf, 0700) != 0 && errno != EEXIST) {
		snprintf(err, errlen, "cannot make %s: %s", buf, strerror(errno));
		return false;
	}
	if (lstat(buf, &st) != 0) {
		snprintf(err, errlen, "%s: %s", buf, strerror(errno));
		return false;
	}
	if (!S_ISDIR(st.st_mode) || st.st_uid != uid || (st.st_mode & 022)) {
		snprintf(err, errlen,
		         "%s is not a directory of this user that only it may write to", buf);
		return false;
	}
	return true;
}

/*
 * Opens the queue file of this key under dir (NULL: the default), made on
 * first use with the key written into it for whoever looks. The file
 * stays: removing it could split a queue in two. Not waiting yet. NULL
 * with the reason in err when the host's queue cannot be used. Costs a
 * mkdir, an lstat, an open and an fstat (and a write, once per file).
 */
lr_prequeue *lr_prequeue_open(uv_loop_t *loop, const char *dir, const char *key, char *err,
                              size_t errlen)
{
	lr_prequeue *pq = calloc(1, sizeof(*pq));
	size_t len;
	struct stat st;

	if (!pq) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	pq->loop = loop;
	pq->fd = -1;
	if (!pick_dir(dir, pq->path, sizeof(pq->path), err, errlen))
		goto fail;
	len = strlen(pq->path);
	snprintf(pq->path + len, sizeof(pq->path) - len, "/%016llx.lock",
	         (unsigned long long)hash(key));
	/* Close-on-exec: the command must not inherit our place. */
	pq->fd = open(pq->path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (pq->fd < 0 || fstat(pq->fd, &st) != 0) {
		snprintf(err, errlen, "cannot open %s: %s", pq->path, strerror(errno));
		goto fail;
	}
	pq->dev = st.st_dev;
	pq->ino = st.st_ino;
	if (st.st_size == 0 && pwrite(pq->fd, key, strlen(key), 0) < 0)
		lr_log_debug("cannot write %s: %s", pq->path, strerror(errno));
	lr_log_debug("host queue: %s", pq->path);
	return pq;
fail:
	lr_prequeue_destroy(pq);
	return NULL;
}

/* The whole file, exclusively, as an open file description lock: owned by
 * our descriptor (not by the process, as a POSIX lock would be), and
 * released by its close, or by our death. */
static int file_lock(int fd, int cmd)
{
	struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};

	return fcntl(fd, cmd, &fl);
}

/* The thread that waits in the kernel for the file lock. fcntl(F_OFD_SETLKW)
 * is a cancellation point: lr_prequeue_wait cancels the thread to stop
 * waiting. Once fcntl has returned, nothing may cancel it: uv_async_send
 * writes (a cancellation point too), and a thread cancelled inside it
 * would leave the handle marked busy, and uv_close spinning forever. It
 * blocks every signal, so that they reach the loop's thread. */
static void *locker(void *arg)
{
	lr_prequeue *pq = arg;
	int rc;

	do
		rc = file_lock(pq->fd, F_OFD_SETLKW);
	while (rc != 0 && errno == EINTR);
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
	if (rc == 0)
		atomic_store(&pq->locked, true);
	else
		pq->lock_errno = errno;
	uv_async_send(pq->async);
	return NULL;
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void on_async(uv_async_t *a)
{
	uv_stop(a->loop);
}

static void on_deadline(uv_timer_t *t)
{
	lr_prequeue *pq = t->data;

	pq->timer_fired = true;
	uv_stop(t->loop);
}

static void free_handle(uv_handle_t *h)
{
	free(h);
}

/* Starts the locker thread with every signal blocked (it inherits our
 * mask, which is put back at once). */
static bool start_locker(lr_prequeue *pq)
{
	sigset_t all, old;
	int rc;

	pq->async = malloc(sizeof(*pq->async));
	pq->timer = malloc(sizeof(*pq->timer));
	if (!pq->async || !pq->timer) {
		free(pq->async);
		free(pq->timer);
		pq->async = NULL;
		pq->timer = NULL;
		snprintf(pq->err, sizeof(pq->err), "out of memory");
		return false;
	}
	uv_async_init(pq->loop, pq->async, on_async);
	uv_timer_init(pq->loop, pq->timer);
	pq->timer->data = pq;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(&pq->thread, NULL, locker, pq);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0) {
		snprintf(pq->err, sizeof(pq->err), "cannot start a thread: %s", strerror(rc));
		return false;
	}
	pq->thread_running = true;
	return true;
}

/* Ends the locker thread (cancelled if still waiting) and closes the
 * loop's handles. A lock it got meanwhile stays with our descriptor. */
static void stop_locker(lr_prequeue *pq)
{
	if (pq->thread_running) {
		if (!atomic_load(&pq->locked))
			pthread_cancel(pq->thread);
		pthread_join(pq->thread, NULL);
		pq->thread_running = false;
	}
	if (pq->async)
		uv_close((uv_handle_t *)pq->async, free_handle);
	if (pq->timer)
		uv_close((uv_handle_t *)pq->timer, free_handle);
	pq->async = NULL;
	pq->timer = NULL;
}

/*
 * Waits to be the head of the host's queue, for up to *wait_s seconds (< 0:
 * forever) or until the cancel flag, which signals raise: the loop keeps
 * serving them, as a thread waits in the kernel for the lock. *wait_s is
 * then what is left of the wait. Which waiter the kernel lets in next is
 * not promised; Linux (since 5.0) queues the waiters of one file lock
 * behind each other, so in practice they go in the order they came. A
 * free queue costs one fcntl; a wait, a thread.
 */
enum lr_pq_wait lr_prequeue_wait(lr_prequeue *pq, double *wait_s, const volatile bool *cancel)
{
	uint64_t start = now_ms(), now;
	uint64_t deadline = *wait_s < 0 ? UINT64_MAX : start + lr_duration_round(*wait_s * 1000.0);
	enum lr_pq_wait w;

	if (file_lock(pq->fd, F_OFD_SETLK) == 0)
		return LR_PQ_HEAD;
	if (errno != EAGAIN && errno != EACCES) {
		snprintf(pq->err, sizeof(pq->err), "cannot lock %s: %s", pq->path, strerror(errno));
		return LR_PQ_FAILED;
	}
	lr_log_info("waiting behind another run of this host that wants the same locks (%s)",
	            pq->path);
	if (!start_locker(pq)) {
		w = LR_PQ_FAILED;
		goto out;
	}
	if (deadline != UINT64_MAX) {
		uv_update_time(pq->loop);
		uv_timer_start(pq->timer, on_deadline, deadline > start ? deadline - start : 0, 0);
	}
	while (!atomic_load(&pq->locked) && !pq->lock_errno && !pq->timer_fired &&
	       !(cancel && *cancel))
		uv_run(pq->loop, UV_RUN_ONCE);
	/* Got it: that wins over a deadline or a signal that came with it
	 * (the caller checks for a signal again). */
	if (atomic_load(&pq->locked))
		w = LR_PQ_HEAD;
	else if (cancel && *cancel)
		w = LR_PQ_CANCELED;
	else if (pq->timer_fired)
		w = LR_PQ_TIMEOUT;
	else
		w = LR_PQ_FAILED;
out:
	stop_locker(pq);
	if (w == LR_PQ_FAILED && !pq->err[0])
		snprintf(pq->err, sizeof(pq->err), "cannot lock %s: %s", pq->path,
		         strerror(pq->lock_errno));
	now = now_ms();
	pq->waited_ms = now - start;
	if (*wait_s > 0)
		*wait_s = now >= deadline ? 0 : (double)(deadline - now) / 1000.0;
	return w;
}

/* How long lr_prequeue_wait waited behind other runs (0: it did not). */
uint64_t lr_prequeue_waited_ms(const lr_prequeue *pq)
{
	return pq->waited_ms;
}

/* Whether tok (up to a blank) is a lock's "MAJ:MIN:INODE", as
 * /proc/locks and fdinfo print it: hex, hex, decimal. */
static bool is_lock_id(const char *tok, size_t len)
{
	size_t colons = 0;

	for (size_t i = 0; i < len; i++) {
		if (tok[i] == ':')
			colons++;
		else if (!(tok[i] >= '0' && tok[i] <= '9') && !(tok[i] >= 'a' && tok[i] <= 'f'))
			return false;
	}
	return colons == 2 && len >= 5;
}

/* The first token of p that is a lock id, and its length in *len; NULL if
 * none. Every other field of these lines (OFDLCK, ADVISORY, WRITE, -1, 0,
 * EOF, the pid) is not one. */
static const char *next_lock_id(const char *p, size_t *len)
{
	while (*p) {
		p += strspn(p, " \t\n");
		*len = strcspn(p, " \t\n");
		if (*len && is_lock_id(p, *len))
			return p;
		p += *len;
	}
	return NULL;
}

/*
 * Counts, in the text of /proc/locks read from f, the requests blocked on
 * the file whose lock id ("MAJ:MIN:INODE") is id. A blocked request's line
 * is its blocker's number, then "->" indented one more space for each
 * waiter before it ("1: -> OFDLCK ...", "1:  -> OFDLCK ..."), so lines of
 * a long queue are long: read whole, with getline. Public for the unit
 * test; lr_prequeue_behind is the caller.
 */
unsigned lr_prequeue_count_blocked(FILE *f, const char *id)
{
	char *line = NULL;
	size_t cap = 0, idlen = strlen(id);
	unsigned n = 0;

	while (getline(&line, &cap, f) > 0) {
		const char *p = strchr(line, ':');
		size_t len;
		if (!p)
			continue;
		p += 1 + strspn(p + 1, " ");
		if (strncmp(p, "-> ", 3) != 0)
			continue;
		/* After "->": OFDLCK ADVISORY WRITE -1 MAJ:MIN:INODE ... */
		p = next_lock_id(p + 3, &len);
		if (p && len == idlen && strncmp(p, id, len) == 0)
			n++;
	}
	free(line);
	return n;
}

/* Our lock's id as the kernel prints it, from the "lock:" line of our
 * descriptor's fdinfo: fstat's st_dev is not the kernel's device number
 * on every file system (btrfs gives a subvolume's own). Falls back to
 * fstat's. One small read. */
static void lock_id(lr_prequeue *pq)
{
	char path[64], line[256];
	FILE *f;

	snprintf(pq->lock_id, sizeof(pq->lock_id), "%02x:%02x:%llu", major(pq->dev), minor(pq->dev),
	         (unsigned long long)pq->ino);
	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", pq->fd);
	f = fopen(path, "re");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		const char *p;
		size_t len;
		if (strncmp(line, "lock:", 5) != 0)
			continue;
		p = next_lock_id(line + 5, &len);
		if (p && len < sizeof(pq->lock_id)) {
			memcpy(pq->lock_id, p, len);
			pq->lock_id[len] = '\0';
		}
		break;
	}
	fclose(f);
}

/*
 * How many runs of this host wait behind the head (us) for the same
 * locks: the requests blocked on our file lock, as the kernel lists them
 * in /proc/locks. Counted at most once a second (the head asks on every
 * poll); between counts the last one is answered. A run that died is gone
 * from the list at once, which no counter kept by the waiters themselves
 * could promise. Costs one read of /proc/locks (every lock of the
 * machine, one line each) per second; 0 if it cannot be read.
 */
unsigned lr_prequeue_behind(lr_prequeue *pq)
{
	uint64_t now = now_ms();
	FILE *f;

	if (pq->behind_read && now - pq->behind_read < 1000)
		return pq->behind;
	pq->behind_read = now;
	if (!pq->lock_id[0])
		lock_id(pq);
	f = fopen("/proc/locks", "re");
	pq->behind = f ? lr_prequeue_count_blocked(f, pq->lock_id) : 0;
	if (f)
		fclose(f);
	return pq->behind;
}

const char *lr_prequeue_error(const lr_prequeue *pq)
{
	return pq->err;
}

/* Leaves the host's queue: the next run there may go to the database.
 * Accepts NULL. One close. */
void lr_prequeue_destroy(lr_prequeue *pq)
{
	if (!pq)
		return;
	stop_locker(pq);
	if (pq->fd >= 0)
		close(pq->fd);
	free(pq);
}
