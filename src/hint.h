/*
 * What to do next: for the errors a newcomer meets first (a refused
 * login, no rights on the database yet, a database or socket that is not
 * there), one sentence that names the setting or the command that mends
 * it, from what the configuration says. The error itself stays as the
 * server or connector worded it; the hint follows it.
 *
 * May use: config, db, strbuf, lr_build (generated).
 */
#ifndef LR_HINT_H
#define LR_HINT_H

#include "config.h"

#include <stddef.h>

/* "; HINT" into buf for the connection error err (a server's or the
 * connector's number, lr_db_errno), or "" when there is none; returns
 * buf. */
const char *lr_hint_connect(unsigned err, const struct lr_config *cfg, char *buf, size_t len);

/* "; HINT" into buf for err, a server's refusal after connecting, met by
 * lockrunctl's command cmd: a table refused to lockrun's own account
 * (1142), or init's rights, or the procedures of its read-only commands
 * missing or not granted (1305, 1370); "" when there is none; returns buf. */
const char *lr_hint_rights(unsigned err, const char *cmd, const struct lr_config *cfg, char *buf,
                           size_t len);

#endif
