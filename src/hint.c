#include "hint.h"

#include <stdio.h>
#include <string.h>

#include <errmsg.h>
#include <mysqld_error.h>

#include "lr_build.h"
#include "strbuf.h"

/* Where the settings came from, for "check X in Y". */
static const char *origin(const struct lr_config *cfg)
{
	return cfg->path ? cfg->path
	                 : "no configuration file (none with -c, $LOCKRUN_CONFIG or "
	                   "/etc/lockrun.conf)";
}

/* Whether the server is on this host: its socket, or a loopback address,
 * where an anonymous account made by mariadb-install-db can match first. */
static bool local_server(const struct lr_db_params *db)
{
	for (size_t i = 0; i < db->nhosts; i++) {
		const char *h = db->hosts[i];

		if (strcmp(h, "localhost") != 0 && strncmp(h, "127.", 4) != 0 &&
		    strcmp(h, "::1") != 0)
			return false;
	}
	return true;
}

/* Whether lockrun logs in over TCP without TLS: MariaDB refuses such a
 * login with a plain 1045 when require_secure_transport is on. */
static bool tcp_in_clear(const struct lr_db_params *db)
{
	if (db->ssl_ca || db->ssl_capath || db->ssl_cert || db->ssl_fingerprint || db->option_file)
		return false;
	for (size_t i = 0; i < db->nhosts; i++)
		if (strcmp(db->hosts[i], "localhost") != 0)
			return true;
	return false;
}

/*
 * The hint for a refused login (1045). The server says only that user and
 * password did not match; what lockrun knows is where each came from.
 * With the server on this host, an anonymous account ''@'localhost' is
 * the other common cause: the server matches it before 'user'@'%', so
 * the right password is refused, and no tool can connect to say so. And
 * MariaDB refuses a login without TLS by the same number when it requires
 * secure transport.
 */
static void refused(struct lr_sb *sb, const struct lr_config *cfg)
{
	const struct lr_db_params *db = &cfg->db;

	if (db->option_file && !cfg->password_from)
		lr_sb_printf(sb, "; check the account in option_file %s", db->option_file);
	else
		lr_sb_printf(sb, "; check user '%s' and %s", db->user ? db->user : "",
		             cfg->password_from ? cfg->password_from
		                                : "the password (none is configured)");
	lr_sb_printf(sb, " in %s", origin(cfg));
	if (local_server(db) && db->user)
		lr_sb_printf(sb,
		             ". If they are right, an anonymous account ''@'localhost' (left by "
		             "mariadb-install-db) may shadow '%s'@'%%': an administrator "
		             "removes it with DROP USER ''@'localhost'",
		             db->user);
	if (tcp_in_clear(db))
		lr_sb_puts(sb, ". A MariaDB server with require_secure_transport = ON refuses a "
		               "login without TLS the same way: then set ssl_ca and "
		               "ssl_verify_server_cert = true");
}

/*
 * The hint for err, a failed connect's error, into buf. Called once, on
 * the way out with exit status 69; no system calls.
 */
const char *lr_hint_connect(unsigned err, const struct lr_config *cfg, char *buf, size_t len)
{
	const struct lr_db_params *db = &cfg->db;
	const char *d = db->database ? db->database : "lockrun";
	struct lr_sb s, *sb = &s;

	lr_sb_init(sb);

	switch (err) {
	case ER_ACCESS_DENIED_ERROR:
		refused(sb, cfg);
		break;
	case ER_DBACCESS_DENIED_ERROR:
		lr_sb_printf(sb,
		             "; the account has no rights on database '%s' yet: if 'lockrunctl "
		             "init' has not run there, an administrator runs it; then gives the "
		             "account the role %s_api (sql/grant.sql; lockrunctl(1), EXAMPLES). "
		             "On MySQL, ANSI_QUOTES in the global sql_mode denies a role's rights "
		             "too: 'lockrunctl doctor' run by an administrator says what to do",
		             d, d);
		break;
	case ER_BAD_DB_ERROR:
		lr_sb_printf(sb,
		             "; an administrator creates it (CREATE DATABASE `%s`), then runs "
		             "'lockrunctl init'; or set database in %s",
		             d, origin(cfg));
		break;
	case CR_CONNECTION_ERROR:
		lr_sb_printf(sb,
		             "; no server answers on this host's socket: for a server elsewhere "
		             "set host (and port) in [database] of %s, or socket for another path",
		             origin(cfg));
		break;
	default:
		break;
	}
	snprintf(buf, len, "%s", sb->oom ? "" : lr_sb_str(sb));
	lr_sb_finish(sb);
	return buf;
}

/*
 * The hint for a command refused by the server after connecting: err is
 * its number, cmd the lockrunctl command. A table refused (1142, 1143)
 * means the account is lockrun's own, which may only call the
 * procedures: the operator's commands need the operator account, init
 * an administrator. Called once, on the way out; no system calls.
 */
const char *lr_hint_rights(unsigned err, const char *cmd, const struct lr_config *cfg, char *buf,
                           size_t len)
{
	const char *d = cfg->db.database ? cfg->db.database : "lockrun";
	const char *u = cfg->db.user ? cfg->db.user : "";
	struct lr_sb s, *sb = &s;

	lr_sb_init(sb);
	if (strcmp(cmd, "init") == 0 &&
	    (err == ER_TABLEACCESS_DENIED_ERROR || err == ER_DBACCESS_DENIED_ERROR ||
	     err == ER_SPECIFIC_ACCESS_DENIED_ERROR))
		lr_sb_printf(sb,
		             "; 'init' needs an administrator (sql/grant.sql), not user '%s' of "
		             "%s: give -c FILE with one, or, as root on the server's host, "
		             "-c /dev/null to connect through the socket as root",
		             u, origin(cfg));
	else if (err == ER_TABLEACCESS_DENIED_ERROR || err == ER_COLUMNACCESS_DENIED_ERROR)
		lr_sb_printf(sb,
		             "; '%s' needs the operator account, not user '%s' of %s: an "
		             "administrator runs GRANT SELECT, INSERT, UPDATE, DELETE ON `%s`.* "
		             "TO an account (sql/operator.sql) and puts it in %s (mode 0600, "
		             "root), which lockrunctl reads first",
		             cmd, u, origin(cfg), d, LR_OPERATOR_CONFIG);
	else if (err == ER_SP_DOES_NOT_EXIST || err == ER_PROCACCESS_DENIED_ERROR)
		/* A read-only command through the procedures of lockrun's own
		 * account (75-views.sql): not there, or not granted, before
		 * 'init' of this version. */
		lr_sb_printf(sb,
		             "; user '%s' of %s reads through procedures that 'lockrunctl init' "
		             "of this version installs and grants to the role %s_api: an "
		             "administrator runs it; or use the operator account (%s)",
		             u, origin(cfg), d, LR_OPERATOR_CONFIG);
	snprintf(buf, len, "%s", sb->oom ? "" : lr_sb_str(sb));
	lr_sb_finish(sb);
	return buf;
}
