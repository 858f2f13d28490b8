/*
 * --named locks: the server's own named locks (GET_LOCK), held by the main
 * connection for as long as it lives. No table rows, no schema, no
 * procedures, no fencing token. Refused on Galera, where they are local to
 * one node and would not exclude clients of the others.
 *
 * May use: request, item, db, strbuf.
 */
#ifndef LR_NAMED_H
#define LR_NAMED_H

#include <stdbool.h>

#include "request.h"

enum lr_named {
	LR_NAMED_OK,
	LR_NAMED_BUSY,   /* one is held by another session: nothing taken */
	LR_NAMED_GALERA, /* a Galera node or a MySQL group's member: refused */
	LR_NAMED_ERROR,  /* the statement failed; lk->err says why */
};

enum lr_named lr_named_take(struct lr_request *lk);
bool lr_named_release(struct lr_request *lk);
bool lr_named_alive(struct lr_request *lk, bool *lost);

#endif
