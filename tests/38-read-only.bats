#!/usr/bin/env bats
#
# read_only is a fence whatever the routines' definer may do
# (doc/production.md): a fail-over makes the old primary read-only, and
# lockrun must grant, renew and start nothing there. The server's own
# refusal (1290) spares an account with CONNECTION_ADMIN or SUPER on
# MySQL, READ_ONLY ADMIN on MariaDB (and SUPER before 11.0), and such an
# account is the routines' definer when it installs them without SET USER
# (SET_ANY_DEFINER), as a managed database's master account does. So each
# database here is installed by an account without those, its routines'
# definer, which is then given one such privilege; after
# SET GLOBAL read_only = ON
# every writing routine refuses with 1290, lockrun exits 69 (or, holding,
# 76), and `lockrunctl init` installs nothing, even as the administrator.
#
# A server of its own: read_only is global.

load helpers/common

bats_require_minimum_version 1.5.0

# The installers' names, and the privilege of each that writes past
# read_only, by the server's name for it.
names() { if lr_server_is_mysql; then echo cadm sup; else echo roadm sup; fi; }
priv() {
	case $1 in
	cadm) echo CONNECTION_ADMIN ;;
	roadm) echo "READ_ONLY ADMIN" ;;
	sup) echo SUPER ;;
	esac
}

setup_file() {
	export RO=$LR_TMP/ro
	mkdir -p "$RO"
	lr_server_init "$RO" >/dev/null
	lr_server_start "$RO" "$(lr_free_port)" >/dev/null
	lr_provision "$RO"
	local n port
	port=$(<"$RO/server.port")
	# What init needs (doc/lockrunctl.1.scd, PRIVILEGES), and on MySQL
	# the roles; no SET USER, no SET_ANY_DEFINER.
	local base="SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, INDEX, ALTER, EXECUTE,
		CREATE ROUTINE, ALTER ROUTINE, CREATE USER"
	lr_server_is_mysql && base+=", CREATE ROLE, DROP ROLE, ROLE_ADMIN"
	for n in $(names); do
		lr_admin_sql "$RO" "CREATE DATABASE lr_$n;
			CREATE USER 'inst_$n'@'%' IDENTIFIED BY 'instpw';
			GRANT $base ON *.* TO 'inst_$n'@'%' WITH GRANT OPTION;
			CREATE USER 'rt_$n'@'%' IDENTIFIED BY 'rtpw';
			CREATE ROLE lr_${n}_api; GRANT lr_${n}_api TO 'rt_$n'@'%';
			SET DEFAULT ROLE lr_${n}_api $(lr_server_is_mysql && echo TO || echo FOR) 'rt_$n'@'%'"
		printf '[database]\nhost = 127.0.0.1\nport = %s\nuser = %s\npassword = %s\ndatabase = lr_%s\n' \
			"$port" "inst_$n" instpw "$n" >"$RO/inst_$n.conf"
		printf '[database]\nhost = 127.0.0.1\nport = %s\nuser = %s\npassword = %s\ndatabase = lr_%s\n' \
			"$port" "rt_$n" rtpw "$n" >"$RO/rt_$n.conf"
		lr_server_key_conf "$RO" | tee -a "$RO/inst_$n.conf" >>"$RO/rt_$n.conf"
		chmod 600 "$RO/inst_$n.conf" "$RO/rt_$n.conf"
		"$LOCKRUNCTL" -q -c "$RO/inst_$n.conf" init 2>/dev/null
		# Given after init: SUPER (MariaDB 10.11's included) would also
		# let init name 'lockrun_owner' as the definer.
		lr_admin_sql "$RO" "GRANT $(priv "$n") ON *.* TO 'inst_$n'@'%'"
	done
}

teardown_file() {
	lr_server_stop "$RO"
}

teardown() {
	lr_admin_sql "$RO" "SET GLOBAL read_only = OFF"
}

# state N: what a refusal must leave as it was: every table's checksum.
state() {
	lr_admin_sql "$RO" "CHECKSUM TABLE $(lr_admin_sql "$RO" "SELECT GROUP_CONCAT(TABLE_NAME ORDER BY TABLE_NAME)
		FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'lr_$1'")" "lr_$1"
}

# as N SQL: SQL as the installer N, in its database; rt N SQL: as its
# runtime account.
as() { client "inst_$1" instpw "lr_$1" "$2"; }
rt() { client "rt_$1" rtpw "lr_$1" "$2"; }
client() {
	MYSQL_PWD=$2 mariadb --no-defaults --skip-ssl-verify-server-cert -h 127.0.0.1 \
		-P "$(<"$RO/server.port")" -u "$1" -D "$3" -N -B -e "$4"
}

