#!/usr/bin/env bats
#
# MySQL Group Replication on one member (doc/production.md, MySQL): a
# member of a single-primary group is a server lockrun locks on, named by
# its group (lr_server_state, sql/routines/05-server.sql), and `lockrunctl
# init` installs there; --named is refused (GET_LOCK is local to a
# member); a group in multi-primary mode is refused, saying why, with
# nothing written: lockrun exits 69 with one line, the routines answer
# 1290, `lockrunctl doctor` FAILs and `lockrunctl init` installs nothing.
# At group_replication_consistency EVENTUAL each member is named apart
# (a change of primary is a fail-over there).
#
# A server of its own, with the group_replication plugin, that bootstraps
# a group of one member. A group of three, with its faults, is
# tests/group/ (tests/run-group); one bootstrapped member is already a
# member in every way the routines look at (its group_replication_applier
# channel is on, it is ONLINE and PRIMARY in replication_group_members),
# and it switches to multi-primary mode and back by itself.

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
	export GR_NAME
	GR_NAME=$(cat /proc/sys/kernel/random/uuid)
	lr_server_start "$GR" "$(lr_free_port)" --server-id=36 --gtid-mode=ON \
		--enforce-gtid-consistency=ON --plugin-load-add=group_replication.so \
		--group-replication-group-name="$GR_NAME" \
		--group-replication-local-address="127.0.0.1:$xcom" \
		--group-replication-group-seeds="127.0.0.1:$xcom" \
		--group-replication-start-on-boot=OFF >/dev/null
	lr_provision "$GR"
	lr_admin_sql "$GR" "SET GLOBAL group_replication_bootstrap_group = ON;
		START GROUP_REPLICATION;
		SET GLOBAL group_replication_bootstrap_group = OFF"
	online() {
		[[ $(lr_admin_sql "$GR" "SELECT MEMBER_STATE FROM performance_schema.replication_group_members") == ONLINE ]]
	}
	lr_wait_for online
	# Installed on the member. A short max-ttl, for the epochs below.
	"$LOCKRUNCTL" -c "$GR/admin.conf" init >"$GR/init.out" 2>&1
	"$LOCKRUNCTL" -q -c "$GR/admin.conf" max-ttl 2s
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

# epoch: the server that writes the tables, as lr_epoch names it.
epoch() { gr_sql "SELECT server FROM lr_epoch WHERE id = 1" lockrun; }

# acquire_sql: one lockrun_acquire of mutex:gr by the runtime account.
acquire_sql() {
	env MYSQL_PWD="$(<"$GR/lockrun.pw")" mariadb --no-defaults --skip-ssl-verify-server-cert -h 127.0.0.1 \
		-P "$(<"$GR/server.port")" -u lockrun -D lockrun -N -B -e \
		"CALL lockrun_acquire('mutex:gr', '$(openssl rand -hex 16)', '$(openssl rand -hex 16)', 2000, 0,
			'apphost', 4242, 'tester', '36-group-replication test')"
}

@test "the server is the ONLINE primary member of a single-primary group it bootstrapped" {
	assert_equal "$(gr_sql "SELECT MEMBER_STATE, MEMBER_ROLE FROM performance_schema.replication_group_members")" \
		"$(printf 'ONLINE\tPRIMARY')"
	assert_equal "$(gr_sql "SELECT SERVICE_STATE FROM performance_schema.replication_applier_status
		WHERE CHANNEL_NAME = 'group_replication_applier'")" ON
	assert_equal "$(gr_sql "SELECT @@read_only, @@super_read_only, @@group_replication_single_primary_mode")" \
		"$(printf '0\t0\t1')"
}

@test "lockrunctl init installed on the member, and a lock is taken in the group's epoch" {
	run cat "$GR/init.out"
	assert_output --partial "schema upgraded from version 0"
	run "$LOCKRUN" -c "$GR/lockrun.conf" --ttl 2s --kill-after 0.1s -x gr -- sh -c 'echo "$LOCKRUN_FENCE"'
	assert_success
	# Named by the group, not the member: at BEFORE_ON_PRIMARY_FAILOVER a
	# change of primary is no fail-over.
	assert_equal "$(epoch)" "group:$GR_NAME"
	assert_equal "$(gr_sql "SELECT COUNT(*) FROM lr_epochs" lockrun)" 1
}

