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
