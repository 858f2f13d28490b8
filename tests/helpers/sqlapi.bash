# shellcheck shell=bash
#
# Helpers for the tests that drive the SQL API (doc/sql-api.md) with the
# mariadb client alone, as the runtime account that has nothing but
# EXECUTE. Loaded after helpers/common.

# app SQL: run SQL as the runtime account over TCP, like an application;
# tab-separated output with a header line per result set. Every client
# call with MYSQL_PWD in the tests says --skip-ssl-verify-server-cert:
# MariaDB 11.8's client (a Debian 13 machine's) verifies by default, and
# for a password it does not see on its command line it turns that off
# with a warning on stderr, which `run` would mix into the output.
app() {
	MYSQL_PWD=$(<"$LR_DB/lockrun.pw") mariadb --no-defaults --skip-ssl-verify-server-cert -h 127.0.0.1 \
		-P "$LR_PORT" -u lockrun -D lockrun -B -e "$1"
}

# col NAME: the values of column NAME of the result on stdin, one per row.
col() {
	awk -F '\t' -v n="$1" '
		NR == 1 { for (i = 1; i <= NF; i++) if ($i == n) c = i
			if (!c) { print "no column " n > "/dev/stderr"; exit 1 }
			next }
		{ print $c }'
}

# field NAME RESULT: column NAME of the first row of RESULT.
field() {
	col "$1" <<<"$2" | head -n 1
}

newid() { openssl rand -hex 16; }

# acq ITEMS REQUEST LEASE [TTL_MS] [ENQUEUE]: one acquire attempt.
acq() {
	app "CALL lockrun_acquire('$1', '$2', '$3', ${4:-30000}, ${5:-0},
		'apphost', 4242, 'tester', '14-sql-api test')"
}

rel() { app "CALL lockrun_release('$1', 'exited', 0, NULL)"; }

# used_ok: lr_resources.used equals the live permits of lr_holds, everywhere.
used_ok() {
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_resources r WHERE r.used <>
		(SELECT COALESCE(SUM(h.permits), 0) FROM lr_holds h WHERE h.resource = r.name)")" 0
}

# wait_name REQUEST: the public name of REQUEST's wake-up lock, as the
# procedures show it in wait_for (a hash: the request id is a secret).
wait_name() {
	printf 'lockrun.wait.%s' "$(printf 'wait:%s' "$1" | sha256sum | cut -c1-32)"
}
