/*
 * lockrunctl's transactions: a function that runs inside START
 * TRANSACTION ... COMMIT, run again whole when the server rolled it back
 * (a lost conflict: deadlock 1213, lock wait timeout 1205, snapshot
 * isolation's 1020; Galera's certification failure at COMMIT). The function must read everything it
 * decides on inside the transaction, so a second run decides afresh.
 *
 * May use: db.
 */
#ifndef LR_TXN_H
#define LR_TXN_H

#include <stdbool.h>
#include <stddef.h>

#include "db.h"

enum lr_txn {
	LR_TXN_COMMIT,   /* done: commit */
	LR_TXN_ROLLBACK, /* refused (the function set its own message): roll back */
	LR_TXN_DBERROR,  /* a statement failed: roll back, retry if the server says so */
};

typedef enum lr_txn (*lr_txn_fn)(lr_db *db, void *arg);

enum lr_txn lr_txn_run(lr_db *db, lr_txn_fn fn, void *arg, char *err, size_t errlen);

#endif
