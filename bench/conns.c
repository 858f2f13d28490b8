/*
 * conns - one statement on each of N new connections: bench/parse-once
 * uses it to measure what a new session costs the server for a given
 * statement. Benchmark helper, never installed.
 *
 * Usage: conns N SOCKET USER DATABASE STATEMENT
 *
 * Opens N connections one after the other over the unix socket SOCKET as
 * USER (no password) to DATABASE, runs STATEMENT once on each (every
 * result read), and closes each before the next. Prints nothing; exits 1
 * with the server's message on the first error.
 */

#include <mysql.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
	long n;

	if (argc != 6 || (n = strtol(argv[1], NULL, 10)) < 1) {
		fprintf(stderr, "usage: conns N SOCKET USER DATABASE STATEMENT\n");
		return 2;
	}
	for (long i = 0; i < n; i++) {
		MYSQL *m = mysql_init(NULL);
		MYSQL_RES *r;

		if (!m ||
		    !mysql_real_connect(m, NULL, argv[3], NULL, argv[4], 0, argv[2],
		                        CLIENT_MULTI_RESULTS) ||
		    mysql_query(m, argv[5])) {
			fprintf(stderr, "conns: %s\n", m ? mysql_error(m) : "out of memory");
			return 1;
		}
		do {
			r = mysql_store_result(m);
			mysql_free_result(r);
		} while (mysql_next_result(m) == 0);
		mysql_close(m);
	}
	return 0;
}
