#!/usr/bin/env bats
#
# The server settings managed databases set, or let their users set, one
# at a time on the suite's server (SET GLOBAL, put back by teardown
# whatever happens). For each: a fresh database made by the operator
# under that setting, `lockrunctl init`, a lock run, a contended wait, a
# call of the SQL API and `lockrunctl doctor` all work; or lockrun fails
# at once with one line that names the setting, and doctor FAILs it.
# doc/production.md has the table. Judged from outside: exit statuses,
# what the commands print, and the database's rows.

load helpers/common

bats_require_minimum_version 1.5.0

# lrset_provision INSTDIR: on the server of INSTDIR (provisioned by
# lr_provision), a database lrset's runtime account 'lrset'@'%' with its
# role, as sql/grant.sql makes them, and its configs: INSTDIR/lrset.conf
# (that account, TCP) and INSTDIR/lrset-admin.conf. Each test installs
# into lrset from nothing, under its setting.
lrset_provision() {
	local inst=$1 pw
	pw=$(openssl rand -hex 16)
	lr_admin_sql "$inst" "DROP USER IF EXISTS 'lrset'@'%';
		CREATE USER 'lrset'@'%' IDENTIFIED BY '$pw';
		CREATE ROLE IF NOT EXISTS lrset_api; GRANT lrset_api TO 'lrset'@'%';
		SET DEFAULT ROLE lrset_api /*M! FOR */ /*!80000 TO */ 'lrset'@'%'"
	(
		umask 077
		printf '%s' "$pw" >"$inst/lrset.pw"
		sed "s/^user = .*/user = lrset/; s|^password_file = .*|password_file = $inst/lrset.pw|;
			s/^database = .*/database = lrset/" "$inst/lockrun.conf" >"$inst/lrset.conf"
		sed "s/^database = .*/database = lrset/" "$inst/admin.conf" >"$inst/lrset-admin.conf"
	)
	# As the suite's config: each lockrun stands for a host of its own.
	grep -q '^local_queue' "$inst/lrset.conf" || sed -i '1i [lock]\nlocal_queue = off\n' "$inst/lrset.conf"
}

setup_file() {
	export SD=$LR_TMP/settings
	mkdir -p "$SD"
	lrset_provision "$LR_DB"
}

teardown_file() {
	lr_admin_sql "$LR_DB" "DROP DATABASE IF EXISTS lrset; DROP USER IF EXISTS 'lrset'@'%';
		DROP ROLE IF EXISTS lrset_api" || true
	lr_server_stop "$SD/binlog" || true
}

# use INSTDIR: the tests' server from here on (S: its instance, SP: its port).
use() {
	S=$1
	SP=$(<"$S/server.port")
}

setup() {
	: >"$SD/restore.sql"
	pids=()
	use "$LR_DB"
	own=
}

# Puts every setting back, even after a failure; forgets the privileges
# MySQL cached for sessions begun under the setting; stops a server of
# the test's own.
teardown() {
	kill_pids
	lr_admin_sql "$S" <"$SD/restore.sql"
	lr_admin_sql "$S" "FLUSH PRIVILEGES"
	[[ -z $own ]] || lr_server_stop "$own"
}

# server NAME INIT_ARG ARGS...: a server of the suite's flavour of the
# file's own in $SD/NAME, initialised with INIT_ARG if not empty (MySQL
# takes lower_case_table_names only there), started with ARGS,
# provisioned, and used. Kept running for the next test that asks for NAME.
server() {
	local inst=$SD/$1 init=$2
	shift 2
	if ! lr_server_running "$inst"; then
		lr_server_init "$inst" ${init:+"$init"} >/dev/null
		lr_server_start "$inst" "$(lr_free_port)" "$@" >/dev/null
		lr_provision "$inst"
		lrset_provision "$inst"
	fi
	use "$inst"
}

# set_global NAME VALUE: SET GLOBAL NAME = VALUE (SQL), put back by teardown.
set_global() {
	local old
	old=$(lr_admin_sql "$S" "SELECT @@global.$1")
	[[ $old =~ ^[0-9.]+$ ]] || old="'$old'"
	printf 'SET GLOBAL %s = %s;\n' "$1" "$old" >>"$SD/restore.sql"
	lr_admin_sql "$S" "SET GLOBAL $1 = $2"
}

# has_var NAME: the server knows the global variable NAME.
has_var() {
	[[ -n $(lr_admin_sql "$S" "SHOW GLOBAL VARIABLES LIKE '$1'") ]]
}

# isolation: the server's name for the transaction isolation variable.
isolation() {
	if has_var transaction_isolation; then echo transaction_isolation; else echo tx_isolation; fi
}

# binlog: use a server that writes a binary log: the suite's on MySQL
# (MySQL's default), one of the file's own on MariaDB, which turns it on
# only at start.
binlog() {
	lr_server_is_mysql || server binlog "" --log-bin=lrset-bin --server-id=9
	assert_equal "$(lr_admin_sql "$S" "SELECT @@log_bin")" 1
}

