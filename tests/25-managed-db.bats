#!/usr/bin/env bats
#
# A managed database (Amazon RDS for MariaDB or for MySQL, and the like):
# binary logging on, log_bin_trust_function_creators off, and a master
# account with exactly the privileges such a service gives (no SUPER; on
# MariaDB no SET USER, on MySQL no SET_ANY_DEFINER, no
# SYSTEM_VARIABLES_ADMIN). That account alone sets lockrun up, and lockrun
# then works with the runtime account of sql/grant.sql. A server of its
# own, started here with --log-bin, of the flavour the suite runs.

load helpers/common

# The global privileges of Amazon RDS for MariaDB's master account, all
# WITH GRANT OPTION.
RDS_PRIVS="SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, RELOAD, PROCESS, REFERENCES, INDEX,
	ALTER, SHOW DATABASES, CREATE TEMPORARY TABLES, LOCK TABLES, EXECUTE, REPLICATION CLIENT,
	CREATE VIEW, SHOW VIEW, CREATE ROUTINE, ALTER ROUTINE, CREATE USER, EVENT, TRIGGER,
	REPLICATION SLAVE"
# Amazon RDS for MySQL's (8.0.36 and later, 8.4 included) are the same and
# these, also WITH GRANT OPTION (the master account also has the role
# rds_superuser_role, which holds no more than these). Its list also names
# SET_USER_ID, which MySQL 8.4 replaced with SET_ANY_DEFINER and
# ALLOW_NONEXISTENT_DEFINER and 9.7 no longer knows; RDS refuses to grant
# ALLOW_NONEXISTENT_DEFINER, and does not say whether its 8.4 master has
# SET_ANY_DEFINER: the master here has neither, the harder case, and a
# test below gives another account SET_ANY_DEFINER.
RDS_MYSQL_STATIC="CREATE ROLE, DROP ROLE"
RDS_MYSQL_DYNAMIC="APPLICATION_PASSWORD_ADMIN, ROLE_ADMIN, XA_RECOVER_ADMIN"

setup_file() {
	export MG=$LR_TMP/mg
	mkdir -p "$MG"
	lr_server_init "$MG" >/dev/null
	lr_server_start "$MG" "$(lr_free_port)" --log-bin=mg-bin --server-id=7 \
		--log-bin-trust-function-creators=0 >/dev/null
	lr_admin_sql "$MG" "CREATE USER 'master'@'%' IDENTIFIED BY 'masterpw'"
	rds_grant "'master'@'%'" | lr_admin_sql "$MG"
	local port
	port=$(<"$MG/server.port")
	printf '[database]\nhost = 127.0.0.1\nport = %s\nuser = master\npassword = masterpw\ndatabase = lockrun\n' \
		"$port" >"$MG/master.conf"
	printf '[database]\nhost = 127.0.0.1\nport = %s\nuser = lockrun\npassword = runtimepw\ndatabase = lockrun\n' \
		"$port" >"$MG/runtime.conf"
	lr_server_key_conf "$MG" | tee -a "$MG/master.conf" >>"$MG/runtime.conf"
	chmod 600 "$MG/master.conf" "$MG/runtime.conf"
}

# rds_grant ACCOUNT: the GRANT statements that give ACCOUNT the master
# account's privileges on the server the suite runs.
rds_grant() {
	if lr_server_is_mysql; then
		printf 'GRANT %s, %s ON *.* TO %s WITH GRANT OPTION;\n' "$RDS_PRIVS" "$RDS_MYSQL_STATIC" "$1"
		printf 'GRANT %s ON *.* TO %s WITH GRANT OPTION;\n' "$RDS_MYSQL_DYNAMIC" "$1"
	else
		printf 'GRANT %s ON *.* TO %s WITH GRANT OPTION;\n' "$RDS_PRIVS" "$1"
	fi
}

# The privilege that names another account as a routine's definer, which
# the master account lacks, by the server's name for it.
set_user() {
	if lr_server_is_mysql; then echo SET_ANY_DEFINER; else echo "SET USER"; fi
}

teardown_file() {
	lr_server_stop "$MG"
}

# master SQL: run SQL as the master account, in the lockrun database if it
# exists.
master() {
	MYSQL_PWD=masterpw mariadb --no-defaults --skip-ssl-verify-server-cert -h 127.0.0.1 -P "$(<"$MG/server.port")" -u master -N -B "$@"
}

@test "the server is what a managed database is: binary log on, no trust for function creators, no SUPER" {
	assert_equal "$(master -e "SELECT @@log_bin, @@log_bin_trust_function_creators")" "$(printf '1\t0')"
	run master -e "SHOW GRANTS"
	refute_output --partial SUPER
	refute_output --partial "SET USER"
	refute_output --partial SET_ANY_DEFINER
	refute_output --partial ALLOW_NONEXISTENT_DEFINER
	refute_output --partial SYSTEM_VARIABLES_ADMIN
	refute_output --partial "ALL PRIVILEGES"
	if lr_server_is_mysql; then
		assert_output --partial ROLE_ADMIN
	fi
}

