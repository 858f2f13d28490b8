#!/usr/bin/env bats
#
# The SQL API (the lockrun_* procedures of sql/routines/) on the
# 3-node Galera cluster, driven with the mariadb client as the
# EXECUTE-only runtime account, one node per step. The procedures, their
# definer and the triggers that keep lr_resources.used were installed by
# one `lockrunctl init` through node 1 (tests/run-galera); here every node
# must run them, see the others' grants (each CALL is a causal read), and
# agree on `used`.

bats_require_minimum_version 1.5.0

load suite

# api N "CALL ...": as the runtime account ('lockrun', EXECUTE only) over
# TCP to node N; tab-separated rows without a header.
api() {
	_lr_galera_env "$LR_GALERA"
	timeout 20 mariadb --no-defaults -h "$(lr_galera_addr "$1")" -P "$GALERA_SQL_PORT" \
		-u lockrun -p"$(<"$LR_GALERA/lockrun.pw")" -N -B lockrun -e "$2"
}

hex() { printf "%032x" "$1"; }

setup() {
	lr_galera_wait_cluster "$LR_GALERA" 3 60 1 2 3
	gsql 1 "DELETE FROM lr_holds; DELETE FROM lr_waiters; DELETE FROM lr_grants;
		DELETE FROM lr_resources; DELETE FROM lr_capacity_audit;"
}

@test "every node runs the procedures: a grant on one node excludes the others, and any node releases it" {
	run api 1 "CALL lockrun_acquire('mutex:gapi', '$(hex 1)', '$(hex 101)', 30000, 0, 'n1', 1, 'u', 'sql')"
	assert_success
	assert_output --regexp "^granted	[0-9]+	gapi	ok	1	"
	# Last column: api 3; the one before: this is a Galera node.
	assert_output --regexp "	1	3$"
	local n
	for n in 2 3; do
		run api "$n" "CALL lockrun_acquire('mutex:gapi', '$(hex $n)', '$(hex $((100 + n)))', 30000, 0, 'n$n', $n, 'u', 'sql')"
		assert_success
		assert_output --regexp "^busy	"
	done
	run api 3 "CALL lockrun_release('$(hex 101)', 'exited', 0, NULL)"
	assert_success
	assert_output --regexp "^1	"
	run api 2 "CALL lockrun_acquire('mutex:gapi', '$(hex 2)', '$(hex 202)', 30000, 0, 'n2', 2, 'u', 'sql')"
	assert_success
	# The second grant's token is above the first's, whichever node gave it.
	assert_output --regexp "^granted	[0-9]+	gapi	ok	2	"
	for n in 1 2 3; do
		assert_equal "$(gsql "$n" "SELECT used, fence FROM lr_resources WHERE name = 'gapi'")" "$(printf '1\t2')"
	done
}

@test "a semaphore's live use is the same on every node after grants, releases and renewals on all of them" {
	"$LOCKRUNCTL" -c "$LR_GALERA/admin.conf" -q set gsem 3
	local n
	for n in 1 2 3; do
		run api "$n" "CALL lockrun_acquire('semaphore:gsem:1', '$(hex $n)', '$(hex $((300 + n)))', 30000, 0, NULL, NULL, NULL, NULL)"
		assert_success
		assert_output --regexp "^granted	"
	done
	run api 1 "CALL lockrun_acquire('semaphore:gsem:1', '$(hex 4)', '$(hex 304)', 30000, 0, NULL, NULL, NULL, NULL)"
	assert_output --regexp "^busy	.*'gsem' is busy \(3/3 used\)"
	for n in 1 2 3; do
		assert_equal "$(gsql "$n" "SELECT used FROM lr_resources WHERE name = 'gsem'")" 3
	done
	# Renew each grant on another node than the one that granted it.
	run api 2 "CALL lockrun_renew('$(hex 301)', 30000)"
	assert_output --regexp "^[0-9]+	1	1	"
	run api 3 "CALL lockrun_release('$(hex 302)', 'exited', 0, NULL)"
	assert_output --regexp "^1	"
	run api 1 "CALL lockrun_release('$(hex 303)', 'exited', 0, NULL)"
	assert_output --regexp "^1	"
	for n in 1 2 3; do
		assert_equal "$(gsql "$n" "SELECT used FROM lr_resources WHERE name = 'gsem'")" 1
		assert_equal "$(gsql "$n" "SELECT COALESCE(SUM(permits), 0) FROM lr_holds WHERE resource = 'gsem'")" 1
	done
}
