/*
 * getservbyname() for the programs' own processes, ahead of libc's.
 *
 * May use: nothing of lockrun's.
 *
 * Linked into each program (not the core library), so that the dynamic
 * loader finds this definition first; it has no header: <netdb.h>
 * declares it.
 *
 * Connector/C's start-up (its first mysql_init()) asks for the port of the
 * "mysql" service, to have a default for connections that name none. The
 * answer costs about 0.15 ms of every run, more than the run spends on
 * anything of its own before it connects: libc loads its name-service
 * modules for it (Debian's nsswitch.conf says "services: db files", so it
 * first searches every library directory for libnss_db, some 120 failed
 * opens) and then reads /etc/services. That question is answered here with
 * "no such service", so the connector keeps its built-in 3306 (or the
 * MYSQL_TCP_PORT of the environment, which it reads next, as before). This
 * changes lockrun only where /etc/services gives mysql another port, which
 * the documented default of 3306 never followed anyway (lockrun names
 * 3306 in its messages). Every other question goes to libc's reentrant
 * lookup, unchanged. Costs nothing when not called.
 */

#include <netdb.h>
#include <string.h>

struct servent *getservbyname(const char *name, const char *proto)
{
	static struct servent ent;
	static char buf[1024];
	struct servent *found = NULL;

	if (name && strcmp(name, "mysql") == 0 && (!proto || strcmp(proto, "tcp") == 0))
		return NULL;
	if (getservbyname_r(name, proto, &ent, buf, sizeof(buf), &found) != 0)
		return NULL;
	return found;
}
