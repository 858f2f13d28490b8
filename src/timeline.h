/*
 * lockrunctl timeline: the lock log as a picture. One lane per resource
 * (per holder slot for a semaphore or read lock), a bar per grant from its
 * grant to its end, coloured by how it ended, its wait drawn before it:
 * a standalone SVG (no scripts, no external references; hover text with
 * the details) or a compact text rendering. Uses db, history (what counts
 * as ended), text, strbuf and duration.
 *
 * May use: db, duration, history, report, strbuf, text.
 */
#ifndef LR_TIMELINE_H
#define LR_TIMELINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "db.h"

struct lr_timeline_query {
	char **names; /* resources (a key by its name or "id:KEY"); none: all */
	size_t nnames;
	unsigned long long since; /* the window starts this many seconds ago */
	unsigned long long until; /* and ends this many seconds ago */
};

bool lr_timeline_print(lr_db *db, const struct lr_timeline_query *q, bool svg, FILE *out,
                       size_t *shown, char *err, size_t errlen);

#endif
