/*
 * Galera's writer node: which of the configured hosts every lockrun of a
 * cluster sends its lock calls to. A Galera node reports the cluster's
 * members in wsrep_incoming_addresses, in an order every member of the
 * primary component reports alike (by their group communication ids); the
 * writer is the first member there that the configuration names. Clients
 * that list the nodes in different orders (each its own node first) still
 * agree, and so write the hot rows on one node, where Galera's certifying
 * of conflicting writes across nodes cannot stall them.
 *
 * May use: nothing of lockrun's.
 */
#ifndef LR_WRITER_H
#define LR_WRITER_H

#include <stdbool.h>
#include <stddef.h>

/* Whether configured host HOST has the address IP (a numeric address, as
 * the members list gives it). */
typedef bool (*lr_writer_match_fn)(size_t host, const char *ip, void *arg);

long lr_writer_pick(const char *incoming, size_t nhosts, unsigned port, lr_writer_match_fn match,
                    void *arg);

#endif
