#!/usr/bin/env bats
#
# The errors of a newcomer's first hour say what is wrong and what to do:
# a refused login names the user and where the password came from (and,
# for a local server, the anonymous account that may shadow it); a
# database nobody initialised says to run init; a missing database, the
# statement that creates it; a socket nobody answers on, the setting for a
# server elsewhere; an unreadable configuration file, who may read it.

load helpers/common

bats_require_minimum_version 1.5.0

setup() {
	conf=$BATS_TEST_TMPDIR/lockrun.conf
	fh_pw=$(openssl rand -hex 12)
}

teardown() {
	lr_admin_sql "$LR_DB" "DROP USER IF EXISTS ''@'localhost', 'lr_fh'@'%', 'lr_fh9u'@'%';
		DROP ROLE IF EXISTS lr_fh9_api; DROP DATABASE IF EXISTS lr_fh9;
		DROP DATABASE IF EXISTS lr_fh_gone" || true
}

# The suite's runtime configuration with one key's line replaced.
conf_with() {
	grep -v "^$1 *=" "$LR_DB/lockrun.conf" >"$conf"
	printf '%s = %s\n' "$1" "$2" >>"$conf"
	chmod 600 "$conf"
}

@test "a refused login names the user, where its password came from, and the anonymous account" {
	conf_with password wrong-password
	run -69 "$LOCKRUN" -c "$conf" -x fh -- true
	assert_output --partial "Access denied for user 'lockrun'"
	assert_output --partial "; check user 'lockrun' and the password (key password) in $conf. If they are right, an anonymous account ''@'localhost' (left by mariadb-install-db) may shadow 'lockrun'@'%': an administrator removes it with DROP USER ''@'localhost'"
	printf 'wrong-password' >"$BATS_TEST_TMPDIR/pw"
	chmod 600 "$BATS_TEST_TMPDIR/pw"
	conf_with password_file "$BATS_TEST_TMPDIR/pw"
	run -69 "$LOCKRUNCTL" -c "$conf" doctor
	assert_output --partial "; check user 'lockrun' and the password read from $BATS_TEST_TMPDIR/pw (password_file) in $conf"
}

@test "an anonymous ''@'localhost' that shadows the account: the hint's cure works" {
	lr_admin_sql "$LR_DB" "CREATE USER 'lr_fh'@'%' IDENTIFIED BY '$fh_pw';
		GRANT lockrun_api TO 'lr_fh'@'%';
		SET DEFAULT ROLE lockrun_api $(lr_server_is_mysql && echo TO || echo FOR) 'lr_fh'@'%';
		CREATE USER ''@'localhost'"
	printf '[database]\nsocket = %s\nuser = lr_fh\npassword = %s\n' "$LR_SOCKET" "$fh_pw" >"$conf"
	chmod 600 "$conf"
	run -69 "$LOCKRUN" -c "$conf" -x fh -- true
	assert_output --partial "Access denied for user 'lr_fh'@'localhost'"
	assert_output --partial "an anonymous account ''@'localhost' (left by mariadb-install-db) may shadow 'lr_fh'@'%': an administrator removes it with DROP USER ''@'localhost'"
	lr_admin_sql "$LR_DB" "DROP USER ''@'localhost'"
	run "$LOCKRUN" -c "$conf" -x fh -- echo ran
	assert_success
	assert_output ran
}

@test "a database nobody initialised: the runtime account is told to run init, and that works" {
	lr_admin_sql "$LR_DB" "CREATE DATABASE lr_fh9;
		CREATE USER 'lr_fh9u'@'%' IDENTIFIED BY '$fh_pw';
		CREATE ROLE lr_fh9_api; GRANT lr_fh9_api TO 'lr_fh9u'@'%';
		SET DEFAULT ROLE lr_fh9_api $(lr_server_is_mysql && echo TO || echo FOR) 'lr_fh9u'@'%'"
	printf '[database]\nhost = 127.0.0.1\nport = %s\nuser = lr_fh9u\npassword = %s\ndatabase = lr_fh9\n' \
		"$LR_PORT" "$fh_pw" >"$conf"
	lr_server_key_conf "$LR_DB" >>"$conf"
	chmod 600 "$conf"
	run -69 "$LOCKRUN" -c "$conf" -x fh -- true
	assert_output --partial "(1044)"
	assert_output --partial "; the account has no rights on database 'lr_fh9' yet: if 'lockrunctl init' has not run there, an administrator runs it; then gives the account the role lr_fh9_api"
	run -69 "$LOCKRUNCTL" -c "$conf" doctor
	assert_output --partial "if 'lockrunctl init' has not run there"
	sed 's/^database = .*/database = lr_fh9/' "$LR_ADMIN_CONFIG" >"$BATS_TEST_TMPDIR/admin.conf"
	run "$LOCKRUNCTL" -c "$BATS_TEST_TMPDIR/admin.conf" -q init
	assert_success
	run "$LOCKRUN" -c "$conf" -x fh -- echo ran
	assert_success
	assert_output ran
}

