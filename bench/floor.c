/*
 * floor - the least any program that uses Connector/C costs: bench/run
 * times it next to lockrun to show what bounds lockrun's start-up.
 * Benchmark helper, never installed.
 *
 * Usage: floor
 *
 * It links libmariadb (which brings in libssl and libcrypto) and libcrypto,
 * starts OpenSSL the way lockrun does when no TLS is configured (src/db.c:
 * no configuration file, no error strings, no cipher or digest tables),
 * then makes one mysql_init(), whose first call starts the connector's
 * library, and frees it again. It connects nowhere. Everything it costs,
 * the dynamic loader's relocations of those libraries above all, every
 * lockrun pays before it can do any work.
 */

#include <mysql.h>
#include <openssl/crypto.h>
#include <stdio.h>

int main(void)
{
	MYSQL *m;

	OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT | OPENSSL_INIT_NO_LOAD_CONFIG |
	                        OPENSSL_INIT_NO_LOAD_CRYPTO_STRINGS |
	                        OPENSSL_INIT_NO_ADD_ALL_CIPHERS | OPENSSL_INIT_NO_ADD_ALL_DIGESTS,
	                    NULL);
	m = mysql_init(NULL);
	if (!m) {
		fputs("floor: mysql_init failed\n", stderr);
		return 1;
	}
	mysql_close(m);
	return 0;
}
