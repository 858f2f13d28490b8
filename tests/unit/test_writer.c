/* The Galera writer's choice (writer.h): the first member of the
 * cluster's list that the configuration names, whatever order the
 * configuration lists the nodes in, by address or by a looked-up name. */
#include <string.h>

#include "tap.h"
#include "writer.h"

/* A configuration: host i has the addresses in addrs[i] (space-separated,
 * with spaces around), standing for names already looked up. */
struct conf {
	const char *addrs[4];
};

static bool has(size_t h, const char *ip, void *arg)
{
	const struct conf *c = arg;
	char want[80];

	snprintf(want, sizeof(want), " %s ", ip);
	return c->addrs[h] && strstr(c->addrs[h], want) != NULL;
}

int main(void)
{
	const char *members = "10.0.0.2:3306,10.0.0.3:3306,10.0.0.1:3306";
	struct conf a = {{" 10.0.0.1 ", " 10.0.0.2 ", " 10.0.0.3 "}};
	struct conf b = {{" 10.0.0.3 ", " 10.0.0.1 ", " 10.0.0.2 "}};
	struct conf c = {{" 10.0.0.1 ", " 10.0.0.3 "}};
	struct conf v6 = {{" 10.0.0.1 ", " fd00::2 "}};
	struct conf none = {{" 192.0.2.1 ", " 192.0.2.2 "}};

	/* Every order of the same hosts picks the same node: 10.0.0.2. */
	ok(lr_writer_pick(members, 3, 3306, NULL, has, &a) == 1,
	   "the first member, host 1 in order a");
	ok(lr_writer_pick(members, 3, 3306, NULL, has, &b) == 2,
	   "the same member, host 2 in order b");
	/* A configuration without the first member takes the next one. */
	ok(lr_writer_pick(members, 2, 3306, NULL, has, &c) == 1,
	   "first configured member: 10.0.0.3");
	/* The port must be the configured one. */
	ok(lr_writer_pick(members, 3, 3307, NULL, has, &a) == -1, "another port: no writer");
	ok(lr_writer_pick("10.0.0.2:3307,10.0.0.1:3306", 3, 3306, NULL, has, &a) == 0,
	   "a member on another port is passed over");
	/* IPv6 members come bracketed. */
	ok(lr_writer_pick("[fd00::2]:3306,10.0.0.1:3306", 2, 3306, NULL, has, &v6) == 1,
	   "an IPv6 member, bracketed");
	/* Nothing configured, nothing usable. */
	ok(lr_writer_pick(members, 2, 3306, NULL, has, &none) == -1, "no member configured");
	ok(lr_writer_pick("", 3, 3306, NULL, has, &a) == -1, "an empty list");
	ok(lr_writer_pick(NULL, 3, 3306, NULL, has, &a) == -1, "no list");
	ok(lr_writer_pick("AUTO", 3, 3306, NULL, has, &a) == -1, "AUTO, no port");
	ok(lr_writer_pick("10.0.0.2:x,10.0.0.1:", 3, 3306, NULL, has, &a) == -1,
	   "ports not numbers");
	ok(lr_writer_pick(" 10.0.0.3:3306", 3, 3306, NULL, has, &a) == 2, "a space after a comma");
	/* A member passed over (not Synced, not answering): the next one, in
	 * the cluster's order, whatever the configuration's. */
	bool skip_w[3] = {false, true, false};
	ok(lr_writer_pick(members, 3, 3306, skip_w, has, &a) == 2,
	   "writer skipped: the next member, 10.0.0.3 (host 2 in order a)");
	bool skip_wb[3] = {false, false, true};
	ok(lr_writer_pick(members, 3, 3306, skip_wb, has, &b) == 0,
	   "writer skipped: the same member, 10.0.0.3 (host 0 in order b)");
	bool skip_all[3] = {true, true, true};
	ok(lr_writer_pick(members, 3, 3306, skip_all, has, &a) == -1, "every member skipped");
	return tap_done();
}
