#!/usr/bin/env bats
#
# lockrunctl's promises that the other suites do not exercise: init is
# idempotent, usage errors exit 64 and write nothing; and lockrun's
# unsafe [lock] settings are blamed on the file (78).

load helpers/common

bats_require_minimum_version 1.5.0

setup() {
	reset_db
}

# A fingerprint of everything init creates: tables, columns, indexes,
# routines and the recorded versions.
schema_fingerprint() {
	sql "SELECT table_name, column_name, column_type, is_nullable, column_default
		FROM information_schema.columns WHERE table_schema = 'lockrun'
		ORDER BY table_name, ordinal_position;
		SELECT table_name, index_name, column_name, seq_in_index
		FROM information_schema.statistics WHERE table_schema = 'lockrun'
		ORDER BY table_name, index_name, seq_in_index;
		SELECT routine_name, routine_type, LENGTH(routine_definition)
		FROM information_schema.routines WHERE routine_schema = 'lockrun'
		ORDER BY routine_name;
		SELECT version, description, applied_at FROM lr_schema ORDER BY version" | md5sum
}

@test "lockrunctl init a second time changes nothing and says so" {
	ctl set adm1 2
	local before
	before=$(schema_fingerprint)
	run "$LOCKRUNCTL" -c "$LR_ADMIN_CONFIG" init
	assert_success
	assert_output --partial "up to date"
	assert_equal "$(schema_fingerprint)" "$before"
	# Data is untouched too.
	assert_equal "$(sql "SELECT name, capacity FROM lr_resources")" "$(printf 'adm1\t2')"
}

@test "init re-applies the stored routines when their text changed, and only then" {
	sql "UPDATE lr_routines SET digest = REPEAT('0', 64); DROP PROCEDURE lockrun_check"
	run --separate-stderr "$LOCKRUNCTL" -c "$LR_ADMIN_CONFIG" init
	assert_success
	assert_output --regexp "^schema version [0-9]+; stored routines updated$"
	assert_equal "$(sql "SELECT COUNT(*) FROM information_schema.routines
		WHERE routine_schema = 'lockrun' AND routine_name = 'lockrun_check'")" 1
	run "$LOCKRUNCTL" -c "$LR_ADMIN_CONFIG" init
	assert_output --partial "up to date"
}

# What a DBA applies by hand, sql/routines/*.sql in the order of their
# names, is what lockrunctl carries and init applies: the digest init
# records is that of the files concatenated in that order (sql/meson.build
# lists them; a file missing there, or out of order, shows here).
@test "init records the digest of sql/routines/*.sql concatenated in name order" {
	assert_equal "$(sql "SELECT digest FROM lr_routines WHERE name = 'procedures'")" \
		"$(cat "$LR_SRC"/sql/routines/*.sql | sha256sum | cut -c1-64)"
}

@test "lockrunctl: an unknown command, a bad option or a wrong arity is a usage error (64)" {
	run "$LOCKRUNCTL" -c "$LR_ADMIN_CONFIG" frobnicate
	assert_failure 64
	assert_output --partial "frobnicate"
	run "$LOCKRUNCTL" -c "$LR_ADMIN_CONFIG" --frob status
	assert_failure 64
	run "$LOCKRUNCTL" -c "$LR_ADMIN_CONFIG" set only-a-name
	assert_failure 64
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_resources")" 0
}

@test "lockrunctl set on a mutex or a read-write lock is refused (64) and changes nothing" {
	run "$LOCKRUN" -x adm-mx -- true
	assert_success
	run "$LOCKRUN" --read adm-rw -- true
	assert_success
	run "$LOCKRUNCTL" -c "$LR_ADMIN_CONFIG" set adm-mx 3
	assert_failure 64
	assert_output --partial "adm-mx"
	run "$LOCKRUNCTL" -c "$LR_ADMIN_CONFIG" set adm-rw 3
	assert_failure 64
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_capacity_audit")" 0
	assert_equal "$(sql "SELECT name, capacity FROM lr_resources WHERE kind = 'mutex'")" "$(printf 'adm-mx\t1')"
}

@test "an unsafe ttl in [lock] is a configuration error naming the file (78)" {
	local conf=$BATS_TEST_TMPDIR/unsafe.conf
	cp "$LOCKRUN_CONFIG" "$conf"
	printf '[lock]\nttl = 3\nkill_after = 5\n' >>"$conf"
	ctl set adm-ttl 1
	run "$LOCKRUN" -c "$conf" -s adm-ttl -- true
	assert_failure 78
	assert_output --partial "$conf"
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_grants")" 0
}

