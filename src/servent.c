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
 * answer costs about 0.15 ms of every run, and some 200 system calls: libc
 * loads its name-service modules for it (Debian's nsswitch.conf says
 * "services: db files", so it first searches every library directory for
 * libnss_db, which nothing installs) and then reads /etc/services. That one
 * question is answered here with "no such service", so the connector keeps
 * its built-in 3306 (MYSQL_TCP_PORT in the environment, which it reads
 * next, still wins, as before). lockrun's documented default port is 3306;
 * only a system whose /etc/services gives mysql another port would see a
 * difference, and lockrun's messages already named 3306 there. Every other
 * question goes to libc's reentrant lookup, unchanged.
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