# as_app SQL: SQL as the runtime account, in its database.
as_app() {
	MYSQL_PWD=$(<"$S/lrset.pw") mariadb --no-defaults --skip-ssl-verify-server-cert -h 127.0.0.1 \
		-P "$SP" -u lrset -D lrset -B -e "$1"
}

# fresh: the database as an operator makes it under the setting.
fresh() {
	local lift=
	has_var max_statement_time && lift="SET SESSION max_statement_time = 0;"
	lr_admin_sql "$S" "$lift DROP DATABASE IF EXISTS lrset; CREATE DATABASE lrset"
}

# finding CHECK: the status and detail of doctor's findings of CHECK, as
# "status|detail", one per line.
finding() {
	"$LOCKRUNCTL" -c "$S/lrset-admin.conf" --json doctor | python3 -c 'import json, sys
for f in json.load(sys.stdin)["checks"]:
    if f["check"] == sys.argv[1]: print(f["status"] + "|" + f["detail"])' "$1"
}

# tables: how many tables the database has.
tables() {
	lr_admin_sql "$S" "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'lrset'"
}

# refused WORD: init on a fresh database refuses at once, in one line that
# names WORD, and installs nothing; doctor FAILs it.
refused() {
	fresh
	local t0=${EPOCHREALTIME/[.,]/}
	run "$LOCKRUNCTL" -c "$S/lrset-admin.conf" init
	assert_failure 69
	assert_equal "${#lines[@]}" 1
	assert_output --partial "$1"
	assert_output --partial "nothing was installed"
	((${EPOCHREALTIME/[.,]/} - t0 < 5000000)) || fail "init took more than 5 s to refuse"
	assert_equal "$(tables)" 0
	run "$LOCKRUNCTL" -c "$S/lrset-admin.conf" doctor
	assert_failure 1
	assert_line --regexp "^FAIL .*$1"
}

# works: init on a fresh database, a lock run, a contended wait, the SQL
# API's acquire and release, and doctor without a FAIL, all succeed.
works() {
	fresh
	run "$LOCKRUNCTL" -c "$S/lrset-admin.conf" init
	assert_success
	run "$LOCKRUNCTL" -c "$S/lrset-admin.conf" init
	assert_success
	assert_output "schema is up to date (version $(ls "$LR_SRC"/sql/0*.sql | wc -l))"
	run "$LOCKRUN" -c "$S/lrset.conf" -x s1 -- true
	assert_success
	# The contended wait: a holder, then a waiter queued until it ends.
	"$LOCKRUN" -c "$S/lrset.conf" -x s2 -- sh -c "touch '$SD/held'; sleep 0.6" 3>&- &
	pids+=($!)
	lr_wait_for test -e "$SD/held"
	rm -f "$SD/held"
	local t0=${EPOCHREALTIME/[.,]/}
	run "$LOCKRUN" -c "$S/lrset.conf" -x s2 -- true
	assert_success
	((${EPOCHREALTIME/[.,]/} - t0 > 300000)) || fail "the second run did not wait"
	wait "${pids[0]}"
	local lease out
	lease=$(openssl rand -hex 16)
	out=$(as_app "${APP_CALL:-}CALL lockrun_acquire('mutex:api', '$lease', '$lease', 30000, 0,
		'apphost', 1, 'tester', '39-server-settings')")
	[[ $out == *$'\tok\t'* || $out == *$'\tok' ]] || fail "acquire: $out"
	out=$(as_app "${APP_CALL:-}CALL lockrun_release('$lease', 'exited', 0, NULL)")
	[[ $out == *released* ]] || fail "release: $out"
	assert_equal "$(lr_admin_sql "$S" "SELECT COUNT(*) FROM lr_grants WHERE ended_at IS NOT NULL" lrset)" 4
	run "$LOCKRUNCTL" -c "$S/lrset-admin.conf" doctor
	assert_success
	refute_output --partial FAIL
}

@test "sql_require_primary_key = ON" {
	has_var sql_require_primary_key || skip "no sql_require_primary_key on this server"
	set_global sql_require_primary_key ON
	works
}

@test "sql_generate_invisible_primary_key = ON" {
	has_var sql_generate_invisible_primary_key || skip "MySQL's setting"
	set_global sql_generate_invisible_primary_key ON
	works
}

@test "global isolation READ-COMMITTED" {
	set_global "$(isolation)" "'READ-COMMITTED'"
	works
}

@test "global isolation SERIALIZABLE" {
	set_global "$(isolation)" "'SERIALIZABLE'"
	works
}

@test "binlog_format = MIXED" {
	binlog
	set_global binlog_format "'MIXED'"
	works
}

