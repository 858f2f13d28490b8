/* The SQL of administration: capacities and their audit, and status. */
#ifndef LR_ADMIN_H
#define LR_ADMIN_H

#include <stdbool.h>
#include <stdio.h>

#include "db.h"

enum lr_admin_result { LR_ADMIN_OK, LR_ADMIN_INVALID, LR_ADMIN_ERROR };

enum lr_admin_result lr_admin_set_capacity(lr_db *db, const char *name, unsigned capacity,
                                           const char *os_user, const char *host, long *old_cap,
                                           char *err, size_t errlen);
bool lr_admin_status(lr_db *db, const char *name, bool json, FILE *out, bool *found, char *err,
                     size_t errlen);

#endif
