#!/usr/bin/env bats
#
# A managed MariaDB (Amazon RDS and the like): binary logging on,
# log_bin_trust_function_creators off, and a master account with exactly the
# privileges such a service gives (no SUPER, no SET USER). That account alone
# sets lockrun up, and lockrun then works with the runtime account of
# sql/grant.sql. A server of its own, started here with --log-bin.

load helpers/common

# The global privileges of Amazon RDS for MariaDB's master account, all
# WITH GRANT OPTION.
RDS_PRIVS="SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, RELOAD, PROCESS, REFERENCES, INDEX,
	ALTER, SHOW DATABASES, CREATE TEMPORARY TABLES, LOCK TABLES, EXECUTE, REPLICATION CLIENT,
	CREATE VIEW, SHOW VIEW, CREATE ROUTINE, ALTER ROUTINE, CREATE USER, EVENT, TRIGGER,
	REPLICATION SLAVE"

# A managed MySQL's master account has other privileges (ROLE_ADMIN, no
# SUPER, ...): this file is Amazon RDS for MariaDB's case alone, and
# a managed MySQL is untested (doc/production.md).
setup() {
	if lr_server_is_mysql; then
		skip "the privileges here are a managed MariaDB's; a managed MySQL is untested"
	fi
}

setup_file() {
	export MG=$LR_TMP/mg
	lr_server_is_mysql && return 0
	mkdir -p "$MG"
	lr_server_init "$MG" >/dev/null
	lr_server_start "$MG" "$(lr_free_port)" --log-bin=mg-bin --server-id=7 \
		--log-bin-trust-function-creators=0 >/dev/null
	lr_admin_sql "$MG" "CREATE USER 'master'@'%' IDENTIFIED BY 'masterpw';
		GRANT $RDS_PRIVS ON *.* TO 'master'@'%' WITH GRANT OPTION"
	local port
	port=$(<"$MG/server.port")
	printf '[database]\nhost = 127.0.0.1\nport = %s\nuser = master\npassword = masterpw\ndatabase = lockrun\n' \
		"$port" >"$MG/master.conf"
	printf '[database]\nhost = 127.0.0.1\nport = %s\nuser = lockrun\npassword = runtimepw\ndatabase = lockrun\n' \
		"$port" >"$MG/runtime.conf"
	chmod 600 "$MG/master.conf" "$MG/runtime.conf"
}

teardown_file() {
	lr_server_stop "$MG"
}

# master SQL: run SQL as the master account, in the lockrun database if it
# exists.
master() {
	MYSQL_PWD=masterpw mariadb --no-defaults -h 127.0.0.1 -P "$(<"$MG/server.port")" -u master -N -B "$@"
}

@test "the server is what a managed database is: binary log on, no trust for function creators, no SUPER" {
	assert_equal "$(master -e "SELECT @@log_bin, @@log_bin_trust_function_creators")" "$(printf '1\t0')"
	run master -e "SHOW GRANTS"
	refute_output --partial SUPER
	refute_output --partial "SET USER"
	refute_output --partial "ALL PRIVILEGES"
}

@test "the master account alone sets lockrun up: database, runtime account, its role, init" {
	master -e "CREATE DATABASE lockrun; CREATE USER 'lockrun'@'%' IDENTIFIED BY 'runtimepw'"
	master -D lockrun <"$LR_SRC/sql/grant.sql"
	# doctor says beforehand that init will work, and as whom the routines
	# will run.
	run "$LOCKRUNCTL" -c "$MG/master.conf" doctor
	assert_output --regexp "$(printf '%s' "lockrunctl init \\(DDL, CREATE ROUTINE, CREATE USER, GRANT OPTION\\): yes, with this account as the routines' definer \\(no SET USER\\)" | sed 's/ /[[:space:]]+/g')"
	run "$LOCKRUNCTL" -c "$MG/master.conf" init
	assert_success
	assert_line --partial "lacks SET USER"
	assert_line --regexp "^schema upgraded from version 0 to [0-9]+"
	# Nothing that needs SUPER under binary logging: no trigger, no
	# function; the routines are the master's own.
	assert_equal "$(master -e "SELECT COUNT(*) FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = 'lockrun'")" 0
	assert_equal "$(master -e "SELECT COUNT(*) FROM information_schema.ROUTINES
		WHERE ROUTINE_SCHEMA = 'lockrun' AND ROUTINE_TYPE = 'FUNCTION'")" 0
	assert_equal "$(master -e "SELECT DISTINCT DEFINER FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = 'lockrun'")" "master@%"
	# Again: nothing to do, and no error.
	run "$LOCKRUNCTL" -c "$MG/master.conf" init
	assert_success
}

