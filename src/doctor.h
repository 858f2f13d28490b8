/*
 * lockrunctl doctor: checks the server and account it is pointed at for
 * what lockrun needs, and explains each finding. A problem is something
 * that would make lockrun fail or be unsafe there; a warning is worth a
 * look but does not stop it.
 *
 * May use: db, duration, report, schema, strbuf, text.
 */
#ifndef LR_DOCTOR_H
#define LR_DOCTOR_H

#include <stdbool.h>
#include <stdio.h>

#include "db.h"

struct lr_doctor_opts {
	double ttl;          /* the lease lockrun uses there: [lock] ttl, seconds */
	double clock_warn_s; /* warn when the clocks differ more than this */
	bool json;
	/* With more than one host configured: the loop and parameters to
	 * reach each of them, for their clocks (NULL: not asked). */
	uv_loop_t *loop;
	const struct lr_db_params *params;
};

bool lr_doctor_run(lr_db *db, const struct lr_doctor_opts *o, FILE *out, unsigned *problems);

#endif
