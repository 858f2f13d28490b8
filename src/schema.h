/* The database schema: numbered migrations compiled in from sql/, applied
 * by `lockrunctl init`, and checked by lockrun before it takes a lock.
 *
 * May use: db, log, strbuf.
 */
#ifndef LR_SCHEMA_H
#define LR_SCHEMA_H

#include <stdbool.h>
#include <stddef.h>

#include "db.h"

struct lr_migration {
	unsigned version;
	const char *name;
	const char *sql;
};

extern const struct lr_migration lr_migrations[];
extern const size_t lr_migrations_count;
/* The files of sql/routines concatenated in order, applied after the
 * migrations, and its SHA-256. */
extern const char lr_routines_sql[];
extern const char lr_routines_digest[];

bool lr_schema_version(lr_db *db, unsigned *version, char *err, size_t errlen);
bool lr_schema_check(lr_db *db, char *err, size_t errlen);
bool lr_schema_settings(lr_db *db, char *err, size_t errlen);
bool lr_schema_migrate(lr_db *db, unsigned *from, unsigned *to, bool *routines, char *err,
                       size_t errlen);

#endif
