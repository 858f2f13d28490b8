#include "lock.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <mysqld_error.h>

#include "btimer.h"
#include "log.h"
#include "strbuf.h"
#include "text.h"

/* A read-write lock is a semaphore of this many permits: a reader takes one,
 * a writer takes them all, so one counting rule serves every kind. */
#define RW_CAPACITY         2147483647U
#define KEY_PREFIX          "id:"
#define TX_RETRIES          12
#define LOCK_WAIT_TIMEOUT_S 2
#define POLL_MIN_MS         40
#define POLL_MAX_MS         500

/* A place in a queue lives this long unless renewed, whatever the ttl, so
 * a waiter that died holds back those behind it for at most this plus the
 * grace. Renewed every WAITER_RENEW_MS while the waiter lives. */
#define WAITER_TTL_MS   10000
#define WAITER_RENEW_MS 3000

/* Pace of connection attempts to a server that is full: each try costs it
 * a login, so back off to one every 2 s (jittered) rather than add to the
 * crowd. */
#define FULL_BACKOFF_MIN_MS 50
#define FULL_BACKOFF_MAX_MS 2000

const char *lr_kind_name(enum lr_kind k)
{
	switch (k) {
	case LR_KIND_SEMAPHORE:
		return "semaphore";
	case LR_KIND_MUTEX:
		return "mutex";
	case LR_KIND_READ:
	case LR_KIND_WRITE:
		return "rwlock";
	case LR_KIND_KEY:
		return "key";
	case LR_KIND_NAMED:
		return "named lock";
	}
	return "?";
}

/* Names: 1-64 bytes of [A-Za-z0-9_.-], starting with a letter or digit.
 * Narrow on purpose: safe in SQL, shell, logs and file names alike. */
bool lr_name_valid(const char *name)
{
	size_t n = strlen(name);

	if (n == 0 || n > LR_NAME_MAX)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = name[i];
		bool alnum =
		    (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
		if (!alnum && (i == 0 || (c != '_' && c != '.' && c != '-')))
			return false;
	}
	return true;
}

/* Parses "NAME" or, for semaphores, "NAME:COUNT". */
bool lr_item_parse(struct lr_item *it, enum lr_kind kind, const char *arg, char *err, size_t errlen)
{
	const char *colon = kind == LR_KIND_SEMAPHORE ? strrchr(arg, ':') : NULL;
	size_t n = colon ? (size_t)(colon - arg) : strlen(arg);
	char name[LR_NAME_MAX + 1];

	memset(it, 0, sizeof(*it));
	it->kind = kind;
	it->count = 1;
	if (n > LR_NAME_MAX) {
		snprintf(err, errlen, "name '%.*s...' is longer than %d bytes", 20, arg,
		         LR_NAME_MAX);
		return false;
	}
	memcpy(name, arg, n);
	name[n] = '\0';
	if (!lr_name_valid(name)) {
		snprintf(err, errlen,
		         "invalid name '%s': use 1-%d letters, digits, '_', '.' or '-', "
		         "starting with a letter or digit",
		         name, LR_NAME_MAX);
		return false;
	}
	if (colon) {
		char *end;
		unsigned long c;
		errno = 0;
		c = strtoul(colon + 1, &end, 10);
		if (errno || !colon[1] || *end || colon[1] == '-' || colon[1] == '+' || c < 1 ||
		    c > 1000000) {
			snprintf(err, errlen,
			         "invalid count '%s' for '%s': use a whole number 1-1000000",
			         colon + 1, name);
			return false;
		}
		it->count = (unsigned)c;
	}
	/* lockrun's own named locks (schema, wake-ups) must not be taken
	 * by hand: a held "lockrun.schema" would block `lockrunctl init`. */
	if (kind == LR_KIND_NAMED && strncmp(name, "lockrun.", 8) == 0) {
		snprintf(err, errlen,
		         "named lock '%s': names starting with 'lockrun.' are reserved", name);
		return false;
	}
	snprintf(it->name, sizeof(it->name), "%s%s", kind == LR_KIND_KEY ? KEY_PREFIX : "", name);
	return true;
}

static const char *display_name(const struct lr_item *it)
{
	return it->kind == LR_KIND_KEY ? it->name + strlen(KEY_PREFIX) : it->name;
}

/* A request id as lockrun makes them: 32 lowercase hex digits. */
static bool request_id_valid(const char *s)
{
	size_t n = 0;

	for (; s[n]; n++)
		if (!((s[n] >= '0' && s[n] <= '9') || (s[n] >= 'a' && s[n] <= 'f')))
			return false;
	return n == 32;
}

static void new_request_id(char out[33])
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

bool lr_lock_init(struct lr_lock *lk, uv_loop_t *loop, lr_db *db, const struct lr_owner *owner,
                  unsigned ttl_ms)
{
	memset(lk, 0, sizeof(*lk));
	lk->loop = loop;
	lk->db = db;
	lk->owner = *owner;
	lk->ttl_ms = ttl_ms;
	new_request_id(lk->request_id);
	memcpy(lk->grant_rid, lk->request_id, sizeof(lk->grant_rid));
	lk->timer = malloc(sizeof(*lk->timer));
	if (!lk->timer)
		return false;
	uv_timer_init(loop, lk->timer);
	lk->timer->data = lk;
	return true;
}

static void free_handle(uv_handle_t *h)
{
	free(h);
}

void lr_lock_finish(struct lr_lock *lk)
{
	free(lk->items);
	if (lk->timer)
		uv_close((uv_handle_t *)lk->timer, free_handle);
	memset(lk, 0, sizeof(*lk));
}

/* The flag also interrupts a statement in flight (a long GET_LOCK wait). */
void lr_lock_set_cancel(struct lr_lock *lk, const volatile bool *flag)
{
	lk->cancel = flag;
	lr_db_set_cancel(lk->db, flag);
}

/* Adds an item keeping the list sorted by name, the order rows are locked
 * in. The same name twice is an error, whatever the kinds. */