@test "on it, the runtime account locks, waits and is handed the lock, with increasing tokens" {
	local rec=$BATS_TEST_TMPDIR/rec gate=$BATS_TEST_TMPDIR/gate
	run "$LOCKRUN" -c "$MG/runtime.conf" -x mg -- sh -c 'echo "$LOCKRUN_FENCE"'
	assert_success
	assert_output 1
	"$LOCKRUN" -c "$MG/runtime.conf" -x mg -- sh -c \
		"echo A \$LOCKRUN_FENCE >>'$rec'; while [ ! -e '$gate' ]; do sleep 0.05; done; echo A end >>'$rec'" 3>&- &
	local a=$!
	lr_wait_for grep -q '^A ' "$rec"
	"$LOCKRUN" -c "$MG/runtime.conf" -w 20 -x mg -- sh -c "echo B \$LOCKRUN_FENCE >>'$rec'" 3>&- &
	local b=$!
	queued() { [[ $(master -D lockrun -e "SELECT COUNT(*) FROM lr_waiters WHERE resource = 'mg'") == 1 ]]; }
	lr_wait_for queued
	touch "$gate"
	wait "$a"
	wait "$b"
	# B ran after A ended, with the next token, and every count is exact.
	assert_equal "$(cat "$rec")" "$(printf 'A 2\nA end\nB 3')"
	assert_equal "$(master -D lockrun -e "SELECT used FROM lr_resources WHERE name = 'mg'")" 0
	# The runtime account has the role and nothing else there.
	run "$LOCKRUN" -c "$MG/runtime.conf" -n -s nosuch -- true
	assert_failure 64
}

@test "sql/grant.sql run by another administrator: 1698 until the role's creator gives it ADMIN OPTION, as grant.sql says; then its account locks" {
	master -e "CREATE USER 'dba2'@'%' IDENTIFIED BY 'dba2pw'; GRANT $RDS_PRIVS ON *.* TO 'dba2'@'%' WITH GRANT OPTION;
		CREATE USER 'app2'@'%' IDENTIFIED BY 'app2pw'"
	dba2() {
		MYSQL_PWD=dba2pw mariadb --no-defaults -h 127.0.0.1 -P "$(<"$MG/server.port")" -u dba2 -D lockrun -N -B "$@"
	}
	# grant.sql for another account, as that administrator.
	local g
	g=$(sed "s/'lockrun'@'%'/'app2'@'%'/g" "$LR_SRC/sql/grant.sql")
	run dba2 <<<"$g"
	assert_failure
	assert_output --partial "ERROR 1698"
	# What grant.sql says the creator runs once.
	grep -q "GRANT lockrun_api TO 'other_admin'@'%' WITH ADMIN OPTION;" "$LR_SRC/sql/grant.sql"
	master -e "GRANT lockrun_api TO 'dba2'@'%' WITH ADMIN OPTION"
	dba2 <<<"$g"
	run "$LOCKRUN" -c <(sed 's/^user = .*/user = app2/; s/^password = .*/password = app2pw/' "$MG/runtime.conf") \
		-x mg-dba2 -- sh -c 'echo "$LOCKRUN_FENCE"'
	assert_success
	assert_output 1
}

@test "doctor, run by the master account, finds nothing that stops lockrun, and knows the binary log is on" {
	run "$LOCKRUNCTL" -c "$MG/master.conf" doctor
	refute_line --regexp '^FAIL'
	assert_line --regexp '^info +topology +binary log on, gtid_strict_mode off,$'
}