# The server refuses the routines' writes (1665): init says so before it
# writes anything, lockrun in one line (the server's), and doctor FAILs it.
@test "binlog_format = STATEMENT: init refuses, lockrun fails at once, doctor FAILs it" {
	binlog
	set_global binlog_format "'STATEMENT'"
	refused "binlog_format is STATEMENT"
	assert_equal "$(finding binlog_format | cut -d'|' -f1)" problem
	# A database installed before the change: lockrun fails at once.
	lr_admin_sql "$S" "SET GLOBAL binlog_format = 'ROW'"
	run "$LOCKRUNCTL" -c "$S/lrset-admin.conf" init
	assert_success
	lr_admin_sql "$S" "SET GLOBAL binlog_format = 'STATEMENT'"
	local t0=${EPOCHREALTIME/[.,]/}
	run "$LOCKRUN" -c "$S/lrset.conf" -x s1 -- true
	assert_failure 69
	assert_output --partial "BINLOG_FORMAT = STATEMENT"
	((${EPOCHREALTIME/[.,]/} - t0 < 5000000)) || fail "lockrun took more than 5 s to fail"
}

# Set when the data directory is made (MySQL refuses another value later):
# a server of the test's own.
@test "lower_case_table_names = 1" {
	server lctn --lower-case-table-names=1 --lower-case-table-names=1
	own=$S
	assert_equal "$(lr_admin_sql "$S" "SELECT @@lower_case_table_names")" 1
	works
}

# The routines keep the sql_mode of the session that creates them: init's
# own, the server's default, strict (a value a column cannot hold fails
# the routine's statement rather than being cut to fit), whatever the
# global one. (How a CALL's arguments are converted is the caller's
# sql_mode's business.)
@test "sql_mode '': the routines are still strict" {
	set_global sql_mode "''"
	works
	run lr_admin_sql "$S" "SELECT DISTINCT SQL_MODE LIKE '%STRICT_TRANS_TABLES%'
		FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = 'lrset'"
	assert_output 1
}

@test "sql_mode TRADITIONAL" {
	set_global sql_mode "'TRADITIONAL'"
	works
}

# MariaDB: works. MySQL: a login under ANSI_QUOTES leaves the server's
# cache of the runtime account's privileges without its role's (1044, and
# 1370 for the SQL API), until FLUSH PRIVILEGES: init refuses, lockrun
# points at the cause, doctor FAILs it.
@test "sql_mode ANSI: works on MariaDB; on MySQL init refuses, lockrun names the cause, doctor FAILs it" {
	if ! lr_server_is_mysql; then
		set_global sql_mode "'ANSI'"
		works
		return
	fi
	fresh
	run "$LOCKRUNCTL" -c "$S/lrset-admin.conf" init
	assert_success
	set_global sql_mode "'ANSI'"
	refused "ANSI_QUOTES"
	run "$LOCKRUN" -c "$S/lrset.conf" -x s1 -- true
	assert_failure 69
	assert_equal "${#lines[@]}" 1
	assert_output --partial "(1044)"
	assert_output --partial "ANSI_QUOTES"
}

# init's record of the routines is committed (a second init finds
# nothing to do), and doctor says how autocommit is set.
@test "global autocommit = 0" {
	set_global autocommit 0
	works
	assert_equal "$(finding autocommit)" "info|autocommit is OFF globally: lockrun and lockrunctl turn autocommit on in their own sessions, and the routines commit what they write; an application's own statements around the SQL API stay in its transaction"
}

# For accounts without SUPER or CONNECTION_ADMIN: lockrun's runtime one.
@test "init_connect sets autocommit = 0" {
	set_global init_connect "'SET autocommit = 0'"
	works
	assert_equal "$(finding autocommit | cut -d'|' -f1)" info
}

@test "character_set_server = latin1, default_collation_for_utf8mb4 = utf8mb4_general_ci" {
	set_global character_set_server "'latin1'"
	if has_var default_collation_for_utf8mb4; then
		set_global default_collation_for_utf8mb4 "'utf8mb4_general_ci'"
	fi
	works
}

@test "innodb_lock_wait_timeout = 1" {
	set_global innodb_lock_wait_timeout 1
	works
}

# MySQL's limit reaches only a SELECT; MariaDB's every statement, an
# application's CALL too: there lockrun works, an application must lift
# the limit for its CALLs (the server's error names it), and doctor warns.
@test "a small max_execution_time (MySQL) or max_statement_time (MariaDB)" {
	if has_var max_execution_time; then
		set_global max_execution_time 10
		works
		return
	fi
	set_global max_statement_time 0.01
	APP_CALL="SET STATEMENT max_statement_time = 0 FOR " works
	# An application's wait in lockrun_sleep, under the global limit.
	"$LOCKRUN" -c "$S/lrset.conf" -x api -- sh -c "touch '$SD/held'; sleep 5" 3>&- &
	pids+=($!)
	lr_wait_for test -e "$SD/held"
	local req
	req=$(openssl rand -hex 16)
	run as_app "SET STATEMENT max_statement_time = 0 FOR CALL lockrun_acquire('mutex:api', '$req', '$req', 30000, 1,
		'apphost', 1, 'tester', '39-server-settings'); CALL lockrun_sleep('$req', 2000)"
	assert_failure
	assert_output --partial queued
	assert_output --partial "max_statement_time exceeded"
	assert_equal "$(finding max_statement_time | cut -d'|' -f1)" warning
}
