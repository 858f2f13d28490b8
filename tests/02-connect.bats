#!/usr/bin/env bats
#
# Connection failures: each is one line naming the server and the cause,
# exit 69, and never a wait longer than connect_timeout. TLS for real.

load helpers/common

bats_require_minimum_version 1.5.0

setup() {
	conf=$BATS_TEST_TMPDIR/db.conf
}

teardown() {
	[[ -z ${fake_pid:-} ]] || kill "$fake_pid" 2>/dev/null || true
}

# conf_with KEY=VALUE...: the suite's account config, with keys replaced or added.
conf_with() {
	cp "$LR_DB/lockrun.conf" "$conf"
	local kv
	for kv in "$@"; do
		sed -i "/^${kv%%=*} *=/d" "$conf"
		printf '%s = %s\n' "${kv%%=*}" "${kv#*=}" >>"$conf"
	done
}

# fake MODE: start tests/tools/fakemysqld, set fake_port.
fake() {
	"$LR_TOOLS/fakemysqld" --mode "$1" --port-file "$BATS_TEST_TMPDIR/fake.port" >/dev/null 3>&- &
	fake_pid=$!
	lr_wait_for test -s "$BATS_TEST_TMPDIR/fake.port"
	fake_port=$(cat "$BATS_TEST_TMPDIR/fake.port")
}

@test "wrong password: one line naming the server, exit 69" {
	printf 'not-the-password\n' >"$BATS_TEST_TMPDIR/pw"
	chmod 600 "$BATS_TEST_TMPDIR/pw"
	conf_with "password_file=$BATS_TEST_TMPDIR/pw"
	run "$LOCKRUN" -c "$conf" -s any -- true
	assert_failure 69
	assert_output --partial "lockrun: cannot connect to 127.0.0.1:$LR_PORT: Access denied for user 'lockrun'@'127.0.0.1' (using password: YES) (1045); check user 'lockrun' and the password read from $BATS_TEST_TMPDIR/pw (password_file) in $conf."
	assert_equal "${#lines[@]}" 1
}

@test "unreachable host: refused port, exit 69" {
	conf_with "port=1"
	run "$LOCKRUNCTL" -c "$conf" status
	assert_failure 69
	assert_output --partial "lockrunctl: cannot connect to 127.0.0.1:1: "
	assert_equal "${#lines[@]}" 1
}

@test "unresolvable host name, exit 69" {
	conf_with "host=no-such-host.invalid"
	run "$LOCKRUNCTL" -c "$conf" status
	assert_failure 69
	assert_output --partial "no-such-host.invalid: cannot resolve host name"
}

@test "missing database, exit 69" {
	printf '[database]\nsocket = %s\nuser = root\ndatabase = nosuchdb\n' "$LR_SOCKET" >"$conf"
	run "$LOCKRUNCTL" -c "$conf" status
	assert_failure 69
	assert_output "lockrunctl: cannot connect to $LR_SOCKET: Unknown database 'nosuchdb' (1049); an administrator creates it (CREATE DATABASE \`nosuchdb\`), then runs 'lockrunctl init'; or set database in $conf"
}

@test "missing schema: told to run lockrunctl init, exit 69" {
	sql "CREATE DATABASE IF NOT EXISTS lr_empty"
	printf '[database]\nsocket = %s\nuser = root\ndatabase = lr_empty\n' "$LR_SOCKET" >"$conf"
	run "$LOCKRUN" -c "$conf" -s any -- true
	assert_failure 69
	assert_output "lockrun: $LR_SOCKET: the lockrun schema is missing or outdated; run 'lockrunctl init'"
	run "$LOCKRUNCTL" -c "$conf" status
	assert_failure 69
	assert_output --partial "run 'lockrunctl init'"
	sql "DROP DATABASE lr_empty"
}

# old_schema DB: database DB with the tables of schema version 1 only (no
# procedures), as a lockrun 1.x installation has them.
old_schema() {
	sql "CREATE DATABASE IF NOT EXISTS $1"
	lr_admin_sql "$LR_DB" - "$1" <"$LR_SRC/sql/001-initial.sql"
	printf '[database]\nsocket = %s\nuser = root\ndatabase = %s\n' "$LR_SOCKET" "$1" >"$conf"
}

@test "a schema without the procedures (version 1 only): told to run lockrunctl init, exit 69" {
	old_schema lr_v1
	run "$LOCKRUN" -c "$conf" -x any -- touch "$BATS_TEST_TMPDIR/ran"
	assert_failure 69
	assert_output "lockrun: $LR_SOCKET: the lockrun schema is missing or outdated; run 'lockrunctl init'"
	assert [ ! -e "$BATS_TEST_TMPDIR/ran" ]
	# Nothing was written: lockrun does not fall back to the tables.
	assert_equal "$(lr_admin_sql "$LR_DB" "SELECT COUNT(*) FROM lr_resources" lr_v1)" 0
	sql "DROP DATABASE lr_v1"
}

