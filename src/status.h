/* lockrunctl status: resources, their holders and waiters, now.
 *
 * May use: db, duration, lease, report, strbuf.
 */
#ifndef LR_STATUS_H
#define LR_STATUS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "db.h"

enum lr_status_format { LR_STATUS_TEXT, LR_STATUS_JSON, LR_STATUS_PROMETHEUS };

/* view: read through the procedure lockrun_status (lockrun's own account,
 * which may not read the tables): the same, without commands and request
 * ids. */
bool lr_status_print(lr_db *db, const char *name, enum lr_status_format fmt, bool view, FILE *out,
                     bool *found, char *err, size_t errlen);

#endif