@test "--named is refused on a member (exit 64), with or without a table lock, and nothing is taken" {
	local mark=$BATS_TEST_TMPDIR/ran
	run -64 "$LOCKRUN" -c "$GR/lockrun.conf" --named x -- touch "$mark"
	assert_output --partial "is a member of a MySQL Group Replication group: named locks there are local to one member"
	assert [ ! -e "$mark" ]
	run -64 "$LOCKRUN" -c "$GR/lockrun.conf" -n -x gr --named x -- touch "$mark"
	assert_output --partial "MySQL Group Replication group"
	assert [ ! -e "$mark" ]
	assert_equal "$(gr_sql "SELECT COUNT(*) FROM lr_holds" lockrun)" 0
	assert_equal "$(gr_sql "SELECT IS_USED_LOCK('x')")" NULL
}

@test "lockrunctl doctor: a single-primary member, its primary, its consistency level" {
	run "$LOCKRUNCTL" -c "$GR/admin.conf" doctor
	assert_success
	local line
	for line in "ok galera a member of a single-primary MySQL Group Replication group (1 online), itself ONLINE PRIMARY; the primary is" \
		"ok group group_replication_consistency is BEFORE_ON_PRIMARY_FAILOVER: a new primary applies everything"; do
		assert_output --regexp "$(printf '%s' "$line" | sed 's/[()]/\\&/g; s/ /[[:space:]]+/g')"
	done
	# The runtime account reads the members through sql/grant.sql's grant.
	run "$LOCKRUNCTL" -c "$GR/lockrun.conf" doctor
	assert_output --regexp "itself[[:space:]]+ONLINE[[:space:]]+PRIMARY"
	refute_output --regexp "WARN[[:space:]]+group"
}

@test "lockrunctl doctor WARNs an account that may not read replication_group_members" {
	gr_sql "REVOKE SELECT ON performance_schema.replication_group_members FROM lockrun_api"
	run "$LOCKRUNCTL" -c "$GR/lockrun.conf" doctor
	gr_sql "GRANT SELECT ON performance_schema.replication_group_members TO lockrun_api"
	assert_output --regexp "WARN[[:space:]]+group[[:space:]]+this account may not read[[:space:]]+performance_schema.replication_group_members[[:space:]]+\(error 1142\)"
}