bool lr_lock_add(struct lr_lock *lk, const struct lr_item *it, char *err, size_t errlen)
{
	struct lr_item *grown;
	size_t i;

	for (i = 0; i < lk->nitems; i++) {
		if (strcmp(lk->items[i].name, it->name) == 0) {
			snprintf(err, errlen, "'%s' is named more than once", display_name(it));
			return false;
		}
	}
	grown = realloc(lk->items, (lk->nitems + 1) * sizeof(*grown));
	if (!grown) {
		snprintf(err, errlen, "out of memory");
		return false;
	}
	lk->items = grown;
	for (i = lk->nitems; i > 0 && strcmp(lk->items[i - 1].name, it->name) > 0; i--)
		lk->items[i] = lk->items[i - 1];
	lk->items[i] = *it;
	lk->nitems++;
	if (it->kind == LR_KIND_NAMED)
		lk->nnamed++;
	else
		lk->ntable++;
	return true;
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Uniform in [ms/2, 3ms/2): waiters that started together drift apart. */
static unsigned jitter(unsigned ms)
{
	unsigned r;

	if (getrandom(&r, sizeof(r), GRND_NONBLOCK) != sizeof(r))
		r = (unsigned)rand();
	return ms / 2 + (ms ? r % ms : 0);
}

static void on_timer(uv_timer_t *t)
{
	struct lr_lock *lk = t->data;
	lk->timer_fired = true;
	uv_stop(t->loop);
}

static bool canceled(const struct lr_lock *lk)
{
	return lk->cancel && *lk->cancel;
}

/* Sleeps on the loop (signals and children are still served) for ms, or
 * until the cancel flag is raised. */
static void nap(struct lr_lock *lk, unsigned ms)
{
	lk->timer_fired = false;
	uv_timer_start(lk->timer, on_timer, ms, 0);
	while (!lk->timer_fired && !canceled(lk))
		uv_run(lk->loop, UV_RUN_ONCE);
	uv_timer_stop(lk->timer);
}

/* Whether any item lives in lockrun's tables (a request of named locks only
 * needs no schema at all). */
bool lr_lock_needs_tables(const struct lr_lock *lk)
{
	return lk->ntable > 0;
}

static bool is_table(const struct lr_item *it)
{
	return it->kind != LR_KIND_NAMED;
}

static void take_db_error(struct lr_lock *lk)
{
	snprintf(lk->err, sizeof(lk->err), "%s", lr_db_error(lk->db));
}

/*
 * Per-connection settings every lock statement relies on: UTC for the
 * DATETIMEs we show, READ COMMITTED so each locking read sees the latest
 * commit, a short lock wait so a stuck row costs a retry, not a hang; and
 * whether this is a Galera node (named locks are node-local there). Three
 * statements, once per connection.
 */
static bool session_setup(struct lr_lock *lk)
{
	MYSQL_ROW row;

	if (!lr_db_queryf(lk->db, "SET SESSION time_zone = '+00:00', innodb_lock_wait_timeout = %d",
	                  LOCK_WAIT_TIMEOUT_S) ||
	    !lr_db_query(lk->db, "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED"))
		return false;
	lk->galera = false;
	if (lr_db_query(lk->db, "SELECT @@wsrep_on") && (row = lr_db_fetch(lk->db)) && row[0])
		lk->galera = strcmp(row[0], "1") == 0 || strcmp(row[0], "ON") == 0;
	else if (lr_db_errno(lk->db) != ER_UNKNOWN_SYSTEM_VARIABLE && !lr_db_connected(lk->db))
		return false;
	/* A lockrun frozen (SIGSTOP, a paused VM) inside a transaction would
	 * hold its row locks until wait_timeout; let the server end it. */
	if (!lr_db_query(lk->db, "SET SESSION idle_transaction_timeout = 5") &&
	    lr_db_errno(lk->db) != ER_UNKNOWN_SYSTEM_VARIABLE)
		return false;
	/* A lagging node (rejoined, or failed over to) must apply what the
	 * cluster committed before acting. 1: SELECT and START TRANSACTION, so
	 * every transaction is causal from its start (statements inside one
	 * never wait); 2: autocommit UPDATE and DELETE (renewal, waiter
	 * heartbeat and cancel), else a false "lease lost". Not 4: our only
	 * autocommit INSERT (IGNORE, of a resource row) is settled by
	 * certification. Cost: a covered statement waits a group round trip
	 * plus the node's apply queue. */
	if (lk->galera && !lr_db_query(lk->db, "SET SESSION wsrep_sync_wait = 3"))
		return false;
	lk->setup_gen = lr_db_generation(lk->db);
	return true;
}

/* The connect error in lk->err; a full server is named as such, and
 * remembered, as it makes a wait that runs out "not acquired". */
static void take_connect_error(struct lr_lock *lk)
{
	lk->server_full = lr_db_error_is_busy(lr_db_errno(lk->db));
	snprintf(lk->err, sizeof(lk->err), "%s%s",
	         lk->server_full ? "the database server is full: " : "", lr_db_error(lk->db));
}

static bool ensure_connected(struct lr_lock *lk)
{
	if (lr_db_connected(lk->db) && lk->setup_gen == lr_db_generation(lk->db))
		return true;
	if (!lr_db_connected(lk->db) && !lr_db_connect(lk->db)) {
		take_connect_error(lk);
		return false;
	}
	lk->server_full = false;
	if (session_setup(lk)) {
		lk->db_trouble = false;
		return true;
	}
	take_db_error(lk);
	return false;
}

/*
 * Connects for a request that may wait *wait_s seconds (< 0: forever, 0:
 * one try), before anything is asked of the lock tables. A server that
 * turns us away only because it is full (lr_db_error_is_busy: too many
 * connections, a per-account limit or quota) is tried again after a
 * jittered backoff, FULL_BACKOFF_MIN_MS doubling to FULL_BACKOFF_MAX_MS,
 * until it lets us in or the wait runs out: a full database is waited
 * through like a busy lock. Any other failure (refused port, name lookup,
 * login, missing database) ends it at once. Says so once (a warning, and
 * the plan at -v), not per try. On return *wait_s is what is left of the
 * wait (never below 0). False with *why LR_ACQ_FULL (still full when the
 * wait ran out), LR_ACQ_CANCELED or LR_ACQ_ERROR, and lk->err saying why.
 * Costs one connection attempt per try; a full server is asked nothing
 * else.
 */
bool lr_lock_connect(struct lr_lock *lk, double *wait_s, enum lr_acquire *why)
{
	double wait = *wait_s;
	uint64_t start = now_ms(), now;
	uint64_t deadline = wait < 0 ? UINT64_MAX : start + (uint64_t)llround(wait * 1000.0);
	unsigned backoff = FULL_BACKOFF_MIN_MS, ms;
	bool ok;

	for (;;) {
		ok = lr_db_connect(lk->db);
		if (ok || canceled(lk) || !lr_db_error_is_busy(lr_db_errno(lk->db)))
			break;
		now = now_ms();
		if (now >= deadline)
			break;
		if (!lk->db_trouble) {
			lr_log_warn("database server full, still trying: %s", lr_db_error(lk->db));
			if (wait < 0)
				lr_log_info(
				    "retrying the connection every %u ms to %u s (jittered) "
				    "until the server lets us in",
				    FULL_BACKOFF_MIN_MS, FULL_BACKOFF_MAX_MS / 1000);
			else
				lr_log_info(
				    "retrying the connection every %u ms to %u s (jittered) "
				    "for up to %g s",
				    FULL_BACKOFF_MIN_MS, FULL_BACKOFF_MAX_MS / 1000, wait);
			lk->db_trouble = true;
		}
		ms = jitter(backoff);
		nap(lk, now + ms > deadline ? (unsigned)(deadline - now) + 1 : ms);
		backoff = backoff * 2 > FULL_BACKOFF_MAX_MS ? FULL_BACKOFF_MAX_MS : backoff * 2;
	}
	now = now_ms();
	if (wait > 0)
		*wait_s = now >= deadline ? 0 : (double)(deadline - now) / 1000.0;
	if (ok) {
		if (lk->db_trouble)
			lr_log_info("connected after %.1f s of a full server",
			            (now - start) / 1000.0);
		lk->db_trouble = false;
		return true;
	}
	take_connect_error(lk);
	if (canceled(lk)) {
		*why = LR_ACQ_CANCELED;
	} else if (lk->server_full) {
		*why = LR_ACQ_FULL;
		if (wait > 0)
			snprintf(lk->err, sizeof(lk->err),
			         "the database server was still full after %.1f s: %s",
			         (now - start) / 1000.0, lr_db_error(lk->db));
	} else {
		*why = LR_ACQ_ERROR;
		snprintf(lk->err, sizeof(lk->err), "cannot connect to %s", lr_db_error(lk->db));
	}
	return false;
}

/* "'a','b','c'": the names of all table items, for IN (...). */
static void add_name_list(struct lr_lock *lk, struct lr_sb *sb)
{
	bool first = true;

	for (size_t i = 0; i < lk->nitems; i++) {
		if (!is_table(&lk->items[i]))
			continue;
		if (!first)
			lr_sb_puts(sb, ",");
		lr_db_sb_quote(lk->db, sb, lk->items[i].name);
		first = false;
	}
}

static unsigned capacity_for(const struct lr_item *it)
{
	switch (it->kind) {
	case LR_KIND_READ:
	case LR_KIND_WRITE:
		return RW_CAPACITY;
	default:
		return 1;
	}
}

static unsigned permits_for(const struct lr_item *it)
{
	return it->kind == LR_KIND_WRITE ? RW_CAPACITY : it->count;
}

static bool kind_matches(const struct lr_item *it, const char *kind)
{
	return strcmp(lr_kind_name(it->kind), kind) == 0;
}

static struct lr_item *find_item(struct lr_lock *lk, const char *name)
{
	for (size_t i = 0; i < lk->nitems; i++)
		if (is_table(&lk->items[i]) && strcmp(lk->items[i].name, name) == 0)
			return &lk->items[i];
	return NULL;
}

/* Creates the rows of kinds that need no set-up (mutexes, read-write locks,
 * keys). Only called when a row was found missing, so the common path
 * writes nothing extra. One autocommit statement. */
static bool create_missing(struct lr_lock *lk)
{
	struct lr_sb sb;
	bool any = false, ok;

	lr_sb_init(&sb);
	lr_sb_puts(&sb, "INSERT IGNORE INTO lr_resources (name, kind, capacity) VALUES ");
	for (size_t i = 0; i < lk->nitems; i++) {
		const struct lr_item *it = &lk->items[i];
		if (it->kind == LR_KIND_SEMAPHORE || !is_table(it))
			continue;
		lr_sb_puts(&sb, any ? ",(" : "(");
		lr_db_sb_quote(lk->db, &sb, it->name);
		lr_sb_printf(&sb, ",'%s',%u)", lr_kind_name(it->kind), capacity_for(it));
		any = true;
	}
	ok = !any || lr_db_query(lk->db, lr_sb_str(&sb));
	lr_sb_finish(&sb);
	return ok;
}

enum tx { TX_OK, TX_BUSY, TX_KEY_BUSY, TX_INVALID, TX_MISSING, TX_RETRY, TX_FAIL };

/* Maps a failed statement to what the caller does next. */
static enum tx failed(struct lr_lock *lk)
{
	unsigned e = lr_db_errno(lk->db);

	take_db_error(lk);
	if (lr_db_connected(lk->db))
		lr_db_query(lk->db, "ROLLBACK");
	if (e == ER_NO_SUCH_TABLE || e == ER_BAD_FIELD_ERROR) {
		snprintf(lk->err, sizeof(lk->err),
		         "%s: the lockrun schema is missing or outdated; run 'lockrunctl init'",
		         lr_db_server(lk->db));
		return TX_FAIL;
	}
	return lr_db_error_is_retryable(e) ? TX_RETRY : TX_FAIL;
}

/* Checks the locked resource rows against the request: every semaphore
 * must exist, kinds must match, and no count may exceed the capacity.
 * Remembers each row's capacity, fence and ticket counter. */
static enum tx check_rows(struct lr_lock *lk, unsigned long *caps, uint64_t *tickets)
{
	bool present[lk->nitems];
	size_t seen = 0;
	MYSQL_ROW row;

	memset(present, 0, sizeof(present));
	while ((row = lr_db_fetch(lk->db))) {
		struct lr_item *it = find_item(lk, row[0]);
		size_t i;
		if (!it)
			continue;
		i = (size_t)(it - lk->items);
		present[i] = true;
		seen++;
		caps[i] = strtoul(row[2], NULL, 10);
		it->fence = strtoull(row[3], NULL, 10);
		tickets[i] = strtoull(row[4], NULL, 10);
		if (!kind_matches(it, row[1])) {
			snprintf(lk->err, sizeof(lk->err), "'%s' is a %s, not a %s",
			         display_name(it), row[1], lr_kind_name(it->kind));
			return TX_INVALID;
		}
		if (it->kind == LR_KIND_SEMAPHORE && it->count > caps[i]) {
			snprintf(lk->err, sizeof(lk->err),
			         "asked for %u permits of semaphore '%s', whose capacity is %s",
			         it->count, it->name, row[2]);
			return TX_INVALID;
		}
	}
	if (seen == lk->ntable)
		return TX_OK;
	for (size_t i = 0; i < lk->nitems; i++) {
		if (lk->items[i].kind == LR_KIND_SEMAPHORE && !present[i]) {
			snprintf(
			    lk->err, sizeof(lk->err),
			    "unknown semaphore '%s'; create it with 'lockrunctl set %s CAPACITY'",
			    lk->items[i].name, lk->items[i].name);
			return TX_INVALID;
		}
	}
	return TX_MISSING;
}

/* Reads "resource, number" rows into a per-item array. */
static void read_counts(struct lr_lock *lk, unsigned long long *out)
{
	MYSQL_ROW row;

	memset(out, 0, lk->nitems * sizeof(*out));
	while ((row = lr_db_fetch(lk->db))) {
		struct lr_item *it = find_item(lk, row[0]);
		if (it)
			out[it - lk->items] = strtoull(row[1], NULL, 10);
	}
}

/*
 * The grant rule, for every table item: it fits in the capacity left by
 * live holds, and no live waiter that queued before us waits on the same
 * resource (before we queue, any live waiter counts as before us). An
 * idempotency key that is held is never waited for.
 */
static enum tx decide(struct lr_lock *lk, const unsigned long *caps, const unsigned long long *used,
                      const unsigned long long *ahead)
{
	enum tx r = TX_OK;

	for (size_t i = 0; i < lk->nitems; i++) {
		const struct lr_item *it = &lk->items[i];
		if (!is_table(it))
			continue;
		if (it->kind == LR_KIND_KEY && used[i]) {
			snprintf(lk->err, sizeof(lk->err),
			         "another run with --id '%s' is still going", display_name(it));
			return TX_KEY_BUSY;
		}
		if (r != TX_OK)
			continue;
		if (used[i] + permits_for(it) > caps[i]) {
			if (it->kind == LR_KIND_SEMAPHORE)
				snprintf(lk->err, sizeof(lk->err), "'%s' is busy (%llu/%lu used)",
				         display_name(it), used[i], caps[i]);
			else
				snprintf(lk->err, sizeof(lk->err), "'%s' is busy",
				         display_name(it));
			r = TX_BUSY;
		} else if (ahead[i]) {
			snprintf(lk->err, sizeof(lk->err), "'%s' has %llu request%s queued ahead",
			         display_name(it), ahead[i], ahead[i] == 1 ? "" : "s");
			r = TX_BUSY;
		}
	}
	return r;
}

static void add_owner_values(struct lr_lock *lk, struct lr_sb *sb)
{
	lr_db_sb_quote(lk->db, sb, lk->owner.host);
	lr_sb_printf(sb, ",%ld,", (long)lk->owner.pid);
	lr_db_sb_quote(lk->db, sb, lk->owner.os_user);
}

static bool add_grant(struct lr_lock *lk)
{
	const struct lr_item *key = NULL;
	struct lr_sb sb;
	bool ok, first = true;

	for (size_t i = 0; i < lk->nitems; i++)
		if (lk->items[i].kind == LR_KIND_KEY)
			key = &lk->items[i];
	lr_sb_init(&sb);
	lr_sb_puts(&sb, "INSERT INTO lr_grants (request_id, idem_key, host, pid, os_user, db_user, "
	                "command, ttl_ms, acquired_at) VALUES (");
	lr_db_sb_quote(lk->db, &sb, lk->grant_rid);
	lr_sb_puts(&sb, ",");
	lr_db_sb_quote(lk->db, &sb, key ? display_name(key) : NULL);
	lr_sb_puts(&sb, ",");
	add_owner_values(lk, &sb);
	lr_sb_puts(&sb, ",CURRENT_USER(),LEFT(");
	lr_db_sb_quote(lk->db, &sb, lk->owner.command);
	lr_sb_printf(&sb, ",1024),%u,NOW(6))", lk->ttl_ms);
	ok = lr_db_query(lk->db, lr_sb_str(&sb));
	lk->grant_id = lr_db_insert_id(lk->db);
	lr_sb_reset(&sb);
	lr_sb_puts(&sb,
	           "INSERT INTO lr_holds (resource, grant_id, permits, fence, expires_at) VALUES ");
	for (size_t i = 0; i < lk->nitems && ok; i++) {
		const struct lr_item *it = &lk->items[i];
		if (!is_table(it))
			continue;
		lr_sb_puts(&sb, first ? "(" : ",(");
		lr_db_sb_quote(lk->db, &sb, it->name);
		lr_sb_printf(&sb, ",%llu,%u,%llu,NOW(6) + INTERVAL %llu MICROSECOND)",
		             (unsigned long long)lk->grant_id, permits_for(it),
		             (unsigned long long)it->fence,
		             (unsigned long long)lk->ttl_ms * 1000ULL);
		first = false;
	}
	ok = ok && lr_db_query(lk->db, lr_sb_str(&sb));
	if (ok && lk->ever_queued)
		ok = lr_db_queryf(lk->db, "DELETE FROM lr_waiters WHERE request_id = '%s'",
		                  lk->request_id);
	lr_sb_finish(&sb);
	return ok;
}

static void take_wait_lock(struct lr_lock *lk);

/* Takes a place in the queue of every table item: one ticket from each
 * resource's counter, all in the transaction that holds all their rows, so
 * the order of two requests is the same on every resource they share. */
static bool enqueue(struct lr_lock *lk, const char *in, const uint64_t *tickets)
{
	struct lr_sb sb;
	bool ok, first = true;

	if (!lr_db_queryf(lk->db, "UPDATE lr_resources SET ticket = ticket + 1 WHERE name IN (%s)",
	                  in))
		return false;
	lr_sb_init(&sb);
	lr_sb_puts(&sb, "INSERT INTO lr_waiters (resource, ticket, request_id, permits, host, pid, "
	                "os_user, command, since, expires_at) VALUES ");
	for (size_t i = 0; i < lk->nitems; i++) {
		struct lr_item *it = &lk->items[i];
		if (!is_table(it))
			continue;
		it->ticket = tickets[i] + 1;
		lr_sb_puts(&sb, first ? "(" : ",(");
		lr_db_sb_quote(lk->db, &sb, it->name);
		lr_sb_printf(&sb, ",%llu,'%s',%u,", (unsigned long long)it->ticket, lk->request_id,
		             permits_for(it));
		add_owner_values(lk, &sb);
		lr_sb_puts(&sb, ",LEFT(");
		lr_db_sb_quote(lk->db, &sb, lk->owner.command);
		lr_sb_printf(&sb, ",1024),NOW(6),NOW(6) + INTERVAL %u MICROSECOND)",
		             WAITER_TTL_MS * 1000U);
		first = false;
	}
	ok = lr_db_query(lk->db, lr_sb_str(&sb));
	lr_sb_finish(&sb);
	return ok;
}

/* "resource IN (...)" before we queue; afterwards only earlier tickets. */
static void add_ahead_clause(struct lr_lock *lk, struct lr_sb *sb, const char *in)
{
	bool first = true;

	if (!lk->queued) {
		lr_sb_printf(sb, "resource IN (%s)", in);
		return;
	}
	lr_sb_puts(sb, "(");
	for (size_t i = 0; i < lk->nitems; i++) {
		const struct lr_item *it = &lk->items[i];
		if (!is_table(it))
			continue;
		lr_sb_puts(sb, first ? "(resource = " : " OR (resource = ");
		lr_db_sb_quote(lk->db, sb, it->name);
		lr_sb_printf(sb, " AND ticket < %llu)", (unsigned long long)it->ticket);
		first = false;
	}
	lr_sb_puts(sb, ")");
}

/*
 * One acquire transaction over the table items: lock the resource rows in
 * name order (every insert of a hold or a waiter of a resource happens
 * under that row's lock, so once we have it, a READ COMMITTED read sees
 * all of them; share-locking the hold rows too would only make renewals
 * wait on us), sweep holds and waiters that expired more than the grace
 * ago (writes, so a concurrent renewal of the same row conflicts instead
 * of both winning), count what is left as live use and the waiters ahead
 * of us, and if the grant rule holds, bump each resource's fence (the
 * written row every contender conflicts on, also under Galera) and insert
 * the grant and its holds. If not, and we are to wait, take a place in the
 * queues in the same transaction. About ten round trips; row locks are
 * held for their duration only.
 */
static enum tx try_table(struct lr_lock *lk, bool may_enqueue)
{
	unsigned long caps[lk->nitems];
	uint64_t tickets[lk->nitems];
	unsigned long long used[lk->nitems], ahead[lk->nitems];
	struct lr_sb in, sb;
	enum tx r = TX_FAIL;

	lr_sb_init(&in);
	lr_sb_init(&sb);
	add_name_list(lk, &in);
	lk->valid_from_ms = lr_btimer_now_ms();
	if (!lr_db_query(lk->db, "START TRANSACTION"))
		goto db_fail;
	lr_sb_printf(
	    &sb,
	    "SELECT name, kind, capacity, fence, ticket FROM lr_resources WHERE name IN (%s) "
	    "ORDER BY name FOR UPDATE",
	    lr_sb_str(&in));
	if (!lr_db_query(lk->db, lr_sb_str(&sb)))
		goto db_fail;
	r = check_rows(lk, caps, tickets);
	if (r != TX_OK)
		goto rollback;
	if (!lr_db_queryf(lk->db,
	                  "UPDATE lr_grants g JOIN lr_holds h ON h.grant_id = g.id "
	                  "SET g.ended_at = h.expires_at, g.end_reason = 'expired' "
	                  "WHERE h.resource IN (%s) AND " LR_SQL_SWEEPABLE(
	                      "h.expires_at") " AND g.ended_at IS NULL",
	                  lr_sb_str(&in)) ||
	    !lr_db_queryf(
	        lk->db,
	        "DELETE FROM lr_holds WHERE resource IN (%s) AND " LR_SQL_SWEEPABLE("expires_at"),
	        lr_sb_str(&in)) ||
	    !lr_db_queryf(
	        lk->db,
	        "DELETE FROM lr_waiters WHERE resource IN (%s) AND " LR_SQL_SWEEPABLE("expires_at"),
	        lr_sb_str(&in)) ||
	    !lr_db_queryf(lk->db,
	                  "SELECT resource, SUM(permits) FROM lr_holds WHERE resource IN (%s) "
	                  "GROUP BY resource",
	                  lr_sb_str(&in)))
		goto db_fail;
	read_counts(lk, used);
	lr_sb_reset(&sb);
	lr_sb_printf(&sb, "SELECT resource, COUNT(*) FROM lr_waiters WHERE request_id <> '%s' AND ",
	             lk->request_id);
	add_ahead_clause(lk, &sb, lr_sb_str(&in));
	lr_sb_puts(&sb, " GROUP BY resource");
	if (!lr_db_query(lk->db, lr_sb_str(&sb)))
		goto db_fail;
	read_counts(lk, ahead);
	r = decide(lk, caps, used, ahead);
	if (r == TX_BUSY && !lk->queued && may_enqueue) {
		lk->ever_queued = true;
		if (!enqueue(lk, lr_sb_str(&in), tickets))
			goto db_fail;
		lk->maybe_enqueued = true;
		if (!lr_db_query(lk->db, "COMMIT")) {
			if (lr_db_connected(lk->db))
				lk->maybe_enqueued = false;
			goto db_fail;
		}
		lk->maybe_enqueued = false;
		lk->queued = true;
		lk->waiter_renew_ms = lr_btimer_now_ms() + WAITER_RENEW_MS;
		take_wait_lock(lk);
		goto out;
	}
	if (r != TX_OK)
		goto rollback;
	if (!lr_db_queryf(lk->db, "UPDATE lr_resources SET fence = fence + 1 WHERE name IN (%s)",
	                  lr_sb_str(&in)))
		goto db_fail;
	for (size_t i = 0; i < lk->nitems; i++)
		if (is_table(&lk->items[i]))
			lk->items[i].fence++;
	if (!add_grant(lk))
		goto db_fail;
	lk->maybe_committed = true;
	if (!lr_db_query(lk->db, "COMMIT")) {
		/* Rejected at commit (deadlock, certification): surely not granted.
		 * Lost on the way: unknown, settled by the request id. */
		if (lr_db_connected(lk->db))
			lk->maybe_committed = false;
		goto db_fail;
	}
	lk->maybe_committed = false;
	lk->queued = false;
	r = TX_OK;
	goto out;
db_fail:
	r = failed(lk);
	goto out;
rollback:
	if (!lr_db_query(lk->db, "ROLLBACK") && r == TX_OK)
		r = failed(lk);
out:
	lr_sb_finish(&in);
	lr_sb_finish(&sb);
	return r;
}

/* Named locks, on this connection, each without waiting. On any miss the
 * ones already taken are given back: a request is all or nothing. One
 * statement per lock. */
static bool release_named(struct lr_lock *lk);

static enum tx take_named(struct lr_lock *lk)
{
	MYSQL_ROW row;

	if (!lk->nnamed)
		return TX_OK;
	if (lk->galera) {
		snprintf(
		    lk->err, sizeof(lk->err),
		    "%s is a Galera node: named locks there are local to one node and would not "
		    "exclude other nodes; use --mutex instead",
		    lr_db_server(lk->db));
		return TX_INVALID;
	}
	for (size_t i = 0; i < lk->nitems; i++) {
		struct lr_item *it = &lk->items[i];
		struct lr_sb sb;
		bool ok;
		if (is_table(it))
			continue;
		lr_sb_init(&sb);
		lr_sb_puts(&sb, "SELECT GET_LOCK(");
		lr_db_sb_quote(lk->db, &sb, it->name);
		lr_sb_puts(&sb, ", 0)");
		ok = lr_db_query(lk->db, lr_sb_str(&sb));
		lr_sb_finish(&sb);
		if (!ok)
			return failed(lk);
		lk->named_held = true;
		lk->named_gen = lr_db_generation(lk->db);
		row = lr_db_fetch(lk->db);
		if (!row || !row[0] || strcmp(row[0], "1") != 0) {
			snprintf(lk->err, sizeof(lk->err),
			         "named lock '%s' is held by another session", it->name);
			release_named(lk);
			return TX_BUSY;
		}
	}
	return TX_OK;
}

/* Gives back every named lock this session holds (RELEASE_ALL_LOCKS would
 * also drop the wake-up lock, which has its own life). One statement. */
static bool release_named(struct lr_lock *lk)
{
	struct lr_sb sb;
	bool ok, first = true;

	if (!lk->named_held)
		return true;
	lk->named_held = false;
	if (lk->named_gen != lr_db_generation(lk->db))
		return true; /* that connection is gone, and its locks with it */
	lr_sb_init(&sb);
	lr_sb_puts(&sb, "DO ");
	for (size_t i = 0; i < lk->nitems; i++) {
		if (is_table(&lk->items[i]))
			continue;
		lr_sb_puts(&sb, first ? "RELEASE_LOCK(" : ", RELEASE_LOCK(");
		lr_db_sb_quote(lk->db, &sb, lk->items[i].name);
		lr_sb_puts(&sb, ")");
		first = false;
	}
	ok = lr_db_query(lk->db, lr_sb_str(&sb));
	lr_sb_finish(&sb);
	return ok;
}

/*
 * Opens the transaction that settles a COMMIT whose answer was lost, on a
 * new connection, and first WRITES the rows of all the request's resources
 * (a ticket bump: gaps in tickets are harmless). That write is what makes
 * the read after it unable to race the old COMMIT, which may still be in
 * flight (an fsync stall, Galera flow control):
 *  - One server: the old transaction locked those rows FOR UPDATE and
 *    wrote them, and holds their X locks until its COMMIT lands or it is
 *    rolled back. Our write waits for that; only then do we read. If it
 *    waits longer than the lock wait timeout we get 1205 and settle again;
 *    an old transaction whose COMMIT never arrives is rolled back by the
 *    server's idle_transaction_timeout (5 s), which frees the rows. So
 *    the read sees the old transaction's final outcome.
 *  - Galera: row locks are node-local, but both transactions write the
 *    same rows, so certification orders them. If the old one is ordered
 *    first, ours is aborted (1213, or it fails certification at COMMIT)
 *    and the next try reads after it (wsrep_sync_wait). If ours is ordered
 *    first, the old one fails certification and can never commit. Either
 *    way, what we read is final once our COMMIT succeeded, which is why
 *    the caller acts only after that COMMIT.
 * A plain or locking read alone would not do on Galera (reads lock
 * nothing on other nodes), nor would KILLing the old connection (its
 * transaction may be replicating already). Two round trips.
 */
static bool settle_begin(struct lr_lock *lk)
{
	struct lr_sb in;
	bool ok;

	lr_sb_init(&in);
	add_name_list(lk, &in);
	ok = lr_db_query(lk->db, "START TRANSACTION") &&
	     lr_db_queryf(lk->db, "UPDATE lr_resources SET ticket = ticket + 1 WHERE name IN (%s)",
	                  lr_sb_str(&in));
	lr_sb_finish(&in);
	return ok;
}

/*
 * After a COMMIT whose answer was lost: looks the request id up, in a
 * transaction that cannot race that COMMIT (settle_begin). If the grant
 * exists and is live it is ours, and we adopt it with its fences;
 * otherwise the grant never happened (or came too late to be used: it is
 * closed and its holds removed) and may be tried again under a new id.
 * Five round trips; a 1205 or 1213 leaves it to be settled again.
 */
static enum tx settle(struct lr_lock *lk)
{
	MYSQL_ROW row;
	size_t n = 0;
	uint64_t gid = 0;

	if (!settle_begin(lk) ||
	    !lr_db_queryf(lk->db,
	                  "SELECT g.id, h.resource, h.fence FROM lr_grants g "
	                  "JOIN lr_holds h ON h.grant_id = g.id "
	                  "WHERE g.request_id = '%s' AND h.expires_at > NOW(6)",
	                  lk->grant_rid))
		return failed(lk);
	while ((row = lr_db_fetch(lk->db))) {
		struct lr_item *it = find_item(lk, row[1]);
		gid = strtoull(row[0], NULL, 10);
		if (it) {
			it->fence = strtoull(row[2], NULL, 10);
			n++;
		}
	}
	if (n != lk->ntable) {
		/* Not granted, or granted and already expired: close that log
		 * entry and give back its holds, if they exist. */
		if (!lr_db_queryf(lk->db,
		                  "UPDATE lr_grants SET ended_at = NOW(6), end_reason = 'expired' "
		                  "WHERE request_id = '%s' AND ended_at IS NULL",
		                  lk->grant_rid) ||
		    !lr_db_queryf(lk->db,
		                  "DELETE h FROM lr_holds h JOIN lr_grants g ON g.id = h.grant_id "
		                  "WHERE g.request_id = '%s'",
		                  lk->grant_rid))
			return failed(lk);
	}
	if (!lr_db_query(lk->db, "COMMIT"))
		return failed(lk);
	lk->maybe_committed = false;
	if (n == lk->ntable) {
		lk->grant_id = gid;
		lr_log_info("adopted grant %llu after a lost commit answer",
		            (unsigned long long)lk->grant_id);
		lk->queued = false;
		return TX_OK;
	}
	/* Try again under a new id (the old one is taken). */
	new_request_id(lk->grant_rid);
	lk->grant_id = 0;
	return TX_RETRY;
}

/*
 * After an enqueue COMMIT whose answer was lost: our waiter rows either all
 * exist (one transaction wrote them) or none do. Adopt them with their
 * tickets, or know we are not queued; settle_begin keeps the read from
 * racing the old COMMIT. Four round trips.
 */
static enum tx settle_queue(struct lr_lock *lk)
{
	MYSQL_ROW row;
	size_t n = 0;
	uint64_t tickets[lk->nitems];

	if (!settle_begin(lk) ||
	    !lr_db_queryf(lk->db, "SELECT resource, ticket FROM lr_waiters WHERE request_id = '%s'",
	                  lk->request_id))
		return failed(lk);
	while ((row = lr_db_fetch(lk->db))) {
		struct lr_item *it = find_item(lk, row[0]);
		if (it) {
			tickets[it - lk->items] = strtoull(row[1], NULL, 10);
			n++;
		}
	}
	if (!lr_db_query(lk->db, "COMMIT"))
		return failed(lk);
	lk->maybe_enqueued = false;
	lk->queued = n == lk->ntable;
	if (lk->queued) {
		for (size_t i = 0; i < lk->nitems; i++)
			if (is_table(&lk->items[i]))
				lk->items[i].ticket = tickets[i];
		lk->waiter_renew_ms = 0; /* renew at once: the answer came late */
		take_wait_lock(lk);
	}
	return TX_RETRY;
}

/*
 * Wake-up locks, an accelerator only: correctness never depends on them,
 * and on Galera (where named locks are node-local) they are not used. A
 * holder keeps "lockrun.grant.<id>" while it holds its grant; a queued
 * waiter keeps "lockrun.wait.<request>" while it waits. A waiter blocks in
 * GET_LOCK on the lock of the waiter right ahead of it, or, when it is
 * first, on a holder's: the release of either wakes it at once, so the
 * queue moves at the speed of the database, not of polling.
 */
static bool named_do(struct lr_lock *lk, const char *fn, const char *name)
{
	struct lr_sb sb;
	bool ok;

	lr_sb_init(&sb);
	lr_sb_printf(&sb, "DO %s(", fn);
	lr_db_sb_quote(lk->db, &sb, name);
	lr_sb_puts(&sb, strcmp(fn, "GET_LOCK") == 0 ? ", 0)" : ")");
	ok = lr_db_query(lk->db, lr_sb_str(&sb));
	lr_sb_finish(&sb);
	return ok;
}

static void grant_lock_name(char *out, size_t n, uint64_t gid)
{
	snprintf(out, n, "lockrun.grant.%llu", (unsigned long long)gid);
}

static void wait_lock_name(char *out, size_t n, const char *request_id)
{
	snprintf(out, n, "lockrun.wait.%.32s", request_id);
}

static void take_wake_lock(struct lr_lock *lk)
{
	char name[64];

	if (lk->galera || !lk->grant_id)
		return;
	grant_lock_name(name, sizeof(name), lk->grant_id);
	lk->wake_held = named_do(lk, "GET_LOCK", name);
}

static void take_wait_lock(struct lr_lock *lk)
{
	char name[64];

	if (lk->galera || lk->wait_lock_held)
		return;
	wait_lock_name(name, sizeof(name), lk->request_id);
	lk->wait_lock_held = named_do(lk, "GET_LOCK", name);
}

/* Wakes the waiter behind us: we were granted, or we left the queue. */
static void drop_wait_lock(struct lr_lock *lk)
{
	char name[64];

	if (!lk->wait_lock_held)
		return;
	lk->wait_lock_held = false;
	if (!lr_db_connected(lk->db))
		return;
	wait_lock_name(name, sizeof(name), lk->request_id);
	named_do(lk, "RELEASE_LOCK", name);
}

/* One attempt, with the whole transaction retried on deadlocks, lock wait
 * timeouts, certification failures and dropped connections (bounded,
 * jittered backoff). A missing auto-created row is created, then retried. */
static enum tx attempt(struct lr_lock *lk, bool may_enqueue)
{
	enum tx r = TX_RETRY;
	unsigned backoff = 5;

	for (int i = 0; i < TX_RETRIES && !canceled(lk); i++) {
		if (!ensure_connected(lk)) {
			/* Retrying on regardless (a wait is a wait); but say why it
			 * is taking long, once until the database is back. */
			if (!lk->db_trouble)
				lr_log_warn("database trouble, still trying: %s", lk->err);
			lk->db_trouble = true;
			r = TX_RETRY;
			/* Full past the end of the wait: that is "not acquired",
			 * and more tries would only cost the server logins. */
			if (lk->server_full && now_ms() >= lk->wait_until)
				break;
		} else if (lk->maybe_enqueued) {
			r = settle_queue(lk);
			if (r != TX_RETRY)
				return r;
			if (!lk->maybe_enqueued) {
				i--; /* settled: that was no attempt */
				continue;
			}
		} else if (lk->maybe_committed) {
			r = settle(lk);
			if (r != TX_OK && r != TX_RETRY)
				return r;
			if (r == TX_OK) {
				r = take_named(lk);
				if (r != TX_OK) {
					/* The adopted grant is useless without its named
					 * locks; giving it back must not end our wait's
					 * interruptibility. */
					const volatile bool *cancel = lk->cancel;
					lr_lock_release(lk, LR_END_ABORTED, 0);
					lr_lock_set_cancel(lk, cancel);
					lk->grant_id = 0;
					new_request_id(lk->grant_rid);
					return r;
				}
				return TX_OK;
			}
		} else {
			lk->valid_from_ms =
			    lr_btimer_now_ms(); /* try_table restarts it for tables */
			r = take_named(lk);
			if (r == TX_OK && lk->ntable)
				r = try_table(lk, may_enqueue);
			if (r == TX_MISSING)
				r = create_missing(lk) ? TX_RETRY : failed(lk);
			if (r != TX_OK)
				release_named(lk);
			if (r == TX_OK) {
				take_wake_lock(lk);
				drop_wait_lock(lk);
				return r;
			}
			if (r != TX_RETRY)
				return r;
			if (i == 0 && lr_db_connected(lk->db))
				continue; /* a created row or first deadlock: straight again */
		}
		lr_log_debug("retrying: %s", lk->err);
		nap(lk, jitter(backoff));
		backoff = backoff * 2 > 1000 ? 1000 : backoff * 2;
	}
	return r;
}

/* " AND w.ticket < <our ticket on w's resource>", for queued requests. */
static void add_ticket_case(struct lr_lock *lk, struct lr_sb *sb)
{
	lr_sb_puts(sb, " AND w.ticket < CASE w.resource");
	for (size_t i = 0; i < lk->nitems; i++) {
		if (!is_table(&lk->items[i]))
			continue;
		lr_sb_puts(sb, " WHEN ");
		lr_db_sb_quote(lk->db, sb, lk->items[i].name);
		lr_sb_printf(sb, " THEN %llu", (unsigned long long)lk->items[i].ticket);
	}
	lr_sb_puts(sb, " END");
}

/* Builds the waiting poll: per resource its capacity, live use, live
 * waiters ahead of us, the oldest holder, and the waiter right ahead. */
static void build_poll(struct lr_lock *lk, struct lr_sb *sb)
{
	lr_sb_puts(sb, "SELECT r.name, r.capacity, (SELECT COALESCE(SUM(h.permits), 0) "
	               "FROM lr_holds h WHERE h.resource = r.name AND ");
	lr_sb_puts(sb, LR_SQL_UNSWEPT("h.expires_at") "), (SELECT COUNT(*) FROM lr_waiters w "
	                                              "WHERE w.resource = r.name AND ");
	lr_sb_puts(sb, LR_SQL_UNSWEPT("w.expires_at") " AND w.request_id <> ");
	lr_db_sb_quote(lk->db, sb, lk->request_id);
	if (lk->queued)
		add_ticket_case(lk, sb);
	lr_sb_puts(sb, "), (SELECT MIN(h.grant_id) FROM lr_holds h WHERE h.resource = r.name "
	               "AND " LR_SQL_UNSWEPT("h.expires_at") "), ");
	if (lk->queued) {
		lr_sb_puts(sb, "(SELECT w.request_id FROM lr_waiters w WHERE w.resource = r.name "
		               "AND " LR_SQL_UNSWEPT("w.expires_at") " AND w.request_id <> ");
		lr_db_sb_quote(lk->db, sb, lk->request_id);
		add_ticket_case(lk, sb);
		lr_sb_puts(sb, " ORDER BY w.ticket DESC LIMIT 1)");
	} else {
		lr_sb_puts(sb, "NULL");
	}
	lr_sb_puts(sb, " FROM lr_resources r WHERE r.name IN (");
	add_name_list(lk, sb);
	lr_sb_puts(sb, ")");
}

/*
 * A cheap snapshot read that says whether a full attempt could succeed.
 * It decides nothing (the transaction does); it only spares the server a
 * locking transaction per poll while we wait. It also picks the wake-up
 * lock to block on: the waiter right ahead of us, else a holder. One
 * statement (two with named locks).
 */
static bool looks_free(struct lr_lock *lk)
{
	struct lr_sb sb;
	MYSQL_ROW row;
	bool free_now = true;

	lk->wake_on[0] = '\0';
	lr_sb_init(&sb);
	if (lk->ntable) {
		build_poll(lk, &sb);
		if (!lr_db_query(lk->db, lr_sb_str(&sb)))
			goto out; /* let the attempt find out what is wrong */
		while ((row = lr_db_fetch(lk->db))) {
			struct lr_item *it = find_item(lk, row[0]);
			bool full, behind;
			if (!it)
				continue;
			full = strtoull(row[2], NULL, 10) + permits_for(it) >
			       strtoull(row[1], NULL, 10);
			/* A held key, or a count the capacity no longer allows, is
			 * decided by an attempt at once: neither is worth waiting for. */
			if ((it->kind == LR_KIND_KEY && full) ||
			    permits_for(it) > strtoull(row[1], NULL, 10)) {
				free_now = true;
				lk->wake_on[0] = '\0';
				break;
			}
			behind = strtoull(row[3], NULL, 10) > 0;
			if ((full || behind) && free_now)
				snprintf(lk->status, sizeof(lk->status),
				         "waiting for '%s': %s/%s used, %s ahead in the queue",
				         display_name(it), row[2], row[1], row[3]);
			if (full || behind)
				free_now = false;
			if (lk->wake_on[0])
				continue;
			/* Read from a table, so checked before it goes back into
			 * a statement: a row that is not one of ours is no
			 * wake-up lock (polling still serves). */
			if (behind && row[5] && request_id_valid(row[5]))
				wait_lock_name(lk->wake_on, sizeof(lk->wake_on), row[5]);
			else if (full && !behind && row[4])
				grant_lock_name(lk->wake_on, sizeof(lk->wake_on),
				                strtoull(row[4], NULL, 10));
		}
	}
	if (free_now && lk->nnamed) {
		bool first = true;
		lr_sb_reset(&sb);
		lr_sb_puts(&sb, "SELECT ");
		for (size_t i = 0; i < lk->nitems; i++) {
			if (is_table(&lk->items[i]))
				continue;
			lr_sb_puts(&sb, first ? "IS_FREE_LOCK(" : " AND IS_FREE_LOCK(");
			lr_db_sb_quote(lk->db, &sb, lk->items[i].name);
			lr_sb_puts(&sb, ")");
			first = false;
		}
		if (lr_db_query(lk->db, lr_sb_str(&sb)) && (row = lr_db_fetch(lk->db)) && row[0])
			free_now = strcmp(row[0], "1") == 0;
	}
out:
	if (strcmp(lk->wake_on, lk->stale_wake) == 0)
		lk->wake_on[0] = '\0';
	lr_sb_finish(&sb);
	return free_now;
}

/*
 * Waits up to ms for something to change: in GET_LOCK on a wake-up lock
 * when we know one (returning at once when it is released), else on a
 * timer. Either way signals are served and the cancel flag ends the wait.
 */
static void wait_for_change(struct lr_lock *lk, unsigned ms)
{
	struct lr_sb sb;
	MYSQL_ROW row;
	bool woke = false;

	if (!lk->wake_on[0] || lk->galera || ms < 20 || !lr_db_connected(lk->db)) {
		nap(lk, ms);
		return;
	}
	lr_sb_init(&sb);
	lr_sb_puts(&sb, "SELECT GET_LOCK(");
	lr_db_sb_quote(lk->db, &sb, lk->wake_on);
	lr_sb_printf(&sb, ", %u.%03u)", ms / 1000, ms % 1000);
	lr_db_set_op_timeout(lk->db, ms + 5000);
	if (lr_db_query(lk->db, lr_sb_str(&sb)) && (row = lr_db_fetch(lk->db)) && row[0])
		woke = strcmp(row[0], "1") == 0;
	lr_db_set_op_timeout(lk->db, 0);
	lr_sb_finish(&sb);
	if (woke) {
		/* Let others blocked on the same lock wake too; never wait on it
		 * again (a stale lock would return at once). */
		snprintf(lk->stale_wake, sizeof(lk->stale_wake), "%s", lk->wake_on);
		named_do(lk, "RELEASE_LOCK", lk->wake_on);
	}
}

/* Keeps our queue places alive: every WAITER_RENEW_MS, for WAITER_TTL_MS
 * from the server's now, whatever the lease ttl, so a waiter whose lockrun
 * died stops blocking the queue within WAITER_TTL_MS + the grace. Like a
 * renewal of a hold, it only extends places not yet sweepable. A place
 * already swept is lost; the next attempt queues again. One statement. */
static void renew_waiter(struct lr_lock *lk)
{
	if (!lk->queued || lr_btimer_now_ms() < lk->waiter_renew_ms || !ensure_connected(lk))
		return;
	if (lr_db_queryf(lk->db,
	                 "UPDATE lr_waiters SET expires_at = NOW(6) + INTERVAL %u MICROSECOND "
	                 "WHERE request_id = '%s' AND " LR_SQL_UNSWEPT("expires_at"),
	                 WAITER_TTL_MS * 1000U, lk->request_id)) {
		if (lr_db_affected_rows(lk->db) != lk->ntable) {
			/* Some place was swept: give up the others too, or they
			 * would stand in the way of our own next places. */
			lr_log_info("our place in the queue expired; queueing again");
			lr_db_queryf(lk->db, "DELETE FROM lr_waiters WHERE request_id = '%s'",
			             lk->request_id);
			lk->queued = false;
			drop_wait_lock(lk);
		}
		lk->waiter_renew_ms = lr_btimer_now_ms() + WAITER_RENEW_MS;
	}
}

/* Leaves the queue: on giving up, on a signal, on an error. Best effort:
 * rows left behind expire after WAITER_TTL_MS anyway. One statement. */
static void dequeue(struct lr_lock *lk)
{
	lr_lock_set_cancel(lk, NULL);
	drop_wait_lock(lk);
	if (!lk->ever_queued)
		return;
	if (ensure_connected(lk))
		lr_db_queryf(lk->db, "DELETE FROM lr_waiters WHERE request_id = '%s'",
		             lk->request_id);
	lk->queued = false;
}

static enum lr_acquire result_of(struct lr_lock *lk, enum tx r)
{
	enum lr_acquire a;

	lr_log_status(NULL);
	switch (r) {
	case TX_OK:
		return LR_ACQ_GRANTED;
	case TX_BUSY:
		a = LR_ACQ_BUSY;
		break;
	case TX_KEY_BUSY:
		a = LR_ACQ_KEY_BUSY;
		break;
	case TX_INVALID:
		a = LR_ACQ_INVALID;
		break;
	default:
		/* A wait that ran out on a full server is a lock not acquired
		 * in time, not a database that is gone. */
		a = canceled(lk) ? LR_ACQ_CANCELED : lk->server_full ? LR_ACQ_FULL : LR_ACQ_ERROR;
		break;
	}
	/* Stopped or failed with a COMMIT's answer lost: it may have granted.
	 * Find out, and give back what we are not going to use. */
	lr_lock_set_cancel(lk, NULL);
	for (int i = 0; i < TX_RETRIES && lk->maybe_committed && ensure_connected(lk); i++) {
		enum tx s = settle(lk);
		if (s == TX_OK)
			lr_lock_release(lk, LR_END_ABORTED, 0);
		if (s != TX_RETRY)
			break;
		if (lk->maybe_committed)
			nap(lk, jitter(200));
	}
	dequeue(lk);
	return a;
}

/* With -v: what we wait for and who holds it, once, when waiting starts.
 * One query, and only when someone will read the answer. */
static void announce(struct lr_lock *lk)
{
	struct lr_sb sb;
	MYSQL_ROW row;
	size_t n = 0;

	if (lr_log_level() < LR_LOG_VERBOSE)
		return;
	lr_sb_init(&sb);
	lr_sb_printf(&sb, "waiting: %s", lk->err);
	if (lk->ntable) {
		struct lr_sb q;
		lr_sb_init(&q);
		lr_sb_puts(&q,
		           "SELECT h.resource, g.host, g.pid, LEFT(g.command, 40) FROM lr_holds h "
		           "JOIN lr_grants g ON g.id = h.grant_id WHERE h.resource IN (");
		add_name_list(lk, &q);
		lr_sb_puts(&q, ") AND " LR_SQL_UNSWEPT(
		                   "h.expires_at") " ORDER BY h.resource, h.fence LIMIT 4");
		if (lr_db_query(lk->db, lr_sb_str(&q))) {
			while ((row = lr_db_fetch(lk->db))) {
				/* Host and command are whatever another client
				 * stored: shown escaped, never raw on a terminal. */
				struct lr_item *it = find_item(lk, row[0]);
				lr_sb_puts(&sb, n ? ", '" : "; '");
				if (it)
					lr_sb_puts(&sb, display_name(it));
				else
					lr_text_show(&sb, row[0], 80);
				lr_sb_puts(&sb, "' held by ");
				lr_text_show(&sb, row[1], 64);
				lr_sb_printf(&sb, ":%s (", row[2]);
				lr_text_show(&sb, row[3], 40);
				lr_sb_puts(&sb, ")");
				n++;
			}
		}
		lr_sb_finish(&q);
	}
	lr_log_info("%s", lr_sb_str(&sb));
	lr_sb_finish(&sb);
}

/*
 * Takes every item of the request, waiting up to wait_s seconds (< 0:
 * forever, 0: one attempt). A request that has to wait takes a place in
 * the queue of each of its resources and is granted only when it is first
 * in all of them and fits. Meanwhile it polls with a cheap read at a
 * jittered, growing interval (or sleeps in GET_LOCK on a holder's wake-up
 * lock), renews its queue places every WAITER_RENEW_MS, and runs the locking
 * transaction only when the read says it could succeed: a few statements
 * a second at most.
 */
enum lr_acquire lr_lock_acquire(struct lr_lock *lk, double wait_s)
{
	uint64_t deadline = wait_s < 0 ? UINT64_MAX : now_ms() + (uint64_t)llround(wait_s * 1000.0);
	unsigned interval = POLL_MIN_MS;
	bool announced = false;

	lk->wait_until = deadline;
	for (;;) {
		bool last = now_ms() >= deadline;
		enum tx r = attempt(lk, !last);

		if (r != TX_BUSY && !(r == TX_RETRY && !last))
			return result_of(lk, r);
		if (canceled(lk))
			return result_of(lk, TX_FAIL);
		if (last)
			return result_of(lk, r);
		if (!announced && r == TX_BUSY) {
			announce(lk);
			announced = true;
		}

		/* Wait until the read says an attempt could succeed, the
		 * deadline comes, or we are told to stop. */
		for (;;) {
			uint64_t now = now_ms();
			unsigned ms;
			if (now >= deadline)
				break;
			ms = jitter(interval);
			if (lk->wake_on[0] && !lk->galera)
				ms = jitter(POLL_MAX_MS * 2); /* woken early: a fallback */
			if (lk->queued) {
				uint64_t renew = lk->waiter_renew_ms;
				uint64_t b = lr_btimer_now_ms();
				if (renew > b && renew - b < ms)
					ms = (unsigned)(renew - b);
			}
			if (now + ms > deadline)
				ms = (unsigned)(deadline - now);
			wait_for_change(lk, ms ? ms : 1);
			if (canceled(lk))
				return result_of(lk, TX_FAIL);
			renew_waiter(lk);
			interval = interval * 3 / 2 > POLL_MAX_MS ? POLL_MAX_MS : interval * 3 / 2;
			if (now_ms() >= deadline || !lk->queued || !lr_db_connected(lk->db) ||
			    looks_free(lk))
				break;
			lr_log_status(lk->status);
		}
	}
}

/*
 * Extends every hold of the grant by the ttl, from the server's now, but
 * only while none is sweepable: a hold past its grace may already have
 * been swept and its permit granted to someone else. One that expired
 * within the grace (the server's clock stepped forward) cannot have been:
 * the sweep writes the same row, and until it is swept its permits count
 * as used. Matched rows (the connection uses CLIENT_FOUND_ROWS) must
 * equal the items. Named locks live as long as their connection: a new
 * connection means they are gone.
 * One statement. Returns false on a database error (the lease is then
 * unknown); *lost is set when the lease is known to be gone.
 */
bool lr_lock_renew(struct lr_lock *lk, bool *lost)
{
	uint64_t t0;

	*lost = false;
	if (lk->nnamed && lk->named_gen != lr_db_generation(lk->db)) {
		*lost = true;
		snprintf(lk->err, sizeof(lk->err),
		         "the connection holding the named locks was lost");
		return true;
	}
	if (!lk->ntable) {
		/* A round trip proves the connection, and so the locks, alive. */
		if (lr_db_query(lk->db, "DO 0"))
			return true;
		*lost = true;
		snprintf(lk->err, sizeof(lk->err),
		         "the connection holding the named locks was lost: %s",
		         lr_db_error(lk->db));
		return true;
	}
	if (!ensure_connected(lk))
		return false;
	t0 = lr_btimer_now_ms();
	if (!lr_db_queryf(lk->db,
	                  "UPDATE lr_holds SET expires_at = NOW(6) + INTERVAL %llu MICROSECOND "
	                  "WHERE grant_id = %llu AND " LR_SQL_UNSWEPT("expires_at"),
	                  (unsigned long long)lk->ttl_ms * 1000ULL,
	                  (unsigned long long)lk->grant_id)) {
		take_db_error(lk);
		if (lk->nnamed && !lr_db_connected(lk->db)) {
			*lost = true;
			snprintf(lk->err, sizeof(lk->err),
			         "the connection holding the named locks was lost: %s",
			         lr_db_error(lk->db));
			return true;
		}
		return false;
	}
	if (lr_db_affected_rows(lk->db) != lk->ntable) {
		*lost = true;
		snprintf(lk->err, sizeof(lk->err),
		         "the lease of grant %llu has expired or was revoked",
		         (unsigned long long)lk->grant_id);
	} else {
		lk->valid_from_ms = t0;
	}
	return true;
}

static const char *end_name(enum lr_end how)
{
	switch (how) {
	case LR_END_EXITED:
		return "exited";
	case LR_END_SIGNALED:
		return "signaled";
	case LR_END_LOST:
		return "lost";
	case LR_END_SPAWN_FAILED:
		return "spawn_failed";
	case LR_END_ABORTED:
		return "aborted";
	}
	return "aborted";
}

/*
 * Gives the grant back and closes its lock-log entry, in one transaction
 * (four round trips), then drops the named and wake-up locks, which wakes
 * the next waiter. Idempotent, so after a transient error or a lost COMMIT
 * answer it is simply run again on a fresh connection, until it is known
 * to have happened or the lease has run out anyway.
 */
bool lr_lock_release(struct lr_lock *lk, enum lr_end how, int status)
{
	unsigned backoff = 20;
	char exit_status[16] = "NULL", term_signal[16] = "NULL";
	bool ok = !lk->grant_id;
	unsigned e;

	lr_lock_set_cancel(lk, NULL);
	if (how == LR_END_EXITED)
		snprintf(exit_status, sizeof(exit_status), "%d", status);
	else if (how == LR_END_SIGNALED || how == LR_END_LOST)
		snprintf(term_signal, sizeof(term_signal), "%d", status);
	for (int i = 0; !ok && (i < 2 || lr_btimer_now_ms() < lk->valid_from_ms + lk->ttl_ms);
	     i++) {
		if (ensure_connected(lk) && lr_db_query(lk->db, "START TRANSACTION") &&
		    lr_db_queryf(lk->db, "DELETE FROM lr_holds WHERE grant_id = %llu",
		                 (unsigned long long)lk->grant_id) &&
		    lr_db_queryf(
		        lk->db,
		        "UPDATE lr_grants SET ended_at = NOW(6), end_reason = '%s', "
		        "exit_status = %s, term_signal = %s WHERE id = %llu AND ended_at IS NULL",
		        end_name(how), exit_status, term_signal,
		        (unsigned long long)lk->grant_id) &&
		    lr_db_query(lk->db, "COMMIT")) {
			ok = true;
			break;
		}
		/* Judge the failed statement, not the ROLLBACK after it. */
		e = lr_db_errno(lk->db);
		take_db_error(lk);
		if (lr_db_connected(lk->db))
			lr_db_query(lk->db, "ROLLBACK");
		if (!lr_db_error_is_retryable(e))
			break;
		nap(lk, jitter(backoff));
		backoff = backoff * 2 > 1000 ? 1000 : backoff * 2;
	}
	if (lr_db_connected(lk->db)) {
		release_named(lk);
		if (lk->wake_held) {
			char name[64];
			grant_lock_name(name, sizeof(name), lk->grant_id);
			named_do(lk, "RELEASE_LOCK", name);
			lk->wake_held = false;
		}
	}
	return ok;
}
