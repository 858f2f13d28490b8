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
 * A member may be passed over (SKIP): one that says it is not Synced in
 * the primary component (a state-transfer donor, a joiner), or that did
 * not answer. A node knows only its own state, so every client asks the
 * same member, the first of the agreed order, and hears the same answer:
 * they pass it over alike and agree on the next one.
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

long lr_writer_pick(const char *incoming, size_t nhosts, unsigned port, const bool *skip,
                    lr_writer_match_fn match, void *arg);

#endif
