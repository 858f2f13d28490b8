#include "config.h"

#include <errno.h>
#include <grp.h>
#include <stdarg.h>
#include <limits.h>
#include <math.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ini.h>
#include <mariadb_version.h>

#include "duration.h"
#include "log.h"
#include "lr_build.h"
#include "pubkey.h"

/* State of one parse: the first error wins, inih gives its line number. */
struct parse {
	struct lr_config *cfg;
	const char *path;
	char msg[400];
	bool failed;
	bool holds_password;
	char last[64]; /* the key of the line before, "section.name" */
};

void lr_config_init(struct lr_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->db.connect_timeout = 5;
	cfg->db.galera_writer = true;
	cfg->db.read_timeout = 10;
	cfg->db.write_timeout = 10;
	cfg->lock.ttl = 30;
	cfg->lock.wait = -1;
	cfg->lock.kill_after = 5;
	cfg->lock.conflict_exit = 75;
	cfg->lock.done_exit = 0;
	cfg->lock.on_lost = LR_ON_LOST_KILL;
	cfg->lock.local_queue = true;
}

static void wipe(char *s)
{
	if (s) {
		volatile char *v = s;
		while (*v)
			*v++ = 0;
	}
}

static void free_hosts(struct lr_db_params *db)
{
	for (size_t i = 0; i < db->nhosts; i++)
		free(db->hosts[i]);
	free(db->hosts);
	db->hosts = NULL;
	db->nhosts = 0;
}

void lr_config_finish(struct lr_config *cfg)
{
	struct lr_db_params *db = &cfg->db;

	free_hosts(db);
	wipe(db->password);
	free(db->password);
	free(db->socket);
	free(db->user);
	free(db->database);
	free(db->ssl_ca);
	free(db->ssl_capath);
	free(db->ssl_cert);
	free(db->ssl_key);
	free(db->ssl_fingerprint);
	free(db->tls_versions);
	free(db->server_public_key);
	free(db->option_file);
	free(db->option_group);
	free(cfg->lock.local_queue_dir);
	free(cfg->path);
	free(cfg->password_from);
	memset(cfg, 0, sizeof(*cfg));
}

