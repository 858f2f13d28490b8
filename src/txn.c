#include "txn.h"

#include <stdio.h>
#include <time.h>

#include <mysqld_error.h>

#define ATTEMPTS 10

/* Errors after which the server has rolled the transaction back, or
 * will once we say ROLLBACK (1205 undoes only the statement). */
static bool again(unsigned e)
{
	return lr_db_error_is_conflict(e) || e == ER_ERROR_DURING_COMMIT;
}

/* A pause before the next attempt, growing, so two sweeps that keep
 * meeting drift apart: 20 ms, 40 ms, ... up to 640 ms. */
static void pause_before(int attempt)
{
	long ms = 20L << (attempt < 5 ? attempt : 5);
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

	nanosleep(&ts, NULL);
}

/*
 * Runs fn in a transaction, up to ATTEMPTS times while the server rolls
 * it back. LR_TXN_COMMIT: committed. LR_TXN_ROLLBACK: fn refused, rolled
 * back. LR_TXN_DBERROR: failed; err says why. Costs fn's statements plus
 * two (START TRANSACTION, COMMIT) per attempt.
 */
enum lr_txn lr_txn_run(lr_db *db, lr_txn_fn fn, void *arg, char *err, size_t errlen)
{
	enum lr_txn r = LR_TXN_DBERROR;
	unsigned e = 0;

	for (int attempt = 0; attempt < ATTEMPTS; attempt++) {
		if (attempt)
			pause_before(attempt - 1);
		if (!lr_db_query(db, "START TRANSACTION"))
			goto failed;
		r = fn(db, arg);
		if (r == LR_TXN_ROLLBACK) {
			lr_db_query(db, "ROLLBACK");
			return r;
		}
		if (r == LR_TXN_COMMIT && lr_db_query(db, "COMMIT"))
			return r;
	failed:
		/* Judge the failed statement: the ROLLBACK resets the error. */
		e = lr_db_errno(db);
		snprintf(err, errlen, "%s", lr_db_error(db));
		if (lr_db_connected(db))
			lr_db_query(db, "ROLLBACK");
		if (!again(e))
			break;
	}
	return LR_TXN_DBERROR;
}
