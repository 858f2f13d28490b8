/*
 * What a request asks for: items (semaphore permits, mutexes, read or
 * write locks, an idempotency key, server named locks) and their names.
 * Parsing and checking them needs no database.
 *
 * May use: nothing of lockrun's.
 */
#ifndef LR_ITEM_H
#define LR_ITEM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LR_NAME_MAX 64

enum lr_kind {
	LR_KIND_SEMAPHORE,
	LR_KIND_MUTEX,
	LR_KIND_READ,
	LR_KIND_WRITE,
	LR_KIND_KEY,   /* an idempotency key: never waited for */
	LR_KIND_NAMED, /* a server named lock (GET_LOCK); no table rows */
};

struct lr_item {
	enum lr_kind kind;
	char name[LR_NAME_MAX + 4]; /* the resource row's name: keys get an "id:" prefix */
	unsigned count;             /* permits asked for (semaphores); 1 otherwise */
	uint64_t fence;             /* the fencing token, once granted */
	uint64_t ticket;            /* place in the resource's queue, once queued */
};

bool lr_name_valid(const char *name);
bool lr_item_parse(struct lr_item *it, enum lr_kind kind, const char *arg, char *err,
                   size_t errlen);
const char *lr_kind_name(enum lr_kind k);
/* The name as the user gave it: keys without their "id:" prefix. */
const char *lr_item_display_name(const struct lr_item *it);

#endif