@test "init on a database that does not exist says the statement that creates it" {
	sed 's/^database = .*/database = lr_fh_gone/' "$LR_ADMIN_CONFIG" >"$conf"
	run -69 "$LOCKRUNCTL" -c "$conf" init
	assert_output --partial "Unknown database 'lr_fh_gone' (1049); an administrator creates it (CREATE DATABASE \`lr_fh_gone\`), then runs 'lockrunctl init'; or set database in $conf"
	[ -z "$(lr_admin_sql "$LR_DB" "SHOW DATABASES LIKE 'lr_fh_gone'")" ]
}

@test "no server on this host's socket: the hint names host and socket" {
	printf '[database]\nsocket = %s/none.sock\nuser = lockrun\n' "$BATS_TEST_TMPDIR" >"$conf"
	run -69 "$LOCKRUN" -c "$conf" -x fh -- true
	assert_output --partial "(2002); no server answers on this host's socket: for a server elsewhere set host (and port) in [database] of $conf, or socket for another path"
}

@test "a configuration file this user may not read: who may, and the ways on (78)" {
	# A directory that every user may search, as /etc is.
	local dir
	dir=$(mktemp -d /tmp/lrfh.XXXXXX)
	chmod 755 "$dir"
	conf=$dir/lockrun.conf
	cp "$LR_DB/lockrun.conf" "$conf"
	chgrp adm "$conf"
	chmod 640 "$conf"
	run -78 runuser -u nobody -- "$LOCKRUN" -c "$conf" -x fh -- true
	assert_output "lockrun: $conf: Permission denied (it is readable by its owner and the group 'adm': join that group, or give a file of your own with -c or \$LOCKRUN_CONFIG)"
	chmod 600 "$conf"
	run -78 runuser -u nobody -- "$LOCKRUNCTL" -c "$conf" status
	assert_output "lockrunctl: $conf: Permission denied (give a file of your own with -c or \$LOCKRUN_CONFIG)"
	chmod 700 "$dir"
	run -78 runuser -u nobody -- "$LOCKRUN" -c "$conf" -x fh -- true
	assert_output "lockrun: $conf: Permission denied (a directory on its path is closed to this user)"
	rm -rf "$dir"
}

@test "doctor with an operator's account finds no problem on a healthy install, and says why" {
	lr_admin_sql "$LR_DB" "CREATE USER 'lr_fh'@'%' IDENTIFIED BY '$fh_pw';
		GRANT SELECT, INSERT, UPDATE, DELETE ON lockrun.* TO 'lr_fh'@'%'"
	printf '[database]\nhost = 127.0.0.1\nport = %s\nuser = lr_fh\npassword = %s\n' \
		"$LR_PORT" "$fh_pw" >"$conf"
	lr_server_key_conf "$LR_DB" >>"$conf"
	chmod 600 "$conf"
	run "$LOCKRUNCTL" -c "$conf" doctor
	assert_success
	refute_output --partial FAIL
	run "$LOCKRUNCTL" -c "$conf" --json doctor
	assert_success
	run findings privileges "$output"
	assert_output --partial "info|lockrun (EXECUTE): no, an operator's account; lockrun runs with an account that has the role (sql/grant.sql)"
	run "$LOCKRUNCTL" -c "$conf" --json doctor
	run findings procedures "$output"
	assert_output "info|not executable by this operator's account; run 'lockrunctl doctor' with lockrun's own account to check them"
	# The runtime account may not read max-ttl: said so, not as '?'.
	run "$LOCKRUNCTL" --json doctor
	run findings topology "$output"
	refute_output --partial "(?)"
	assert_output --partial "max-ttl (not readable by this account)"
}