@test "a procedure of another version (other arguments, or no api column): exit 69, run lockrunctl init" {
	old_schema lr_v1b
	lr_admin_sql "$LR_DB" "CREATE PROCEDURE lockrun_acquire(a INT) SELECT 1 AS granted" lr_v1b
	run "$LOCKRUN" -c "$conf" -x any -- touch "$BATS_TEST_TMPDIR/ran"
	assert_failure 69
	assert_output --partial "the lockrun schema is missing or outdated; run 'lockrunctl init'"
	lr_admin_sql "$LR_DB" "DROP PROCEDURE lockrun_acquire;
		CREATE PROCEDURE lockrun_acquire(a TEXT, b TEXT, c TEXT, d INT, e INT, f TEXT, g INT,
			h TEXT, i TEXT) SELECT 'granted' AS outcome, 1 AS grant_id, 'any' AS resource" lr_v1b
	run "$LOCKRUN" -c "$conf" -x any -- touch "$BATS_TEST_TMPDIR/ran"
	assert_failure 69
	assert_output --partial "the lockrun schema is missing or outdated; run 'lockrunctl init'"
	assert [ ! -e "$BATS_TEST_TMPDIR/ran" ]
	sql "DROP DATABASE lr_v1b"
}

@test "an account without EXECUTE: exit 69 with the server's refusal" {
	sql "CREATE USER IF NOT EXISTS 'lrnoexec'@'%' IDENTIFIED BY 'nx-pw';
		GRANT SELECT ON lockrun.lr_schema TO 'lrnoexec'@'%'"
	printf 'nx-pw\n' >"$BATS_TEST_TMPDIR/pw"
	chmod 600 "$BATS_TEST_TMPDIR/pw"
	conf_with "user=lrnoexec" "password_file=$BATS_TEST_TMPDIR/pw"
	run "$LOCKRUN" -c "$conf" -x noexec -- touch "$BATS_TEST_TMPDIR/ran"
	assert_failure 69
	assert_output --partial "execute command denied to user 'lrnoexec'"
	assert [ ! -e "$BATS_TEST_TMPDIR/ran" ]
	sql "DROP USER 'lrnoexec'@'%'"
}

@test "a server older than MariaDB 10.6 or MySQL 8.4: refused with its version, exit 69" {
	fake old
	conf_with "port=$fake_port"
	run "$LOCKRUN" -c "$conf" -s any -- true
	assert_failure 69
	assert_output "lockrun: cannot connect to 127.0.0.1:$fake_port: server version 5.1.73-fake is not supported; lockrun needs MariaDB 10.6 or newer, or MySQL 8.4 or newer"
}

@test "doctor on a server older than MariaDB 10.6 or MySQL 8.4: a report that says so (FAIL, exit 1), not a connect error" {
	fake old
	conf_with "port=$fake_port"
	run "$LOCKRUNCTL" -c "$conf" doctor
	assert_failure 1
	assert_line --regexp "^FAIL  server +5\.1\.73-fake is not supported: lockrun needs MariaDB 10\.6 or$"
	assert_line --regexp "^ +later, or MySQL 8\.4 or later$"
	assert_line --index -1 "1 problem, 0 warnings: lockrun would fail or be unsafe here"
	run "$LOCKRUNCTL" -c "$conf" doctor --json
	assert_failure 1
	assert_output --partial '"check":"server","status":"problem","detail":"5.1.73-fake is not supported'
	# Other commands still refuse it before anything else.
	run "$LOCKRUNCTL" -c "$conf" status
	assert_failure 69
	assert_output "lockrunctl: cannot connect to 127.0.0.1:$fake_port: server version 5.1.73-fake is not supported; lockrun needs MariaDB 10.6 or newer, or MySQL 8.4 or newer"
}

@test "an oversized name is cut in lockrunctl's error as in lockrun's (64)" {
	local long
	long=$(printf 'a%.0s' {1..2000})
	run -64 "$LOCKRUNCTL" -c "$conf" status "$long"
	assert_output "lockrunctl: name 'aaaaaaaaaaaaaaaaaaaa...' is longer than 64 bytes"
}

@test "a server that accepts but never answers: gives up within connect_timeout" {
	fake hang
	conf_with "port=$fake_port" "connect_timeout=2"
	local t0=$EPOCHREALTIME
	run "$LOCKRUN" -c "$conf" -s any -- true
	local ms=$(( (${EPOCHREALTIME/[.,]/} - ${t0/[.,]/}) / 1000 ))
	assert_failure 69
	assert_output "lockrun: cannot connect to 127.0.0.1:$fake_port: no answer within 2.0 s"
	# Bounded by the timeout, not by luck: between 2 s and 2 s plus slack.
	(( ms >= 1900 && ms < 4500 )) || fail "took ${ms} ms"
}

