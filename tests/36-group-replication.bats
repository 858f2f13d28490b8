#!/usr/bin/env bats
#
# MySQL Group Replication, which lockrun does not support
# (doc/production.md, MySQL): on a member of a group every way in is
# refused, saying why, and nothing is written. lockrun exits 69 with one
# line, the routines answer 1290, `lockrunctl doctor` FAILs, and
# `lockrunctl init` installs nothing (its last step calls the routines,
# which refuse: it asks first, so that it does not stop half-way).
#
# A server of its own, with the group_replication plugin, installed while
# it is a plain server and then the one member of a group it bootstraps.
# The real case, a multi-primary group, takes three mysqld; one
# bootstrapped member is already a member in every way the refusal looks
# at (its group_replication_applier channel is on, it is ONLINE in
# replication_group_members), so it is enough to show the refusal.

load helpers/common

bats_require_minimum_version 1.5.0

setup() {
	lr_server_is_mysql || skip "Group Replication is MySQL's; this run's server is MariaDB"
	[[ -e $LR_SERVER_ROOT/usr/lib/mysql/plugin/group_replication.so ]] ||
		skip "no group_replication plugin in $LR_SERVER_ROOT"
}

setup_file() {
	export GR=$LR_TMP/gr
	lr_server_is_mysql || return 0
	[[ -e $LR_SERVER_ROOT/usr/lib/mysql/plugin/group_replication.so ]] || return 0
	mkdir -p "$GR"
	lr_server_init "$GR" >/dev/null
	local xcom
	xcom=$(lr_free_port)
	# What a member needs: GTIDs, a server_id, the plugin, the group's
	# name, and where its group communication listens (a loopback port of
	# its own, also the only seed). Not started at boot: bootstrapped below.
	lr_server_start "$GR" "$(lr_free_port)" --server-id=36 --gtid-mode=ON \
		--enforce-gtid-consistency=ON --plugin-load-add=group_replication.so \
		--group-replication-group-name="$(cat /proc/sys/kernel/random/uuid)" \
		--group-replication-local-address="127.0.0.1:$xcom" \
		--group-replication-group-seeds="127.0.0.1:$xcom" \
		--group-replication-start-on-boot=OFF >/dev/null
	lr_provision "$GR"
	# Installed, and the mutex gr taken once, while not a member. A short
	# max-ttl, for the last test's new epoch.
	"$LOCKRUNCTL" -c "$GR/admin.conf" init >/dev/null 2>&1
	"$LOCKRUNCTL" -q -c "$GR/admin.conf" max-ttl 2s
	"$LOCKRUN" -c "$GR/lockrun.conf" --ttl 2s --kill-after 0.1s -x gr -- true
	lr_admin_sql "$GR" "SET GLOBAL group_replication_bootstrap_group = ON;
		START GROUP_REPLICATION;
		SET GLOBAL group_replication_bootstrap_group = OFF"
	online() {
		[[ $(lr_admin_sql "$GR" "SELECT MEMBER_STATE FROM performance_schema.replication_group_members") == ONLINE ]]
	}
	lr_wait_for online
}

teardown_file() {
	lr_server_stop "$GR"
}

# gr_sql SQL [DATABASE]: SQL as the server's administrator.
gr_sql() { lr_admin_sql "$GR" "$1" "${2:-}"; }

# state: what a refusal must leave as it was: the transactions this server
# committed (a write on a member gets a GTID) and every lockrun table's
# checksum.
state() {
	gr_sql "SELECT @@global.gtid_executed"
	gr_sql "CHECKSUM TABLE $(gr_sql "SELECT GROUP_CONCAT(TABLE_NAME ORDER BY TABLE_NAME)
		FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'lockrun'")" lockrun
}

@test "the server is the ONLINE primary member of a group it bootstrapped" {
	assert_equal "$(gr_sql "SELECT MEMBER_STATE, MEMBER_ROLE FROM performance_schema.replication_group_members")" \
		"$(printf 'ONLINE\tPRIMARY')"
	assert_equal "$(gr_sql "SELECT SERVICE_STATE FROM performance_schema.replication_applier_status
		WHERE CHANNEL_NAME = 'group_replication_applier'")" ON
	# Writable: the refusals below are lockrun's, not a read-only server's.
	assert_equal "$(gr_sql "SELECT @@read_only, @@super_read_only")" "$(printf '0\t0')"
}

