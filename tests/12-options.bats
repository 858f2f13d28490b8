#!/usr/bin/env bats
#
# Smaller promises of lockrun(1) that no other suite checks: what happens to
# processes left in the command's group, signals that are not followed by
# SIGKILL, the --id-only environment, inherited LOCKRUN_* variables, -n
# behind a queue, case-sensitive names, --help.

load helpers/common

bats_require_minimum_version 1.5.0

setup() {
	reset_db
	out=$BATS_TEST_TMPDIR/out
}

alive() { kill -0 "$1" 2>/dev/null; }

@test "a lost lease: processes the command left in its group are killed too" {
	# The leftover ignores SIGTERM, so only the SIGKILL to the group ends it.
	"$LOCKRUN" --ttl 3 --kill-after 0.5 -x left -- sh -c \
		"sh -c 'trap \"\" TERM; exec sleep 300' & echo \$! >$out.pid; trap 'exit 0' TERM; while :; do sleep 0.05; done" 3>&- &
	local pid=$!
	lr_wait_for test -s "$out.pid"
	local leftover
	leftover=$(cat "$out.pid")
	alive "$leftover"
	sql "DELETE FROM lr_holds"
	local rc=0
	wait "$pid" || rc=$?
	assert_equal "$rc" 76
	lr_wait_for -t 5 eval "! alive $leftover"
	assert_equal "$(sql "SELECT end_reason FROM lr_grants")" lost
}

@test "a forwarded SIGTERM is not followed by SIGKILL, however long the command takes" {
	"$LOCKRUN" --kill-after 0.5 -x slowstop -- sh -c \
		"trap 'sleep 2; echo survived >$out; exit 0' TERM; echo up >$out.up; while :; do sleep 0.05; done" 3>&- &
	local pid=$!
	lr_wait_for test -s "$out.up"
	kill -TERM "$pid"
	local rc=0
	wait "$pid" || rc=$?
	assert_equal "$rc" 0
	assert_equal "$(cat "$out")" survived
}

@test "--id alone: LOCKRUN_FENCE is the key's token and LOCKRUN_FENCES names it id:KEY" {
	run "$LOCKRUN" --id solo -- sh -c 'echo "$LOCKRUN_FENCE|$LOCKRUN_FENCES"'
	assert_success
	assert_output "1|id:solo=1"
	run "$LOCKRUN" --id solo -- sh -c 'echo "$LOCKRUN_FENCE|$LOCKRUN_FENCES"'
	assert_output "2|id:solo=2"
}

@test "LOCKRUN_* variables inherited from an outer lockrun are not passed on" {
	LOCKRUN_FENCE=99 LOCKRUN_FENCES=x=99 LOCKRUN_LEASE=7 LOCKRUN_GRANT=7 run "$LOCKRUN" --named inner -- env
	assert_success
	refute_line --regexp '^LOCKRUN_FENCE='
	refute_line --regexp '^LOCKRUN_LEASE='
	refute_line --regexp '^LOCKRUN_GRANT='
	# Named locks have no token: the list lockrun sets is empty.
	assert_line 'LOCKRUN_FENCES='
}

@test "-n fails while an earlier request is queued, even when its own count would fit" {
	ctl set qfit 2
	"$LOCKRUN" -s qfit:1 -- sleep 30 3>&- &
	local holder=$!
	lr_wait_eq 1 holds qfit
	"$LOCKRUN" -s qfit:2 -- true 3>&- &
	local big=$!
	lr_wait_eq 1 waiters qfit
	run "$LOCKRUN" -n -s qfit:1 -- touch "$out"
	assert_failure 75
	[[ ! -e $out ]] || fail "the later request overtook the queue"
	kill "$holder" "$big"
	wait "$holder" "$big" || true
}

@test "names are case-sensitive: Foo and foo are different locks" {
	"$LOCKRUN" -x CaseLock -- sleep 30 3>&- &
	local holder=$!
	lr_wait_eq 1 holds CaseLock
	run "$LOCKRUN" -n -x caselock -- true
	assert_success
	run "$LOCKRUN" -n -x CaseLock -- true
	assert_failure 75
	kill "$holder"
	wait "$holder" || true
}

@test "--help and --version print and exit 0 without touching the database" {
	run "$LOCKRUN" --help
	assert_success
	assert_output --partial "Usage: lockrun"
	run "$LOCKRUN" -c /nonexistent --version
	assert_success
	run "$LOCKRUNCTL" --help
	assert_success
	assert_output --partial "Usage: lockrunctl"
}

@test "on a terminal, the command's process group is the foreground group" {
	command -v script >/dev/null || skip "script(1) is not installed"
	# script(1) gives lockrun a pseudo-terminal; the command runs in its
	# own process group, which must own that terminal to read from it.
	run script -qec "$LOCKRUN -x ttyfg -- sh -c 'ps -o pgid=,tpgid= -p \$\$'" /dev/null
	assert_success
	local pgid tpgid
	read -r pgid tpgid <<<"${output//$'\r'/}"
	[[ -n $pgid && $pgid == "$tpgid" ]] || fail "process group $pgid, terminal's $tpgid"
}
