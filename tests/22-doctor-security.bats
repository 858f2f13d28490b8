#!/usr/bin/env bats
#
# The administrator's side of the SQL API's boundary: `lockrunctl doctor`
# names the accounts that hold more than EXECUTE on the lockrun database
# (they could shadow its tables with temporary tables of their own), and
# reports `used` counts that disagree with the hold rows, which
# `lockrunctl sweep` repairs. Judged from outside: exit codes, what the
# commands print, and the rows they leave.

load helpers/common

bats_require_minimum_version 1.5.0

setup() {
	reset_db
	pids=()
}

teardown() {
	kill_pids
	sql "DROP USER IF EXISTS 'ds_peek'@'%', 'ds_tmp'@'%', 'ds_tab'@'%', 'ds_old'@'%';
		DROP ROLE IF EXISTS ds_role" || true
}

# c ARGS...: lockrunctl as the administrator (not quiet).
c() {
	"$LOCKRUNCTL" -c "$LR_ADMIN_CONFIG" "$@"
}

# hold_gate NAME OPTION: a background lockrun holding NAME (-x or -s)
# until $gate exists; its pid goes to pids.
hold_gate() {
	"$LOCKRUN" "$2" "$1" -- sh -c "while [ ! -e '$gate' ]; do sleep 0.05; done" 3>&- &
	pids+=($!)
}

# drift: resources whose used count disagrees with their hold rows.
drift() {
	sql "SELECT COUNT(*) FROM lr_resources r WHERE r.used <>
		(SELECT COALESCE(SUM(h.permits), 0) FROM lr_holds h WHERE h.resource = r.name)"
}

@test "doctor names the accounts with more than EXECUTE, as notes; not the API account nor the definer" {
	sql "CREATE USER 'ds_peek'@'%' IDENTIFIED BY 'x'; GRANT SELECT ON lockrun.* TO 'ds_peek'@'%';
		CREATE USER 'ds_tmp'@'%' IDENTIFIED BY 'x';
		GRANT CREATE TEMPORARY TABLES ON lockrun.* TO 'ds_tmp'@'%';
		CREATE USER 'ds_tab'@'%' IDENTIFIED BY 'x';
		GRANT SELECT, UPDATE ON lockrun.lr_holds TO 'ds_tab'@'%';
		GRANT SELECT (name) ON lockrun.lr_resources TO 'ds_tab'@'%';
		CREATE USER 'ds_old'@'%' IDENTIFIED BY 'x'; GRANT EXECUTE ON lockrun.* TO 'ds_old'@'%';
		CREATE ROLE ds_role; GRANT INSERT ON lockrun.* TO ds_role"
	run c doctor
	# Notes only: administrators are expected among them.
	assert_success
	assert_line --regexp "^info +accounts +'ds_peek'@'%': SELECT on lockrun\.\*$"
	assert_line --regexp "^info +accounts +'ds_tmp'@'%': CREATE TEMPORARY TABLES on lockrun\.\*$"
	assert_line --regexp "^info +accounts +'root'@'localhost': ALL on \*\.\*$"
	refute_output --partial "'lockrun'@'%'"
	refute_line --regexp "^info +accounts +'lockrun_owner'"
	run c --json doctor
	assert_success
	local json=$output
	run findings accounts "$json"
	assert_line --regexp "^info\|[0-9]+ accounts besides 'lockrun_owner'@'localhost' hold more than EXECUTE on this database: expected of administrators; .* create a temporary table named like one of them in its own session, which lockrun's routines called from that session then read and write instead$"
	assert_line "info|'ds_tab'@'%': SELECT on lockrun.lr_holds, UPDATE on lockrun.lr_holds, SELECT on lockrun.lr_resources (some columns)"
	# MySQL's roles are accounts ('ds_role'@'%'), which doctor cannot tell
	# from a locked user.
	if lr_server_is_mysql; then
		assert_line "info|'ds_role'@'%': INSERT on lockrun.*"
	else
		assert_line "info|'ds_role'@'': INSERT on lockrun.* (a role: so does every account granted it)"
	fi
	# The grant of API 2, EXECUTE on the whole database, reaches the
	# internal routines: named too, with the way out.
	assert_line "info|'ds_old'@'%': EXECUTE on lockrun.*, the grant before API 3, which reaches the internal routines too: give it the role lockrun_api instead (sql/grant.sql)"
	refute_output --partial "lockrun_owner'@'localhost':"
	refute_output --partial "'lockrun'@'%'"
	# Gone once revoked.
	sql "REVOKE SELECT ON lockrun.* FROM 'ds_peek'@'%'"
	run c doctor
	assert_success
	refute_output --partial "'ds_peek'@'%'"
	assert_line --regexp "^info +accounts +'ds_tmp'@'%'"
}

@test "doctor as the API account says it cannot see others' grants nor the tables, and passes" {
	sql "CREATE USER 'ds_peek'@'%' IDENTIFIED BY 'x'; GRANT SELECT ON lockrun.* TO 'ds_peek'@'%'"
	run "$LOCKRUNCTL" -c "$LOCKRUN_CONFIG" doctor
	assert_success
	assert_line --regexp "^info +accounts +this account sees only its own grants \(seeing every"
	assert_line --regexp "^info +used +this account may not read lockrun's tables; run doctor as an"
	assert_line --regexp "^ok +privileges +lockrun \(EXECUTE\): yes"
	refute_output --partial "ds_peek"
	assert_line --regexp '^no problems, [0-9]+ warnings?$'
}