@test "lockrun: an unknown option is a usage error (64) before anything is written" {
	run "$LOCKRUN" --frobnicate -x adm-opt -- true
	assert_failure 64
	assert_output --partial "frobnicate"
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_resources")" 0
}

# asql DB SQL: SQL as the admin account in database DB.
asql() {
	lr_admin_sql "$LR_DB" "$2" "$1"
}

# A config for the admin account that points at database DB.
admin_conf_for() {
	sed "s/^database = .*/database = $1/" "$LR_ADMIN_CONFIG" >"$BATS_TEST_TMPDIR/$1.conf"
	echo "$BATS_TEST_TMPDIR/$1.conf"
}

@test "init upgrades a version 1 schema with live holds: 'used' counts them, the routines run as the locked definer" {
	lr_admin_sql "$LR_DB" "DROP DATABASE IF EXISTS lr_up; CREATE DATABASE lr_up"
	lr_admin_sql "$LR_DB" - lr_up <"$LR_SRC/sql/001-initial.sql"
	asql lr_up "INSERT INTO lr_resources (name, kind, capacity) VALUES ('up-s', 'semaphore', 5), ('up-m', 'mutex', 1);
		INSERT INTO lr_grants (request_id, host, pid, os_user, db_user, command, ttl_ms, acquired_at)
		VALUES (REPEAT('a', 32), 'h', 1, 'u', 'd', 'c', 60000, NOW(6)), (REPEAT('b', 32), 'h', 2, 'u', 'd', 'c', 60000, NOW(6));
		INSERT INTO lr_holds (resource, grant_id, permits, fence, expires_at) VALUES
		('up-s', 1, 2, 1, NOW(6) + INTERVAL 1 MINUTE), ('up-s', 2, 1, 2, NOW(6) + INTERVAL 1 MINUTE),
		('up-m', 2, 1, 1, NOW(6) + INTERVAL 1 MINUTE)"
	run "$LOCKRUNCTL" -c "$(admin_conf_for lr_up)" init
	assert_success
	assert_output --partial "from version 1 to "
	assert_equal "$(asql lr_up "SELECT name, used FROM lr_resources ORDER BY name")" "$(printf 'up-m\t1\nup-s\t3')"
	assert_equal "$(asql lr_up "SELECT DISTINCT definer, security_type FROM information_schema.routines
		WHERE routine_schema = 'lr_up'")" "$(printf 'lockrun_owner@localhost\tDEFINER')"
	# The definer can run them but nobody can log in as it.
	run lr_admin_sql "$LR_DB" "SHOW CREATE USER 'lockrun_owner'@'localhost'"
	assert_output --partial "ACCOUNT LOCK"
	run lr_admin_sql "$LR_DB" "SHOW GRANTS FOR 'lockrun_owner'@'localhost'"
	assert_output --partial 'ON `lr_up`.*'
	# No triggers (they need SUPER on a server with binary logging): the
	# routines keep 'used'. An operator's DELETE behind their back leaves
	# it too high, which the next busy acquire recounts, and which
	# `lockrunctl sweep` repairs.
	assert_equal "$(asql lr_up "SELECT COUNT(*) FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = 'lr_up'")" 0
	asql lr_up "DELETE FROM lr_holds WHERE grant_id = 1"
	assert_equal "$(asql lr_up "SELECT used FROM lr_resources WHERE name = 'up-s'")" 3
	"$LOCKRUNCTL" -q -c "$(admin_conf_for lr_up)" sweep
	assert_equal "$(asql lr_up "SELECT used FROM lr_resources WHERE name = 'up-s'")" 1
	lr_admin_sql "$LR_DB" "DROP DATABASE lr_up"
}