static bool fail(struct parse *ps, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static bool fail(struct parse *ps, const char *fmt, ...)
{
	va_list ap;

	if (!ps->failed) {
		va_start(ap, fmt);
		vsnprintf(ps->msg, sizeof(ps->msg), fmt, ap);
		va_end(ap);
		ps->failed = true;
	}
	return false;
}

static bool set_str(char **dst, const char *v)
{
	char *s = strdup(v);

	if (!s)
		return false;
	free(*dst);
	*dst = s;
	return true;
}

static bool parse_uint(const char *v, unsigned lo, unsigned hi, unsigned *out)
{
	char *end;
	unsigned long n;

	errno = 0;
	if (!*v || *v == '-' || *v == '+')
		return false;
	n = strtoul(v, &end, 10);
	if (errno || *end || n < lo || n > hi)
		return false;
	*out = (unsigned)n;
	return true;
}

/*
 * A DURATION key (duration.h) within lo..hi seconds; on failure the
 * parse's message, which names the key and the value. No system calls.
 */
static bool duration_key(struct parse *ps, const char *key, const char *v, double lo, double hi,
                         double *out)
{
	char msg[sizeof(ps->msg)];

	if (lr_duration_arg(key, v, lo, hi, out, msg, sizeof(msg)))
		return true;
	return fail(ps, "%s", msg);
}

static bool parse_bool(const char *v, bool *out)
{
	static const char *yes[] = {"1", "yes", "true", "on"}, *no[] = {"0", "no", "false", "off"};

	for (size_t i = 0; i < 4; i++) {
		if (strcasecmp(v, yes[i]) == 0)
			return (*out = true);
		if (strcasecmp(v, no[i]) == 0) {
			*out = false;
			return true;
		}
	}
	return false;
}

/* "db1, db2,db3" into the host list; an empty item is an error. */
static bool set_hosts(struct lr_db_params *db, const char *v)
{
	const char *p = v;

	free_hosts(db);
	for (;;) {
		const char *comma = strchr(p, ',');
		size_t n = comma ? (size_t)(comma - p) : strlen(p);
		char **grown;

		while (n && (*p == ' ' || *p == '\t')) {
			p++;
			n--;
		}
		while (n && (p[n - 1] == ' ' || p[n - 1] == '\t'))
			n--;
		if (!n)
			return false;
		grown = realloc(db->hosts, (db->nhosts + 1) * sizeof(*grown));
		if (!grown)
			return false;
		db->hosts = grown;
		if (!(db->hosts[db->nhosts] = strndup(p, n)))
			return false;
		db->nhosts++;
		if (!comma)
			return true;
		p = comma + 1;
	}
}

/*
 * Warns when a file that holds a password is open to others: users who are
 * neither its owner nor in its group may read it, or change it (and so
 * where the password goes). Its group may read it: the packages install
 * /etc/lockrun.conf as 0640 root:lockrun for the members of that group.
 * Called once per such file with its fstat; no system calls.
 */
static void check_secret_mode(const char *path, const struct stat *st)
{
	mode_t o = st->st_mode & (S_IROTH | S_IWOTH);

	if (o)
		lr_log_warn("%s holds a password and is %s by others; chmod o-rwx it (0600, or "
		            "0640 with a group of its readers)",
		            path,
		            o == S_IROTH   ? "readable"
		            : o == S_IWOTH ? "writable"
		                           : "readable and writable");
}

static bool read_password_file(struct parse *ps, const char *path)
{
	struct lr_db_params *db = &ps->cfg->db;
	char buf[1024], from[PATH_MAX + 64];
	struct stat st;
	FILE *f = fopen(path, "r");
	size_t n;
	bool ok = false;

	if (!f)
		return fail(ps, "password_file %s: %s", path, strerror(errno));
	if (fstat(fileno(f), &st) == 0)
		check_secret_mode(path, &st);
	if (!fgets(buf, sizeof(buf), f)) {
		buf[0] = '\0';
	}
	n = strcspn(buf, "\r\n");
	buf[n] = '\0';
	snprintf(from, sizeof(from), "the password read from %s (password_file)", path);
	ok = set_str(&db->password, buf) && set_str(&ps->cfg->password_from, from);
	wipe(buf);
	fclose(f);
	return ok;
}

/*
 * ssl_fingerprint: the server certificate's digest in hex, with or without
 * colons between the bytes. Connector/C 3.3 compares SHA-1 only (20
 * bytes); 3.4 also SHA-224 to SHA-512, told apart by their length. Kept as
 * given: the connector parses it again. No system calls.
 */
static bool fingerprint_key(struct parse *ps, const char *v)
{
	size_t hex = 0, colons = 0, n = strlen(v);
	bool ok = true;

	for (size_t i = 0; i < n; i++) {
		if (v[i] == ':' && i % 3 == 2)
			colons++;
		else if (strchr("0123456789abcdefABCDEF", v[i]) && (!colons || i % 3 != 2))
			hex++;
		else
			ok = false;
	}
	if (colons && colons + 1 != hex / 2)
		ok = false;
#if MARIADB_PACKAGE_VERSION_ID >= 30400
	ok = ok && (hex == 40 || hex == 56 || hex == 64 || hex == 96 || hex == 128);
	if (!ok)
		return fail(ps, "ssl_fingerprint: '%s' is not a SHA-1 or SHA-2 digest in hex", v);
#else
	ok = ok && hex == 40;
	if (!ok)
		return fail(ps,
		            "ssl_fingerprint: '%s' is not a SHA-1 digest in hex (40 digits, colons "
		            "between bytes allowed; this connector compares SHA-1 only)",
		            v);
#endif
	return set_str(&ps->cfg->db.ssl_fingerprint, v);
}

/* tls_version: the lowest TLS version allowed, as the connector's list of
 * the versions from it up. No system calls. */
static bool tls_version_key(struct parse *ps, const char *v)
{
	if (strcmp(v, "TLSv1.2") == 0 || strcmp(v, "1.2") == 0)
		return set_str(&ps->cfg->db.tls_versions, "TLSv1.2,TLSv1.3");
	if (strcmp(v, "TLSv1.3") == 0 || strcmp(v, "1.3") == 0)
		return set_str(&ps->cfg->db.tls_versions, "TLSv1.3");
	return fail(ps, "tls_version: '%s' is not TLSv1.2 or TLSv1.3 (the lowest version allowed)",
	            v);
}

/* Whether f holds an RSA public key in PEM (pubkey.c). Reads at most
 * 64 KiB, far more than any such key. */
static bool holds_public_key(FILE *f)
{
	char buf[65536];
	size_t n = fread(buf, 1, sizeof(buf), f);

	return !ferror(f) && lr_pubkey_check(buf, n);
}

/*
 * A file key (ssl_ca, ssl_cert, ssl_key, server_public_key) must name a
 * file lockrun can read, and ssl_capath a directory: the connector would
 * only fail later, at every connect, or, for server_public_key, ask the
 * server for its key instead without a word. server_public_key must hold
 * an RSA public key in PEM (pubkey.c), the only kind the connector's RSA
 * exchange uses. Costs an open and read per file.
 */
static bool file_key(struct parse *ps, const char *key, const char *v, char **dst)
{
	struct stat st;
	FILE *f;

	if (!*v)
		return fail(ps, "%s: empty value", key);
	if (stat(v, &st) != 0)
		return fail(ps, "%s: %s: %s", key, v, strerror(errno));
	if (strcmp(key, "ssl_capath") == 0) {
		if (!S_ISDIR(st.st_mode))
			return fail(ps, "%s: %s: not a directory", key, v);
		return set_str(dst, v);
	}
	if (S_ISDIR(st.st_mode) || !(f = fopen(v, "r")))
		return fail(ps, "%s: %s: %s", key, v,
		            S_ISDIR(st.st_mode) ? "is a directory" : strerror(errno));
	if (strcmp(key, "server_public_key") == 0 && !holds_public_key(f)) {
		fclose(f);
		return fail(ps, "%s: %s holds no RSA public key in PEM", key, v);
	}
	fclose(f);
	return set_str(dst, v);
}

static int handle_database(struct parse *ps, const char *name, const char *v)
{
	struct lr_db_params *db = &ps->cfg->db;
	unsigned u;
	double d;

	if (strcmp(name, "host") == 0) {
		if (!set_hosts(db, v))
			return fail(ps, "host: empty name in list '%s'", v);
		return 1;
	}
	if (strcmp(name, "port") == 0) {
		if (!parse_uint(v, 1, 65535, &u))
			return fail(ps, "port: '%s' is not a port number (1-65535)", v);
		db->port = u;
		return 1;
	}
	if (strcmp(name, "connect_timeout") == 0 || strcmp(name, "read_timeout") == 0 ||
	    strcmp(name, "write_timeout") == 0) {
		/* The connector counts whole seconds: a fraction rounds up. */
		if (!duration_key(ps, name, v, 1, 3600, &d))
			return 0;
		*(name[0] == 'c'   ? &db->connect_timeout
		  : name[0] == 'r' ? &db->read_timeout
		                   : &db->write_timeout) = (unsigned)lr_duration_ceil(d);
		return 1;
	}
	if (strcmp(name, "ssl_verify_server_cert") == 0 || strcmp(name, "galera_writer") == 0 ||
	    strcmp(name, "allow_public_key_retrieval") == 0) {
		if (!parse_bool(v, name[0] == 's'   ? &db->ssl_verify_server_cert
		                   : name[0] == 'g' ? &db->galera_writer
		                                    : &db->allow_public_key_retrieval))
			return fail(ps, "%s: '%s' is not a boolean (true/false)", name, v);
		return 1;
	}
	if (strcmp(name, "ssl_fingerprint") == 0)
		return fingerprint_key(ps, v);
	if (strcmp(name, "tls_version") == 0)
		return tls_version_key(ps, v);
	if (strcmp(name, "password_file") == 0)
		return read_password_file(ps, v);
	if (strcmp(name, "password") == 0) {
		ps->holds_password = true;
		return set_str(&db->password, v) &&
		       set_str(&ps->cfg->password_from, "the password (key password)");
	}
	struct {
		const char *key;
		char **dst;
		bool file; /* names a file (or ssl_capath a directory): file_key */
	} strs[] = {
	    {"socket", &db->socket, false},
	    {"user", &db->user, false},
	    {"database", &db->database, false},
	    {"option_file", &db->option_file, false},
	    {"option_group", &db->option_group, false},
	    {"ssl_ca", &db->ssl_ca, true},
	    {"ssl_capath", &db->ssl_capath, true},
	    {"ssl_cert", &db->ssl_cert, true},
	    {"ssl_key", &db->ssl_key, true},
	    {"server_public_key", &db->server_public_key, true},
	};
	for (size_t i = 0; i < sizeof(strs) / sizeof(strs[0]); i++) {
		if (strcmp(name, strs[i].key) == 0) {
			if (strs[i].file)
				return file_key(ps, name, v, strs[i].dst);
			if (!*v)
				return fail(ps, "%s: empty value", name);
			return set_str(strs[i].dst, v);
		}
	}
	return fail(ps, "unknown key '%s' in [database]", name);
}

static int handle_lock(struct parse *ps, const char *name, const char *v)
{
	struct lr_lock_defaults *l = &ps->cfg->lock;
	unsigned u;
	double d;

	if (strcmp(name, "ttl") == 0) {
		if (!duration_key(ps, name, v, LR_TTL_MIN_S, LR_TTL_MAX_S, &l->ttl))
			return 0;
	} else if (strcmp(name, "wait") == 0) {
		if (strcmp(v, "forever") == 0)
			l->wait = -1;
		else if (!lr_duration_parse(v, INFINITY, &d))
			return fail(
			    ps, "wait: '%s' is not a duration or 'forever' (e.g. 90, 5m, 2h)", v);
		else if (!duration_key(ps, name, v, 0, LR_WAIT_MAX_S, &l->wait))
			return 0;
	} else if (strcmp(name, "kill_after") == 0) {
		if (!duration_key(ps, name, v, 0, LR_KILL_AFTER_MAX_S, &l->kill_after))
			return 0;
	} else if (strcmp(name, "conflict_exit_code") == 0) {
		if (!parse_uint(v, 0, 255, &u))
			return fail(ps, "conflict_exit_code: '%s' is not an exit status (0-255)",
			            v);
		l->conflict_exit = (int)u;
	} else if (strcmp(name, "done_exit_code") == 0) {
		if (!parse_uint(v, 0, 255, &u))
			return fail(ps, "done_exit_code: '%s' is not an exit status (0-255)", v);
		l->done_exit = (int)u;
	} else if (strcmp(name, "on_lost") == 0) {
		if (strcmp(v, "kill") == 0)
			l->on_lost = LR_ON_LOST_KILL;
		else if (strcmp(v, "ignore") == 0)
			l->on_lost = LR_ON_LOST_IGNORE;
		else
			return fail(ps, "on_lost: '%s' is not 'kill' or 'ignore'", v);
	} else if (strcmp(name, "local_queue") == 0) {
		if (!parse_bool(v, &l->local_queue))
			return fail(ps, "local_queue: '%s' is not a boolean (true/false)", v);
	} else if (strcmp(name, "local_queue_dir") == 0) {
		if (v[0] != '/')
			return fail(ps, "local_queue_dir: '%s' is not an absolute path", v);
		return set_str(&l->local_queue_dir, v);
	} else {
		return fail(ps, "unknown key '%s' in [lock]", name);
	}
	return 1;
}

/*
 * The three mistakes the sample configuration warns of, each of which
 * would otherwise pass silently into a value and end as a bare login
 * error. An indented line continues the value of the key above it (inih
 * reads it as a second value of that key): "  password = x" under
 * "user = y" would make the user "password = x". Only ';' starts a
 * comment after a value: "x # note" is the value "x # note". Quotes are
 * kept: "'x'" is three characters with two quotes. Values of these forms
 * are refused; the message says what to write instead (a password that
 * really has them can go in password_file, which is read as it is).
 * Called for every key; no system calls.
 */
static bool plausible(struct parse *ps, const char *section, const char *name, const char *v)
{
	char key[sizeof(ps->last)];
	size_t n = strlen(v);
	bool again;

	snprintf(key, sizeof(key), "%s.%s", section, name);
	again = strcmp(key, ps->last) == 0;
	snprintf(ps->last, sizeof(ps->last), "%s", key);
	if (again && strchr(v, '='))
		return fail(ps,
		            "'%s' continues the value of %s on the line above, as the line is "
		            "indented; remove the indentation",
		            v, name);
	if (strstr(v, " #") || strstr(v, "\t#"))
		return fail(ps,
		            "%s: '#' starts no comment after a value, ';' does (or put the "
		            "comment on a line of its own)",
		            name);
	if (n >= 2 && (v[0] == '"' || v[0] == '\'') && v[n - 1] == v[0])
		return fail(
		    ps, "%s: the quotes would be part of the value; write it without them%s", name,
		    strcmp(name, "password") == 0
		        ? " (a password that has them belongs in password_file)"
		        : "");
	return true;
}

static int handler(void *user, const char *section, const char *name, const char *value)
{
	struct parse *ps = user;

	if (ps->failed || !plausible(ps, section, name, value))
		return 0;
	if (strcmp(section, "database") == 0)
		return handle_database(ps, name, value);
	if (strcmp(section, "lock") == 0)
		return handle_lock(ps, name, value);
	if (!*section)
		return fail(ps, "key '%s' outside any [section]", name);
	return fail(ps, "unknown section [%s]", section);
}

/*
 * For a configuration file this user may not read: who may, and the two
 * ways on. The packages install /etc/lockrun.conf as 0640 root:lockrun,
 * so a new user's first run meets this. st is scratch space. One stat and
 * a group lookup (which may read /etc/group).
 */
static const char *who_may_read(const char *path, struct stat *st)
{
	static char buf[256];
	struct group *g;

	if (stat(path, st) != 0)
		return errno == EACCES ? " (a directory on its path is closed to this user)" : "";
	g = (st->st_mode & S_IRGRP) ? getgrgid(st->st_gid) : NULL;
	if (g)
		snprintf(buf, sizeof(buf),
		         " (it is readable by its owner and the group '%.64s': join that group, "
		         "or give a file of your own with -c or $LOCKRUN_CONFIG)",
		         g->gr_name);
	else
		snprintf(buf, sizeof(buf), " (give a file of your own with -c or $LOCKRUN_CONFIG)");
	return buf;
}

/*
 * Reads one configuration file over the defaults already in cfg. Errors
 * name file:line. Costs one open and read.
 */
bool lr_config_load_file(struct lr_config *cfg, const char *path)
{
	struct parse ps = {.cfg = cfg, .path = path};
	struct stat st;
	FILE *f = fopen(path, "r");
	int line;
	bool ok = false;

	if (!f) {
		int e = errno;

		snprintf(cfg->err, sizeof(cfg->err), "%s: %s%s", path, strerror(e),
		         e == EACCES ? who_may_read(path, &st) : "");
		return false;
	}
	if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
		snprintf(cfg->err, sizeof(cfg->err), "%s: is a directory", path);
		goto out;
	}
	line = ini_parse_file(f, handler, &ps);
	if (line != 0 || ps.failed) {
		if (line > 0)
			snprintf(cfg->err, sizeof(cfg->err), "%s:%d: %s", path, line,
			         ps.failed ? ps.msg : "syntax error");
		else
			snprintf(cfg->err, sizeof(cfg->err), "%s: %s", path,
			         ps.failed ? ps.msg : "cannot be parsed");
		goto out;
	}
	if (ps.holds_password)
		check_secret_mode(path, &st);
	if (!set_str(&cfg->path, path)) {
		snprintf(cfg->err, sizeof(cfg->err), "out of memory");
		goto out;
	}
	ok = true;
out:
	fclose(f);
	return ok;
}

