/*
 * floor - the least any program that uses Connector/C costs: bench/run
 * times it next to lockrun to show what bounds lockrun's start-up.
 * Benchmark helper, never installed.
 *
 * Usage: floor
 *        floor HOST PORT USER PASSWORD_FILE DATABASE [SERVER_PUBLIC_KEY]
 *
 * It links libmariadb (which brings in libssl and libcrypto) and libcrypto,
 * starts OpenSSL the way lockrun does when no TLS is configured (src/db.c:
 * no configuration file, no error strings, no cipher or digest tables),
 * then makes one mysql_init(), whose first call starts the connector's
 * library, and frees it again. It connects nowhere. Everything it costs,
 * the dynamic loader's relocations of those libraries above all, every
 * lockrun pays before it can do any work.
 *
 * With a server's address and account it also does the least a lock
 * taken and given back over SQL needs: a login over TCP without TLS (as
 * bench/run's lockrun connects), two statements that touch no table
 * (`DO 0`, one round trip each, standing for the acquire and the release)
 * and a goodbye (MySQL's caching_sha2_password without TLS needs the
 * server's public key, as lockrun's server_public_key). What that costs the
 * client and the server bounds what any program that opens a session per
 * run can cost, lockrun included.
 */

#include <mysql.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Reads the first line of path into buf (the password, without its
 * newline). */
static int read_password(const char *path, char *buf, size_t len)
{
	FILE *f = fopen(path, "r");
	int ok = f && fgets(buf, (int)len, f);

	if (f)
		fclose(f);
	if (ok)
		buf[strcspn(buf, "\r\n")] = '\0';
	return ok;
}

/* One session: login, two `DO 0`, goodbye. Returns 0 on success. */
static int session(MYSQL *m, int argc, char **argv)
{
	unsigned int tcp = MYSQL_PROTOCOL_TCP, timeout = 10;
	my_bool no = 0;
	char pw[256];

	if (!read_password(argv[4], pw, sizeof(pw))) {
		fprintf(stderr, "floor: cannot read %s\n", argv[4]);
		return 1;
	}
	mysql_options(m, MYSQL_OPT_PROTOCOL, &tcp);
	mysql_options(m, MYSQL_OPT_CONNECT_TIMEOUT, &timeout);
	mysql_options(m, MYSQL_OPT_SSL_VERIFY_SERVER_CERT, &no);
	mysql_options(m, MYSQL_SET_CHARSET_NAME, "utf8mb4");
	if (argc == 7)
		mysql_options(m, MYSQL_SERVER_PUBLIC_KEY, argv[6]);
	if (!mysql_real_connect(m, argv[1], argv[3], pw, argv[5], (unsigned)atoi(argv[2]), NULL,
	                        0) ||
	    mysql_query(m, "DO 0") || mysql_query(m, "DO 0")) {
		fprintf(stderr, "floor: %s\n", mysql_error(m));
		return 1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	MYSQL *m;
	int rc = 0;

	if (argc != 1 && argc != 6 && argc != 7) {
		fputs("usage: floor [HOST PORT USER PASSWORD_FILE DATABASE [SERVER_PUBLIC_KEY]]\n",
		      stderr);
		return 2;
	}
	OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT | OPENSSL_INIT_NO_LOAD_CONFIG |
	                        OPENSSL_INIT_NO_LOAD_CRYPTO_STRINGS |
	                        OPENSSL_INIT_NO_ADD_ALL_CIPHERS | OPENSSL_INIT_NO_ADD_ALL_DIGESTS,
	                    NULL);
	m = mysql_init(NULL);
	if (!m) {
		fputs("floor: mysql_init failed\n", stderr);
		return 1;
	}
	if (argc > 1)
		rc = session(m, argc, argv);
	mysql_close(m);
	return rc;
}