@test "the migrations applied by hand with the mariadb client give what lockrunctl init gives" {
	lr_admin_sql "$LR_DB" "DROP DATABASE IF EXISTS lr_hand; CREATE DATABASE lr_hand"
	local f
	if lr_server_is_mysql; then
		# MySQL knows no ADD COLUMN IF NOT EXISTS: by hand the files
		# fail there, as doc/production.md says; only init spells them.
		lr_admin_sql "$LR_DB" - lr_hand <"$LR_SRC/sql/001-initial.sql"
		run lr_admin_sql "$LR_DB" - lr_hand <"$LR_SRC/sql/002-procedures.sql"
		assert_failure
		assert_output --partial "ERROR 1064"
		assert_output --partial "IF NOT EXISTS used"
		return
	fi
	for f in "$LR_SRC"/sql/0*.sql "$LR_SRC"/sql/routines/*.sql; do
		lr_admin_sql "$LR_DB" - lr_hand <"$f"
	done
	routines() {
		# Bodies compared without comments and white space: the client
		# and lockrunctl strip comments differently.
		asql "$1" "SELECT routine_name, routine_type, security_type, definer,
			MD5(REGEXP_REPLACE(routine_definition, '--[^\\n]*|[[:space:]]+', ''))
			FROM information_schema.routines WHERE routine_schema = '$1' ORDER BY routine_name;
			SELECT trigger_name, MD5(action_statement) FROM information_schema.triggers
			WHERE trigger_schema = '$1' ORDER BY trigger_name;
			SELECT version FROM lr_schema ORDER BY version"
	}
	assert_equal "$(routines lr_hand)" "$(routines lockrun)"
	# Applying them again changes nothing (each statement is idempotent).
	local before
	before=$(routines lr_hand)
	for f in "$LR_SRC"/sql/0*.sql "$LR_SRC"/sql/routines/*.sql; do
		lr_admin_sql "$LR_DB" - lr_hand <"$f"
	done
	assert_equal "$(routines lr_hand)" "$before"
	# The client records no digest of the routines, so the first init
	# applies them once more (the same text); the next finds nothing to do.
	run "$LOCKRUNCTL" -c "$(admin_conf_for lr_hand)" init
	assert_success
	assert_output --regexp "^schema version [0-9]+; stored routines updated$"
	assert_equal "$(routines lr_hand)" "$before"
	run "$LOCKRUNCTL" -c "$(admin_conf_for lr_hand)" init
	assert_success
	assert_output --partial "up to date"
	lr_admin_sql "$LR_DB" "DROP DATABASE lr_hand"
}

@test "the operator's commands with lockrun's own account: one line naming the operator account, its GRANT and file" {
	local pw conf=$BATS_TEST_TMPDIR/operator.conf
	"$LOCKRUNCTL" -c "$LR_ADMIN_CONFIG" -q set op-slots 1
	# $LOCKRUN_CONFIG is lockrun's own account: it may only call the
	# procedures (status, list, history and check read through them:
	# 29-operator-views.bats).
	for cmd in "set op-slots 2" sweep timeline "release 1 --reason x" "pause op-slots" \
		"max-ttl 1m" "delete op-slots"; do
		# shellcheck disable=SC2086
		run -69 "$LOCKRUNCTL" $cmd
		assert_equal "${#lines[@]}" 1
		assert_output --partial "command denied to user 'lockrun'"
		assert_output --partial "; '${cmd%% *}' needs the operator account, not user 'lockrun' of $LOCKRUN_CONFIG: an administrator runs GRANT SELECT, INSERT, UPDATE, DELETE ON \`lockrun\`.* TO an account (sql/operator.sql) and puts it in /etc/lockrun/operator.conf (mode 0600, root), which lockrunctl reads first"
	done
	run -69 "$LOCKRUNCTL" init
	assert_output --partial "; 'init' needs an administrator (sql/grant.sql), not user 'lockrun' of $LOCKRUN_CONFIG"
	# What the hint says is enough: the file it names, applied as it is.
	pw=$(openssl rand -hex 12)
	lr_admin_sql "$LR_DB" "CREATE USER 'lockrun_admin'@'%' IDENTIFIED BY '$pw'"
	lr_admin_sql "$LR_DB" - lockrun <"$LR_SRC/sql/operator.sql"
	printf '[database]\nhost = 127.0.0.1\nport = %s\nuser = lockrun_admin\npassword = %s\n' \
		"$LR_PORT" "$pw" >"$conf"
	lr_server_key_conf "$LR_DB" >>"$conf"
	chmod 600 "$conf"
	run "$LOCKRUNCTL" -c "$conf" set op-slots 2
	lr_admin_sql "$LR_DB" "DROP USER 'lockrun_admin'@'%'"
	assert_success
	assert_output "op-slots: capacity 2 (was 1)"
}