/* With no user configured, MariaDB's unix_socket authentication maps the
 * current OS user to the account of the same name. */
static bool fill_defaults(struct lr_config *cfg)
{
	struct lr_db_params *db = &cfg->db;

	if (!db->database && !set_str(&db->database, "lockrun"))
		return false;
	if (!db->user && !db->option_file) {
		struct passwd *pw = getpwuid(geteuid());
		if (pw && !set_str(&db->user, pw->pw_name))
			return false;
	}
	return true;
}

/*
 * Finds and reads the configuration: explicit path (-c), else
 * $LOCKRUN_CONFIG, else /etc/lockrun.conf if it exists. A named file that
 * is missing is an error; a missing system file is not.
 */
bool lr_config_load(struct lr_config *cfg, const char *explicit_path)
{
	const char *env = getenv("LOCKRUN_CONFIG");
	const char *path = explicit_path ? explicit_path : (env && *env ? env : NULL);
	bool ok = true;

	if (path)
		ok = lr_config_load_file(cfg, path);
	else if (access(LR_SYSCONF_CONFIG, F_OK) == 0)
		ok = lr_config_load_file(cfg, LR_SYSCONF_CONFIG);
	if (ok && !fill_defaults(cfg)) {
		snprintf(cfg->err, sizeof(cfg->err), "out of memory");
		ok = false;
	}
	return ok;
}