@test "multi-primary mode: lockrun, the SQL API, doctor and init refuse it with one line, writing nothing" {
	gr_sql "SELECT group_replication_switch_to_multi_primary_mode()" >/dev/null
	local before
	before=$(state)
	run --separate-stderr "$LOCKRUN" -c "$GR/lockrun.conf" -x gr -- touch "$BATS_TEST_TMPDIR/ran"
	local rc=$status err=$stderr nerr=${#stderr_lines[@]}
	run acquire_sql
	local sql=$output
	run "$LOCKRUNCTL" -c "$GR/admin.conf" doctor
	local doctor=$output doctor_rc=$status
	run "$LOCKRUNCTL" -c "$GR/admin.conf" init
	local init=$output init_rc=$status
	local after
	after=$(state)
	gr_sql "SELECT group_replication_switch_to_single_primary_mode()" >/dev/null
	assert_equal "$rc" 69
	assert_equal "$nerr" 1
	assert_regex "$err" '^lockrun: .*: lockrun: this group is in multi-primary mode, which lockrun does not support \(1290\)$'
	[[ ! -e $BATS_TEST_TMPDIR/ran ]]
	[[ $sql == *"ERROR 1290 (HY000)"*"lockrun: this group is in multi-primary mode, which lockrun does not support"* ]]
	assert_equal "$doctor_rc" 1
	[[ $doctor =~ FAIL[[:space:]]+galera[[:space:]]+a[[:space:]]+member[[:space:]]+of[[:space:]]+a[[:space:]]+MySQL[[:space:]]+Group[[:space:]]+Replication[[:space:]]+group[[:space:]]+in[[:space:]]+multi-primary[[:space:]]+mode ]]
	assert_equal "$init_rc" 69
	[[ $init =~ init\ failed:\ .*:\ this\ group\ is\ in\ multi-primary\ mode,\ which\ lockrun\ does\ not\ support:\ nothing\ was\ installed$ ]]
	assert_equal "$after" "$before"
	# Single-primary again: locks as before, in the same epoch.
	run "$LOCKRUN" -c "$GR/lockrun.conf" --ttl 2s --kill-after 0.1s -x gr -- true
	assert_success
	assert_equal "$(epoch)" "group:$GR_NAME"
}

# At EVENTUAL the member is named too: its next grant starts an epoch
# (max-ttl 2 s plus 5 s of quarantine, tokens above the floor), and doctor
# says what that costs. Back at the default level, the group's name again:
# one more epoch.
@test "at consistency EVENTUAL the member is named apart: a new epoch, its quarantine, and doctor's WARN" {
	local f0 f1 t0
	f0=$(gr_sql "SELECT MAX(fence) FROM lr_resources WHERE name = 'gr'" lockrun)
	gr_sql "SET GLOBAL group_replication_consistency = EVENTUAL"
	t0=$SECONDS
	run "$LOCKRUN" -c "$GR/lockrun.conf" --ttl 2s --kill-after 0.1s -x gr -- sh -c 'echo "$LOCKRUN_FENCE"'
	local rc=$status waited=$((SECONDS - t0))
	f1=$output
	run "$LOCKRUNCTL" -c "$GR/admin.conf" doctor
	local doctor=$output me
	me=$(epoch)
	gr_sql "SET GLOBAL group_replication_consistency = DEFAULT"
	assert_equal "$rc" 0
	assert_equal "$me" "group:$GR_NAME:$(gr_sql "SELECT @@server_uuid")"
	assert_equal "$(gr_sql "SELECT previous FROM lr_epochs ORDER BY epoch DESC LIMIT 1" lockrun)" "group:$GR_NAME"
	((waited >= 6)) || fail "granted after ${waited}s, within the quarantine"
	((f1 > f0))
	[[ $doctor =~ WARN[[:space:]]+group[[:space:]]+group_replication_consistency[[:space:]]+is[[:space:]]+EVENTUAL ]]
}

# The group's transactions carry the group's name as their GTIDs' source,
# and a member is named by its group: once the server leaves it, it writes
# alone, as another server: a new epoch, whose first grant waits for
# max-ttl plus 5 s and whose token is above every earlier one.
@test "out of the group again, the same server and account lock as before, in a new epoch" {
	gr_sql "STOP GROUP_REPLICATION; SET GLOBAL super_read_only = OFF, read_only = OFF"
	run "$LOCKRUN" -c "$GR/lockrun.conf" --ttl 2s --kill-after 0.1s -x gr -- sh -c 'echo "$LOCKRUN_FENCE"'
	assert_success
	((output > 1))
	[[ $(epoch) == server:* ]]
	[[ $(gr_sql "SELECT previous FROM lr_epochs ORDER BY epoch DESC LIMIT 1" lockrun) == "group:$GR_NAME"* ]]
	# A member out of its group and writable is a server beside the group:
	# doctor FAILs it.
	run "$LOCKRUNCTL" -c "$GR/admin.conf" doctor
	assert_failure 1
	assert_output --regexp "FAIL[[:space:]]+galera[[:space:]]+configured[[:space:]]+for[[:space:]]+a[[:space:]]+MySQL[[:space:]]+Group[[:space:]]+Replication[[:space:]]+group[[:space:]]+but[[:space:]]+OFFLINE,[[:space:]]+not[[:space:]]+in[[:space:]]+it,[[:space:]]+and[[:space:]]+writable"
}
