/* Configuration files: every key, and errors that name file:line. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "tap.h"

static char dir[] = "/tmp/lr-unit-XXXXXX";

static const char *write_file(const char *name, const char *text, mode_t mode)
{
	static char path[256];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "w");
	fputs(text, f);
	fclose(f);
	chmod(path, mode);
	return path;
}

static bool load(struct lr_config *cfg, const char *path)
{
	lr_config_finish(cfg);
	lr_config_init(cfg);
	return lr_config_load_file(cfg, path);
}

int main(void)
{
	struct lr_config cfg;
	const char *p;
	char pwfile[300];

	if (!mkdtemp(dir))
		return 1;
	lr_config_init(&cfg);

	snprintf(pwfile, sizeof(pwfile), "%s/pw", dir);
	write_file("pw", "s3cret\n", 0600);
	/* ssl_ca must name a file that exists (its content is the connector's
	 * to read). */
	write_file("ca.pem", "", 0644);
	char text[1024];
	snprintf(text, sizeof(text),
	         "; comment\n[database]\nhost = db1, db2 ,db3\nport = 3307\nuser = lr\n"
	         "password_file = %s\ndatabase = locks\nssl_ca = %s/ca.pem\n"
	         "ssl_verify_server_cert = yes\ngalera_writer = off\nconnect_timeout = 2\n"
	         "read_timeout = 7\n"
	         "write_timeout = 8\n[lock]\nttl = 12.5\nwait = forever\nkill_after = 1\n"
	         "conflict_exit_code = 0\non_lost = ignore\n",
	         pwfile, dir);
	p = write_file("full.conf", text, 0644);
	ok(load(&cfg, p), "a full file loads: %s", cfg.err);
	ok(cfg.db.nhosts == 3, "three hosts");
	is_str(cfg.db.hosts[1], "db2", "host list trimmed");
	ok(cfg.db.port == 3307 && cfg.db.connect_timeout == 2 && cfg.db.read_timeout == 7 &&
	       cfg.db.write_timeout == 8,
	   "numbers");
	is_str(cfg.db.password, "s3cret", "password read from password_file, newline dropped");
	ok(cfg.db.ssl_verify_server_cert, "boolean");
	ok(!cfg.db.galera_writer, "galera_writer off");
	ok(cfg.lock.ttl == 12.5 && cfg.lock.wait < 0 && cfg.lock.kill_after == 1 &&
	       cfg.lock.conflict_exit == 0 && cfg.lock.on_lost == LR_ON_LOST_IGNORE,
	   "[lock] defaults");

	p = write_file("units.conf",
	               "[database]\nconnect_timeout = 1m\nread_timeout = 1.5\nwrite_timeout = 2s\n"
	               "[lock]\nttl = 2m\nwait = 1.5h\nkill_after = 0.5s\n",
	               0600);
	ok(load(&cfg, p), "durations with units load: %s", cfg.err);
	ok(cfg.db.connect_timeout == 60 && cfg.db.read_timeout == 2 && cfg.db.write_timeout == 2,
	   "timeouts in whole seconds, a fraction rounded up");
	ok(cfg.lock.ttl == 120 && cfg.lock.wait == 5400 && cfg.lock.kill_after == 0.5,
	   "ttl, wait and kill_after take units");
	p = write_file("range.conf", "[lock]\nttl = 2d\n", 0600);
	ok(!load(&cfg, p) && strstr(cfg.err, ":2: ttl: '2d' is out of range (1s to 1d)") != NULL,
	   "a range in the unit written: %s", cfg.err);
	p = write_file("range2.conf", "[database]\nread_timeout = 2h\n", 0600);
	ok(!load(&cfg, p) &&
	       strstr(cfg.err, ":2: read_timeout: '2h' is out of range (1s to 1h)") != NULL,
	   "timeouts too: %s", cfg.err);
	p = write_file("wait.conf", "[lock]\nwait = someday\n", 0600);
	ok(!load(&cfg, p) && strstr(cfg.err, ":2: wait: 'someday' is not a duration or 'forever'"),
	   "wait names forever: %s", cfg.err);

	p = write_file("bad1.conf", "[database]\nuser = x\nprot = 1\n", 0600);
	ok(!load(&cfg, p), "unknown key refused");
	ok(strstr(cfg.err, "bad1.conf:3: unknown key 'prot' in [database]") != NULL,
	   "error names file:line: %s", cfg.err);
	p = write_file("bad2.conf", "[database]\n[locks]\nttl = 3\n", 0600);
	ok(!load(&cfg, p), "unknown section refused");
	ok(strstr(cfg.err, "bad2.conf:3: unknown section [locks]") != NULL, "%s", cfg.err);
	p = write_file("bad3.conf", "[database]\nport = 70000\n", 0600);
	ok(!load(&cfg, p) && strstr(cfg.err, ":2: port: '70000'") != NULL, "bad port: %s", cfg.err);
	p = write_file("bad4.conf", "[lock]\nttl = soon\n", 0600);
	ok(!load(&cfg, p) && strstr(cfg.err, ":2: ttl:") != NULL, "bad ttl: %s", cfg.err);
	p = write_file("bad5.conf", "[database]\nhost = a,,b\n", 0600);
	ok(!load(&cfg, p) && strstr(cfg.err, ":2: host:") != NULL, "empty host: %s", cfg.err);
	p = write_file("bad6.conf", "user = x\n", 0600);
	ok(!load(&cfg, p) && strstr(cfg.err, ":1: key 'user' outside") != NULL, "no section: %s",
	   cfg.err);
	p = write_file("bad7.conf", "[database\n", 0600);
	ok(!load(&cfg, p) && strstr(cfg.err, ":1:") != NULL, "syntax error: %s", cfg.err);
	p = write_file("bad8.conf", "[database]\nssl_verify_server_cert = perhaps\n", 0600);
	ok(!load(&cfg, p) && strstr(cfg.err, ":2: ssl_verify_server_cert") != NULL, "bad bool: %s",
	   cfg.err);
	p = write_file("bad8g.conf", "[database]\ngalera_writer = perhaps\n", 0600);
	ok(!load(&cfg, p) &&
	       strstr(cfg.err, ":2: galera_writer: 'perhaps' is not a boolean") != NULL,
	   "bad galera_writer: %s", cfg.err);
	p = write_file("bad9.conf", "[database]\npassword_file = /nonexistent/pw\n", 0600);
	ok(!load(&cfg, p) && strstr(cfg.err, "/nonexistent/pw") != NULL,
	   "missing password file: %s", cfg.err);
	ok(!load(&cfg, "/nonexistent.conf") &&
	       strstr(cfg.err, "/nonexistent.conf: No such file") != NULL,
	   "missing file: %s", cfg.err);

	setenv("LOCKRUN_CONFIG", write_file("env.conf", "[database]\nuser = fromenv\n", 0600), 1);
	lr_config_finish(&cfg);
	lr_config_init(&cfg);
	ok(lr_config_load(&cfg, NULL), "$LOCKRUN_CONFIG is read");
	is_str(cfg.db.user, "fromenv", "its values apply");
	is_str(cfg.db.database, "lockrun", "database defaults to lockrun");
	ok(cfg.db.galera_writer, "galera_writer defaults to true");
	lr_config_finish(&cfg);
	lr_config_init(&cfg);
	p = write_file("explicit.conf", "[database]\nuser = explicit\n", 0600);
	ok(lr_config_load(&cfg, p), "-c wins over $LOCKRUN_CONFIG");
	is_str(cfg.db.user, "explicit", "its values apply");

	lr_config_finish(&cfg);
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd) != 0)
		return 1;
	return tap_done();
}