@test "a used count too high: doctor warns naming it, sweep repairs it, lockrun then takes the mutex" {
	run "$LOCKRUN" -x ds-x -- true
	assert_success
	run c doctor
	assert_success
	assert_line --regexp "^ok +used +every resource's used count matches its hold rows$"
	# An administrator's edit: the mutex now looks held five times over.
	# (Since API 3 an acquire of a mutex recounts its holds itself, so the
	# count is left alone here until sweep runs.)
	sql "UPDATE lr_resources SET used = 5 WHERE name = 'ds-x'"
	run c --json doctor
	assert_success
	run findings used "$output"
	assert_output "warning|1 resource's used count disagrees with its hold rows (1 too high: looks busier than it is); 'lockrunctl sweep' repairs it: ds-x (used 5, holds 0)"
	run c doctor
	assert_success
	assert_line --regexp '^no problems, [1-9][0-9]* warnings?$'
	run --separate-stderr c sweep
	assert_success
	assert_equal "$stderr" "lockrunctl: warning: repaired the used count of 1 resource, which disagreed with the hold rows: ds-x (5, now 0)"
	assert_line --index 0 --partial "ended 0 expired grants"
	assert_equal "$(sql "SELECT used FROM lr_resources WHERE name = 'ds-x'")" 0
	assert_equal "$(drift)" 0
	run c doctor
	assert_success
	assert_line --regexp "^ok +used +every resource's used count matches its hold rows$"
	run "$LOCKRUN" -n -x ds-x -- true
	assert_success
	# Nothing left to repair: a second sweep says nothing about it.
	run --separate-stderr c sweep
	assert_success
	assert_equal "$stderr" ""
}

@test "used counts too low under live holders: doctor fails (1), sweep repairs them, the resources are busy again" {
	gate=$BATS_TEST_TMPDIR/gate
	ctl set ds-s 2
	hold_gate ds-m -x
	hold_gate ds-s -s
	hold_gate ds-s -s
	lr_wait_eq 1 holds ds-m
	lr_wait_eq 2 holds ds-s
	sql "UPDATE lr_resources SET used = 0 WHERE name IN ('ds-m', 'ds-s')"
	run c doctor
	assert_failure 1
	assert_line --regexp "^FAIL +used +2 resources' used counts disagree with their hold rows"
	assert_line --regexp '^1 problem, [0-9]+ warnings?: lockrun would fail or be unsafe here$'
	run c --json doctor
	assert_failure 1
	run findings used "$output"
	assert_output "problem|2 resources' used counts disagree with their hold rows (2 too low: lockrun may grant more than the capacity); 'lockrunctl sweep' repairs them: ds-m (used 0, holds 1), ds-s (used 0, holds 2)"
	# Quiet (-q, as from cron): nothing printed, the repair done all the same.
	run --separate-stderr c -q sweep
	assert_success
	assert_output ""
	assert_equal "$stderr" ""
	assert_equal "$(sql "SELECT name, used FROM lr_resources ORDER BY name")" "$(printf 'ds-m\t1\nds-s\t2')"
	assert_equal "$(drift)" 0
	run c doctor
	assert_success
	# Full again: a third run of the semaphore is busy, as is the mutex.
	run "$LOCKRUN" -n -s ds-s -- true
	assert_failure 75
	run "$LOCKRUN" -n -x ds-m -- true
	assert_failure 75
	# The holders end normally, and the counts come down to zero.
	touch "$gate"
	local p
	for p in "${pids[@]}"; do
		wait "$p" || fail "a holder exited $?"
	done
	assert_equal "$(sql "SELECT name, used FROM lr_resources ORDER BY name")" "$(printf 'ds-m\t0\nds-s\t0')"
}

@test "sweep repairs more than a batch of 1000, naming the first ten; doctor names ten and counts all" {
	sql "INSERT INTO lr_resources (name, kind, capacity, used)
		SELECT CONCAT('ds-', LPAD(seq, 4, '0')), 'mutex', 1, 1 FROM $(seq_rows 1 1005) q"
	run c --json doctor
	assert_success
	run findings used "$output"
	assert_output "warning|1005 resources' used counts disagree with their hold rows (1005 too high: looks busier than it is); 'lockrunctl sweep' repairs them: $(printf 'ds-%04d (used 1, holds 0), ' {1..10})..."
	run --separate-stderr c --json sweep
	assert_success
	assert_equal "$stderr" "lockrunctl: warning: repaired the used count of 1005 resources, which disagreed with the hold rows: $(printf 'ds-%04d (1, now 0), ' {1..10})..."
	run python3 -c 'import json, sys; print(json.loads(sys.argv[1])["transactions"] >= 1005)' "$output"
	assert_output True
	assert_equal "$(drift)" 0
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_resources WHERE used = 0")" 1005
}

@test "sweep repairs beside live traffic: no error, every run succeeds, no count drifts" {
	ctl set ds-c 3
	local _
	for _ in 1 2 3 4; do
		(for _ in $(seq 15); do "$LOCKRUN" -s ds-c -- true || exit 1; done) 3>&- &
		pids+=($!)
	done
	# Drift made again and again while they run, and repaired each time.
	for _ in $(seq 10); do
		sql "UPDATE lr_resources SET used = used + 2 WHERE name = 'ds-c'"
		run c -q sweep
		assert_success
	done
	local p
	for p in "${pids[@]}"; do
		wait "$p" || fail "a run of ds-c failed"
	done
	run c -q sweep
	assert_success
	assert_equal "$(sql "SELECT used FROM lr_resources WHERE name = 'ds-c'")" 0
	assert_equal "$(drift)" 0
	assert_equal "$(holds ds-c)" 0
}
