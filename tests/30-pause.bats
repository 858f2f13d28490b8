#!/usr/bin/env bats
#
# lockrunctl pause and resume: a paused resource grants nothing new (hand-
# offs included) while its holders run on and its waiters wait; status,
# JSON and Prometheus show it; the audit table records who paused and
# resumed it, from where and why. Judged from the children's records, exit
# statuses, stderr and the rows. Resource names start with pz-.

load helpers/common
load helpers/records

bats_require_minimum_version 1.5.0

setup() {
	setup_records
	pids=()
}

teardown() {
	kill_pids
}

c() {
	"$LOCKRUNCTL" -c "$LR_ADMIN_CONFIG" "$@"
}

# entered WHO: WHO's command has started (its record says so).
entered() { (($(rec_count "$rec" enter "$1") >= 1)); }

# hold LOCKRUN-ARGS...: a holder H with those lock options, whose command
# runs until $gate exists; sets h to its pid once its command started.
hold() {
	gate=$BATS_TEST_TMPDIR/gate
	"$LOCKRUN" "$@" -- sh -c "$(rec_cmd "$rec" H); while [ ! -e '$gate' ]; do sleep 0.05; done" 3>&- &
	h=$!
	pids+=("$h")
	lr_wait_for entered H
}

@test "a paused mutex: its holder runs on, -n is refused (75) naming the pause, a waiter times out (75), nothing runs" {
	hold -x pz-m
	run c pause pz-m --reason "disk swap"
	assert_success
	assert_output "pz-m: paused"
	run c pause pz-m
	assert_output "pz-m: paused (it was already)"
	touch "$gate"
	wait "$h"
	# Free now, but paused: nobody gets it, with or without waiting.
	run -75 "$LOCKRUN" -n -x pz-m -- sh -c "$(rec_cmd "$rec" N)"
	assert_output --regexp "'pz-m' is paused since [0-9-]+ [0-9:]+ UTC: disk swap"
	run -75 "$LOCKRUN" -w 1.5 -x pz-m -- sh -c "$(rec_cmd "$rec" W)"
	assert_equal "$(($(rec_count "$rec" enter N) + $(rec_count "$rec" enter W)))" 0
	assert_equal "$(holds pz-m)" 0
	c -q resume pz-m
	run "$LOCKRUN" -n -x pz-m -- sh -c "$(rec_cmd "$rec" R)"
	assert_success
	assert_equal "$(rec_count "$rec" enter R)" 1
}

@test "a waiter queued behind a holder is not handed the lock while paused, and runs once resumed" {
	hold -x pz-h
	"$LOCKRUN" -w 60 -x pz-h -- sh -c "$(rec_cmd "$rec" W)" 3>&- &
	local w=$!
	pids+=("$w")
	lr_wait_eq 1 sql "SELECT COUNT(*) FROM lr_waiters WHERE resource = 'pz-h'"
	c -q pause pz-h
	touch "$gate"
	wait "$h"
	# The release handed nothing on; the waiter still waits.
	sleep 2
	assert_equal "$(holds pz-h)" 0
	assert_equal "$(rec_count "$rec" enter W)" 0
	kill -0 "$w"
	c -q resume pz-h
	wait "$w"
	assert_equal "$(rec_count "$rec" enter W)" 1
}

@test "a paused semaphore with room left grants nothing; its holders run on; resume serves the queue" {
	c -q set pz-s 3
	hold -s pz-s:1
	c -q pause pz-s --reason "draining for maintenance"
	run -75 "$LOCKRUN" -n -s pz-s:1 -- true
	assert_output --partial "'pz-s' is paused since"
	run c status pz-s
	assert_line --index 0 --regexp "^pz-s +semaphore 1/3 used, PAUSED since [0-9T:-]+Z by .*: draining for maintenance$"
	run c status pz-s --json
	assert_output --regexp '"paused":\{"since":"[0-9T:-]+Z","by":"[^"]+","reason":"draining for maintenance"\}'
	run c status pz-s --format=prometheus
	assert_line 'lockrun_resource_paused{resource="pz-s",kind="semaphore"} 1'
	assert_line --regexp '^lockrun_resource_oldest_hold_seconds\{resource="pz-s",kind="semaphore"\} [0-9.]+$'
	assert_line '# TYPE lockrun_resource_fence_total counter'
	touch "$gate"
	c -q resume pz-s
	run c status pz-s --format=prometheus
	assert_line 'lockrun_resource_paused{resource="pz-s",kind="semaphore"} 0'
	run "$LOCKRUN" -n -s pz-s:2 -- true
	assert_success
}

@test "pause and resume are audited with who, from where and why; unknown names are 1; capacity 0 points to pause (64)" {
	"$LOCKRUN" -x pz-a -- true
	c -q pause pz-a --reason "why not"
	c -q resume pz-a
	assert_equal "$(sql "SELECT GROUP_CONCAT(CONCAT_WS(' ', action, COALESCE(note, '-'), os_user,
		host <> '', db_user <> '') ORDER BY id SEPARATOR ', ') FROM lr_capacity_audit
		WHERE resource = 'pz-a'")" "pause why not $(id -un) 1 1, resume - $(id -un) 1 1"
	run -1 c pause pz-nosuch
	assert_output "lockrunctl: no resource 'pz-nosuch' (see 'lockrunctl list')"
	run -64 c set pz-zero 0
	assert_output "lockrunctl: capacity 0 would make every run of 'pz-zero' fail; to hold new runs back (they wait), use 'lockrunctl pause pz-zero'"
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_resources WHERE name = 'pz-zero'")" 0
}