# Before any other init: on a fresh server the definer does not exist yet,
# and MySQL refuses to name one that does not exist without
# ALLOW_NONEXISTENT_DEFINER, which a managed MySQL never gives.
@test "MySQL: a master account that also has SET_ANY_DEFINER installs with 'lockrun_owner' as the routines' definer" {
	lr_server_is_mysql || skip "MySQL's SET_ANY_DEFINER; MariaDB's SET USER is not a managed MariaDB's"
	assert_equal "$(master -e "SELECT COUNT(*) FROM mysql.user WHERE User = 'lockrun_owner'")" 0
	lr_admin_sql "$MG" "CREATE USER 'dba_sad'@'%' IDENTIFIED BY 'sadpw';
		$(rds_grant "'dba_sad'@'%'") GRANT SET_ANY_DEFINER ON *.* TO 'dba_sad'@'%';
		CREATE DATABASE lockrun_sad"
	local conf=$BATS_TEST_TMPDIR/sad.conf
	sed 's/^user = .*/user = dba_sad/; s/^password = .*/password = sadpw/; s/^database = .*/database = lockrun_sad/' \
		"$MG/master.conf" >"$conf"
	chmod 600 "$conf"
	run "$LOCKRUNCTL" -c "$conf" doctor
	assert_output --regexp "$(printf '%s' "GRANT OPTION\\): yes, with 'lockrun_owner'@'localhost' as the routines' definer" | sed 's/ /[[:space:]]+/g')"
	run "$LOCKRUNCTL" -c "$conf" init
	assert_success
	refute_output --partial "SET_ANY_DEFINER"
	assert_equal "$(master -e "SELECT DISTINCT DEFINER FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = 'lockrun_sad'")" \
		"lockrun_owner@localhost"
}

@test "the master account alone sets lockrun up: database, runtime account, its role, init" {
	master -e "CREATE DATABASE lockrun; CREATE USER 'lockrun'@'%' IDENTIFIED BY 'runtimepw'"
	master -D lockrun <"$LR_SRC/sql/grant.sql"
	# doctor says beforehand that init will work, and as whom the routines
	# will run.
	run "$LOCKRUNCTL" -c "$MG/master.conf" doctor
	assert_output --regexp "$(printf '%s' "lockrunctl init \\(DDL, CREATE ROUTINE, CREATE USER, GRANT OPTION\\): yes, with this account as the routines' definer \\(no $(set_user)\\)" | sed 's/ /[[:space:]]+/g')"
	run "$LOCKRUNCTL" -c "$MG/master.conf" init
	assert_success
	assert_line --partial "lacks $(set_user)"
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

# On MariaDB only an account with ADMIN OPTION on the role may grant it,
# which the server gives its creator alone; on MySQL ROLE_ADMIN may grant
# any role, and a managed MySQL's master account has it.
@test "sql/grant.sql run by another administrator: 1698 on MariaDB until the role's creator gives it ADMIN OPTION, as grant.sql says, at once on MySQL (ROLE_ADMIN); then its account locks" {
	master -e "CREATE USER 'dba2'@'%' IDENTIFIED BY 'dba2pw'; $(rds_grant "'dba2'@'%'")
		CREATE USER 'app2'@'%' IDENTIFIED BY 'app2pw'"
	dba2() {
		MYSQL_PWD=dba2pw mariadb --no-defaults --skip-ssl-verify-server-cert -h 127.0.0.1 -P "$(<"$MG/server.port")" -u dba2 -D lockrun -N -B
	}
	# grant.sql for another account, as that administrator.
	local g
	g=$(sed "s/'lockrun'@'%'/'app2'@'%'/g" "$LR_SRC/sql/grant.sql")
	if lr_server_is_mysql; then
		dba2 <<<"$g"
	else
		run dba2 <<<"$g"
		assert_failure
		assert_output --partial "ERROR 1698"
		# What grant.sql says the creator runs once.
		grep -q "GRANT lockrun_api TO 'other_admin'@'%' WITH ADMIN OPTION;" "$LR_SRC/sql/grant.sql"
		master -e "GRANT lockrun_api TO 'dba2'@'%' WITH ADMIN OPTION"
		dba2 <<<"$g"
	fi
	run "$LOCKRUN" -c <(sed 's/^user = .*/user = app2/; s/^password = .*/password = app2pw/' "$MG/runtime.conf") \
		-x mg-dba2 -- sh -c 'echo "$LOCKRUN_FENCE"'
	assert_success
	assert_output 1
}

@test "doctor, run by the master account, finds nothing that stops lockrun, and knows the binary log is on" {
	run "$LOCKRUNCTL" -c "$MG/master.conf" doctor
	refute_line --regexp '^FAIL'
	assert_output --regexp "$(printf '%s' "info topology binary log on, gtid_(strict_)?mode (on|off), log_bin_trust_function_creators 0:" | sed 's/ /[[:space:]]+/g')"
}