@test "SIGTERM while connecting to a hung server ends lockrun at once" {
	fake hang
	conf_with "port=$fake_port" "connect_timeout=30"
	"$LOCKRUN" -c "$conf" -s any -- true 3>&- &
	local pid=$!
	sleep 0.5
	local t0=$EPOCHREALTIME
	kill -TERM "$pid"
	local rc=0
	wait "$pid" || rc=$?
	local ms=$(( (${EPOCHREALTIME/[.,]/} - ${t0/[.,]/}) / 1000 ))
	assert_equal "$rc" 143
	(( ms < 1500 )) || fail "took ${ms} ms to stop"
}

@test "no port configured: 3306, the documented default" {
	# lockrun answers the connector's start-up lookup of the mysql service
	# itself (src/servent.c); the port of a configuration without one must
	# still be 3306. An address of its own, so no other server's 3306 is met
	# (nor this test's in another run at the same time: one at random).
	local addr i pf=$BATS_TEST_TMPDIR/p.port
	proxy_up() { [[ -s $pf ]] || ! kill -0 "$fake_pid" 2>/dev/null; }
	for ((i = 0; i < 10; i++)); do
		addr=127.73.$((RANDOM % 256)).$((RANDOM % 254 + 1))
		"$LR_TOOLS/lrproxy" --target "$LR_PORT" --bind "$addr" --listen 3306 \
			--port-file "$pf" --control "$BATS_TEST_TMPDIR/ctl" >/dev/null 2>&1 3>&- &
		fake_pid=$!
		lr_wait_for proxy_up
		[[ -s $pf ]] && break
		wait "$fake_pid" || true
	done
	[[ -s $pf ]] || fail "no address on 127.73.0.0/16 took port 3306"
	conf_with "host=$addr"
	sed -i '/^port *=/d' "$conf"
	run "$LOCKRUN" -c "$conf" -x no-port -- sh -c 'echo "token $LOCKRUN_FENCE"'
	assert_success
	assert_output --regexp '^token [0-9]+$'
}

@test "hosts are tried in order: a dead first host falls through to the next" {
	fake hang
	printf '[database]\nhost = 127.0.0.1, localhost\nport = %s\nsocket = %s\nuser = root\nconnect_timeout = 1\n' \
		"$fake_port" "$LR_SOCKET" >"$conf"
	run "$LOCKRUNCTL" -c "$conf" status
	assert_success
}

@test "every host failing: one line naming each host and its cause" {
	printf '[database]\nhost = 127.0.0.1,127.0.0.1\nport = 1\nuser = x\n' >"$conf"
	run "$LOCKRUNCTL" -c "$conf" status
	assert_failure 69
	assert_output --regexp "^lockrunctl: cannot connect to any database host: 127.0.0.1:1: .*; 127.0.0.1:1: .*$"
}

@test "TLS: ssl_ca with ssl_verify_server_cert succeeds against the test CA" {
	# An account that can only log in over TLS proves the connection was TLS.
	sql "CREATE USER IF NOT EXISTS 'lrtls'@'%' IDENTIFIED BY 'tls-pw' REQUIRE SSL;
		GRANT EXECUTE ON lockrun.* TO 'lrtls'@'%'"
	printf 'tls-pw\n' >"$BATS_TEST_TMPDIR/pw"
	chmod 600 "$BATS_TEST_TMPDIR/pw"
	conf_with "user=lrtls" "password_file=$BATS_TEST_TMPDIR/pw" "ssl_ca=$LR_TLS/ca.pem" \
		"ssl_verify_server_cert=true"
	"$LOCKRUNCTL" -c "$LR_ADMIN_CONFIG" -q set tlssem 1
	run "$LOCKRUN" -c "$conf" -s tlssem -- echo inside
	assert_success
	assert_output "inside"
}

@test "TLS: a wrong CA is refused with a clear error" {
	conf_with "ssl_ca=$LR_TLS/other-ca.pem" "ssl_verify_server_cert=true"
	run "$LOCKRUN" -c "$conf" -s any -- true
	assert_failure 69
	assert_output --regexp "^lockrun: cannot connect to 127.0.0.1:$LR_PORT: TLS/SSL error: .*certificate"
}

@test "TLS: an account that requires TLS is refused without it" {
	sql "CREATE USER IF NOT EXISTS 'lrtls'@'%' IDENTIFIED BY 'tls-pw' REQUIRE SSL"
	printf 'tls-pw\n' >"$BATS_TEST_TMPDIR/pw"
	chmod 600 "$BATS_TEST_TMPDIR/pw"
	conf_with "user=lrtls" "password_file=$BATS_TEST_TMPDIR/pw"
	run "$LOCKRUNCTL" -c "$conf" status
	assert_failure 69
	assert_output --partial "Access denied"
}

@test "TLS asked for but not offered by the server: refused, never plain text" {
	fake old
	conf_with "port=$fake_port" "ssl_ca=$LR_TLS/ca.pem"
	run "$LOCKRUN" -c "$conf" -s any -- true
	assert_failure 69
	assert_output "lockrun: cannot connect to 127.0.0.1:$fake_port: TLS is required (ssl_ca, ssl_cert or ssl_verify_server_cert) but the server did not offer it"
}
