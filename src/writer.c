#include "writer.h"

#include <stdlib.h>
#include <string.h>

/* One member's "address:port" (IPv6 as "[address]:port"), split in place
 * into its address and port; false if it has no port or the port is not
 * a number. */
static bool split(char *member, char **ip, unsigned long *port)
{
	char *colon = strrchr(member, ':'), *end;

	if (!colon || colon == member)
		return false;
	*colon = '\0';
	*port = strtoul(colon + 1, &end, 10);
	if (*end || end == colon + 1)
		return false;
	*ip = member;
	if (member[0] == '[' && colon[-1] == ']') {
		colon[-1] = '\0';
		*ip = member + 1;
	}
	return true;
}

/*
 * The index of the configured host that is the cluster's writer: the first
 * member of INCOMING (wsrep_incoming_addresses: "address:port" entries
 * joined by commas) whose port is PORT and whose address MATCH says one of
 * the NHOSTS configured hosts has, passing over host h where SKIP[h] (SKIP
 * may be NULL); -1 if no member is configured (or the list is empty,
 * "AUTO" or unparsable), or every configured one is skipped. Called after
 * each new connection to a Galera node, and now and then on a long-lived
 * one, when more than one host is configured. No I/O of its own; MATCH
 * may look names up.
 */
long lr_writer_pick(const char *incoming, size_t nhosts, unsigned port, const bool *skip,
                    lr_writer_match_fn match, void *arg)
{
	char *list, *member, *save = NULL, *ip;
	unsigned long p;
	long found = -1;

	if (!incoming || !*incoming || !(list = strdup(incoming)))
		return -1;
	for (member = strtok_r(list, ",", &save); member && found < 0;
	     member = strtok_r(NULL, ",", &save)) {
		while (*member == ' ')
			member++;
		if (!split(member, &ip, &p) || p != port)
			continue;
		for (size_t h = 0; h < nhosts && found < 0; h++)
			if ((!skip || !skip[h]) && match(h, ip, arg))
				found = (long)h;
	}
	free(list);
	return found;
}