@test "lockrun exits 69 with one line naming Group Replication, runs nothing and writes nothing" {
	local before
	before=$(state)
	run --separate-stderr "$LOCKRUN" -c "$GR/lockrun.conf" -x gr -- touch "$BATS_TEST_TMPDIR/ran"
	assert_failure 69
	assert_equal "${#stderr_lines[@]}" 1
	assert_regex "$stderr" '^lockrun: .*: lockrun: this server is a member of a MySQL Group Replication group, which lockrun does not support \(1290\)$'
	[[ ! -e $BATS_TEST_TMPDIR/ran ]]
	assert_equal "$(state)" "$before"
}

@test "the SQL API refuses a CALL with 1290 naming Group Replication, and writes nothing" {
	local before
	before=$(state)
	run env MYSQL_PWD="$(<"$GR/lockrun.pw")" mariadb --no-defaults --skip-ssl-verify-server-cert -h 127.0.0.1 \
		-P "$(<"$GR/server.port")" -u lockrun -D lockrun -N -B -e \
		"CALL lockrun_acquire('mutex:gr', '$(openssl rand -hex 16)', '$(openssl rand -hex 16)', 2000, 0,
			'apphost', 4242, 'tester', '36-group-replication test')"
	assert_failure
	assert_output --partial "ERROR 1290 (HY000)"
	assert_output --partial "lockrun: this server is a member of a MySQL Group Replication group, which lockrun does not support"
	assert_equal "$(state)" "$before"
}

@test "lockrunctl doctor FAILs the member, naming Group Replication" {
	run "$LOCKRUNCTL" -c "$GR/admin.conf" doctor
	assert_failure 1
	assert_output --regexp "$(printf '%s' "FAIL galera a member of a MySQL Group Replication group \\(1 online\\): lockrun does not support Group Replication and takes no lock here" | sed 's/ /[[:space:]]+/g')"
}

@test "lockrunctl init installs nothing on a member, and says why" {
	local before
	before=$(state)
	run "$LOCKRUNCTL" -c "$GR/admin.conf" init
	assert_failure 69
	assert_output --regexp 'init failed: .*: this server is a member of a MySQL Group Replication group, which lockrun does not support: nothing was installed$'
	assert_equal "$(state)" "$before"
	# Nor on an empty database: no table, no routine, no role.
	gr_sql "CREATE DATABASE lockrun_gr"
	sed 's/^database = .*/database = lockrun_gr/' "$GR/admin.conf" >"$BATS_TEST_TMPDIR/gr.conf"
	run "$LOCKRUNCTL" -c "$BATS_TEST_TMPDIR/gr.conf" init
	assert_failure 69
	assert_output --partial "nothing was installed"
	assert_equal "$(gr_sql "SELECT (SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'lockrun_gr'),
		(SELECT COUNT(*) FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = 'lockrun_gr'),
		(SELECT COUNT(*) FROM mysql.user WHERE User = 'lockrun_gr_api')")" "$(printf '0\t0\t0')"
}

# The refusals above are the membership's: once the server leaves the
# group, the same installation and account lock again. The group's
# transactions carry the group's name as their GTIDs' source, so the server
# that writes the tables has another name now (lr_server_me): a new epoch,
# whose first grant waits for max-ttl plus 5 s and whose token is above
# every earlier one.
@test "out of the group again, the same server and account lock as before, in a new epoch" {
	gr_sql "STOP GROUP_REPLICATION; SET GLOBAL super_read_only = OFF, read_only = OFF"
	run "$LOCKRUN" -c "$GR/lockrun.conf" --ttl 2s --kill-after 0.1s -x gr -- sh -c 'echo "$LOCKRUN_FENCE"'
	assert_success
	((output > 1))
}