@test "on a read-only server lockrun exits 69 naming read_only, runs nothing and writes nothing" {
	local n before
	lr_admin_sql "$RO" "SET GLOBAL read_only = ON"
	for n in $(names); do
		# The case: the installer is the routines' definer, and may write
		# past read_only. SUPER may on MySQL; MariaDB took READ_ONLY ADMIN
		# out of it (10.11 and 11.8 both refuse it here).
		assert_equal "$(lr_admin_sql "$RO" "SELECT DISTINCT DEFINER FROM information_schema.ROUTINES
			WHERE ROUTINE_SCHEMA = 'lr_$n'")" "inst_$n@%"
		if [[ $n == sup ]] && ! lr_server_is_mysql; then
			run as "$n" "UPDATE lr_settings SET value = value WHERE name = 'max_ttl_ms'"
			assert_output --partial 1290
		else
			as "$n" "UPDATE lr_settings SET value = value WHERE name = 'max_ttl_ms'"
		fi
		before=$(state "$n")
		run --separate-stderr "$LOCKRUN" -c "$RO/rt_$n.conf" -x ro1 -- touch "$BATS_TEST_TMPDIR/ran"
		assert_failure 69
		assert_equal "${#stderr_lines[@]}" 1
		assert_regex "$stderr" "^lockrun: .*read_only.*\(1290\)$"
		[[ ! -e $BATS_TEST_TMPDIR/ran ]]
		assert_equal "$(state "$n")" "$before"
		assert_equal "$(lr_admin_sql "$RO" "SELECT COUNT(*) FROM lr_grants" "lr_$n")" 0
	done
}

@test "the SQL API: every writing procedure and new-epoch answer 1290 naming read_only, and write nothing" {
	local n req lease before call
	for n in $(names); do
		req=$(openssl rand -hex 16) lease=$(openssl rand -hex 16)
		rt "$n" "CALL lockrun_acquire('mutex:ro2', '$req', '$lease', 60000, 0,
			'apphost', 4242, 'tester', '38-read-only test')" >/dev/null
		lr_admin_sql "$RO" "SET GLOBAL read_only = ON"
		before=$(state "$n")
		# A release that cannot be written is not a success either.
		for call in "lockrun_acquire('mutex:ro2b', '$(openssl rand -hex 16)', '$(openssl rand -hex 16)',
				2000, 1, 'apphost', 4242, 'tester', '38-read-only test')" \
			"lockrun_renew('$lease', 2000)" "lockrun_release('$lease', 'exited', 0, NULL)" \
			"lockrun_poll('$req')" "lockrun_sleep('$req', 10)" "lockrun_dequeue('$req')" \
			"lockrun_host_queue('$req', 0)" "lockrun_settle('mutex:ro2', '$req', '$lease')"; do
			run rt "$n" "CALL $call"
			assert_failure
			assert_output --partial "ERROR 1290 (HY000)"
			assert_output --partial "lockrun writes nothing on a read-only server: read_only"
		done
		# lockrun_check only reads: it still answers.
		assert_equal "$(rt "$n" "CALL lockrun_check('$lease', NULL)" | cut -f1)" 1
		run "$LOCKRUNCTL" -c "$RO/inst_$n.conf" new-epoch
		assert_failure 69
		assert_output --partial read_only
		assert_equal "$(state "$n")" "$before"
		lr_admin_sql "$RO" "SET GLOBAL read_only = OFF"
	done
}

@test "a holder whose renewal a read-only server refuses stops its command and exits 76" {
	local n pids=()
	for n in $(names); do
		"$LOCKRUN" -c "$RO/rt_$n.conf" --ttl 2s --kill-after 0.1s -x ro3 -- sh -c \
			"touch '$BATS_TEST_TMPDIR/$n.started'; sleep 20; touch '$BATS_TEST_TMPDIR/$n.finished'" \
			2>"$BATS_TEST_TMPDIR/$n.err" 3>&- &
		pids+=($!)
		lr_wait_for test -e "$BATS_TEST_TMPDIR/$n.started"
	done
	lr_admin_sql "$RO" "SET GLOBAL read_only = ON"
	local i=0 status
	for n in $(names); do
		# Renewed every ttl/3: lost within the lease, not after the 20 s.
		lr_wait_for -t 6 sh -c "! kill -0 ${pids[i]} 2>/dev/null" || kill "${pids[i]}"
		status=0
		wait "${pids[i]}" || status=$?
		assert_equal "$status" 76
		grep -q read_only "$BATS_TEST_TMPDIR/$n.err"
		grep -q "not renewed in time" "$BATS_TEST_TMPDIR/$n.err"
		[[ ! -e $BATS_TEST_TMPDIR/$n.finished ]]
		i=$((i + 1))
	done
}

@test "lockrunctl init on a read-only server refuses with one line, even as the administrator, and installs nothing" {
	lr_admin_sql "$RO" "CREATE DATABASE lr_fresh; SET GLOBAL read_only = ON"
	sed 's/^database = .*/database = lr_fresh/' "$RO/admin.conf" >"$RO/fresh.conf"
	run --separate-stderr "$LOCKRUNCTL" -c "$RO/fresh.conf" init
	assert_failure 69
	assert_equal "${#stderr_lines[@]}" 1
	assert_regex "$stderr" "init failed: .*: the server is read-only \(read_only = (1|ON)\): run init on the primary; nothing was installed$"
	assert_equal "$(lr_admin_sql "$RO" "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'lr_fresh'")" 0
	local n
	for n in $(names); do
		run "$LOCKRUNCTL" -c "$RO/inst_$n.conf" init
		assert_failure 69
		assert_output --partial "the server is read-only"
	done
}
