#!/usr/bin/env bats
#
# The database side of the protocol under contention and faults: releases
# that meet locked rows, acquire CALLs still in flight when they are settled, the
# server's clock stepping forward, dead waiters, and hostile table contents.

load helpers/common
load helpers/records
load helpers/proxy

bats_require_minimum_version 1.5.0

setup() {
	setup_records
}

teardown() {
	[[ -z ${proxy_pid:-} ]] || kill "$proxy_pid" 2>/dev/null || true
	[[ -z ${old_lwt:-} ]] || sql "SET GLOBAL innodb_lock_wait_timeout = $old_lwt"
	local p
	for p in ${bg_pids:-}; do
		kill -9 "$p" 2>/dev/null || true
	done
}

# lock_rows SECONDS TABLE WHERE: another session locks the rows FOR UPDATE
# and keeps them for SECONDS; returns once it holds them. Sets locker.
lock_rows() {
	local secs=$1 table=$2 where=$3
	sql "START TRANSACTION; SELECT * FROM $table WHERE $where FOR UPDATE;
		DO SLEEP($secs); COMMIT" >/dev/null 3>&- &
	locker=$!
	lr_wait_eq 1 sql "SELECT COUNT(*) FROM information_schema.PROCESSLIST
		WHERE INFO LIKE 'DO SLEEP($secs)%'"
}

ms_since() {
	echo $(((${EPOCHREALTIME/[.,]/} - ${1/[.,]/}) / 1000))
}

@test "a release that meets locked hold rows is retried: the holds go when they are free, not at the ttl" {
	"$LOCKRUN" --ttl 60 -x rel -- sh -c "while [ ! -e $BATS_TEST_TMPDIR/go ]; do sleep 0.05; done" 3>&- &
	local a=$!
	lr_wait_eq 1 holds rel
	# Longer than lockrun's lock wait (2 s): its first DELETE gets 1205.
	lock_rows 4 lr_holds "resource = 'rel'"
	local t0=$EPOCHREALTIME
	touch "$BATS_TEST_TMPDIR/go"
	local rc=0
	wait "$a" || rc=$?
	assert_equal "$rc" 0
	wait "$locker"
	# lockrun retried until the rows were free (after ~4 s), well within
	# the 60 s ttl, and closed the log entry as the command ended.
	assert_equal "$(holds)" 0
	assert_equal "$(sql "SELECT end_reason FROM lr_grants")" exited
	local ms
	ms=$(ms_since "$t0")
	((ms < 30000)) || fail "released after $ms ms"
}

@test "a database that keeps failing until the wait runs out: exit 69 soon after it, saying so" {
	ctl set lwt 1
	# Every acquire meets the locked resource row: a 2 s lock wait, then
	# 1205, again and again. A dozen such tries would take 25 s or more.
	lock_rows 12 lr_resources "name = 'lwt'"
	local t0=$EPOCHREALTIME ms
	run "$LOCKRUN" -w 3 -s lwt -- echo child-ran
	ms=$(ms_since "$t0")
	assert_equal "$status" 69
	refute_output --partial child-ran
	assert_output --regexp "^lockrun: not acquired: the database was still failing when the wait ran out: .*\(1205\)$"
	# The wait (3 s), the grace (2 s) and the try under way (2 s).
	((ms < 9000)) || fail "gave up after $ms ms"
	wait "$locker"
	assert_equal "$(holds)" 0
	assert_equal "$(waiters)" 0
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_grants")" 0
}

@test "lockrunctl set retries a lock wait timeout on the resource row" {
	ctl set capset 2
	old_lwt=$(sql "SELECT @@GLOBAL.innodb_lock_wait_timeout")
	sql "SET GLOBAL innodb_lock_wait_timeout = 1"
	lock_rows 3 lr_resources "name = 'capset'"
	run ctl set capset 3
	assert_success
	wait "$locker"
	assert_equal "$(sql "SELECT capacity FROM lr_resources WHERE name = 'capset'")" 3
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_capacity_audit WHERE resource = 'capset'")" 2
}

@test "an acquire CALL still in flight when the connection is lost: settled before it lands, one grant" {
	ctl set hq 2
	proxy
	# The client loses its connection as it sends the CALL; the server gets
	# it 3 s later (longer than a lock wait), after lockrun settled: not
	# granted, so lockrun acquires again under a new lease id, and the late
	# CALL must not grant a second time (the settlement left a tombstone).
	pctl hold-query CALL lockrun_acquire 3000
	run "$LOCKRUN" -v -c "$pconf" -s hq:1 -- sh -c 'echo "ran with token $LOCKRUN_FENCE"'
	assert_success
	assert_line "ran with token 1"
	lr_wait_for grep -qx "fired hold-query CALL lockrun_acquire" "$fifo.log"
	# One grant; the other lr_grants row is the settled lease's tombstone.
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_grants WHERE acquired_at IS NOT NULL AND ttl_ms > 0")" 1
	assert_equal "$(sql "SELECT end_reason FROM lr_grants WHERE ttl_ms > 0")" exited
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_grants WHERE end_reason = 'aborted' AND ttl_ms = 0")" 1
	assert_equal "$(sql "SELECT fence FROM lr_resources WHERE name = 'hq'")" 1
	assert_equal "$(holds)" 0
	assert_equal "$(waiters)" 0
}

@test "an acquire CALL that lands after its settlement, while its own new grant holds the lock, queues nothing" {
	proxy
	pctl hold-query CALL lockrun_acquire 3000
	# Settled as not granted, then granted under a new lease id; the held
	# CALL, with the old lease, lands while that grant still holds hql.
	"$LOCKRUN" -c "$pconf" -x hql -- sh -c "echo ran >>$rec;
		while [ ! -e $BATS_TEST_TMPDIR/go ]; do sleep 0.05; done" 3>&- &
	local a=$!
	bg_pids="$a"
	lr_wait_for grep -qx "fired hold-query CALL lockrun_acquire" "$fifo.log"
	lr_wait_for grep -qx ran "$rec"
	# Give the late CALL time to run: it must not take a place in the
	# queue (nobody would ever renew or leave it: the queue would stand
	# still for 15 s after the holder is gone).
	local n
	for n in $(seq 10); do
		assert_equal "$(waiters)" 0
		sleep 0.2
	done
	assert_equal "$(holds hql)" 1
	touch "$BATS_TEST_TMPDIR/go"
	wait "$a"
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_grants WHERE ttl_ms > 0")" 1
	run "$LOCKRUN" -n -x hql -- echo free
	assert_success
	assert_output free
}

@test "an enqueuing acquire CALL still in flight when the connection is lost: the places are not doubled" {
	"$LOCKRUN" -x hqq -- sh -c "while [ ! -e $BATS_TEST_TMPDIR/go ]; do sleep 0.05; done" 3>&- &
	local holder=$!
	bg_pids="$holder"
	lr_wait_eq 1 holds hqq
	proxy
	pctl hold-query CALL lockrun_acquire 3000
	"$LOCKRUN" -c "$pconf" -x hqq -- sh -c "echo ran >>$rec" 3>&- &
	local w=$!
	bg_pids+=" $w"
	lr_wait_for grep -qx "fired hold-query CALL lockrun_acquire" "$fifo.log"
	# The held CALL has landed: watch the queue for a while.
	local n
	for n in $(seq 15); do
		(($(sql "SELECT COUNT(*) FROM lr_waiters") <= 1)) || fail "waiter rows doubled"
		sleep 0.2
	done
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_waiters")" 1
	touch "$BATS_TEST_TMPDIR/go"
	wait "$holder" "$w"
	assert_equal "$(cat "$rec")" ran
	assert_equal "$(waiters)" 0
}

@test "a run stopped while its enqueuing acquire waits on the resource row leaves no place behind" {
	"$LOCKRUN" -x sq -- sh -c "while [ ! -e $BATS_TEST_TMPDIR/go ]; do sleep 0.05; done" 3>&- &
	local holder=$!
	bg_pids="$holder"
	lr_wait_eq 1 holds sq
	# The acquire that would queue waits on the row; SIGTERM cuts its
	# connection. On the server it still runs and queues once the row is
	# free; the settlement after it finds the place, which must then be
	# left (else it stands at the head of the queue for 15 s).
	lock_rows 2 lr_resources "name = 'sq'"
	"$LOCKRUN" -w 60 -x sq -- touch "$BATS_TEST_TMPDIR/ran" 3>&- &
	local w=$! rc=0
	sleep 0.7
	kill -TERM "$w"
	wait "$w" || rc=$?
	assert_equal "$rc" 143
	wait "$locker"
	local n
	for n in $(seq 10); do
		assert_equal "$(waiters sq)" 0
		sleep 0.2
	done
	[[ ! -e $BATS_TEST_TMPDIR/ran ]] || fail "ran without the lock"
	touch "$BATS_TEST_TMPDIR/go"
	wait "$holder"
}

@test "the server's clock stepping forward within the grace ends no lease; beyond it, the lock is free" {
	local log=$BATS_TEST_TMPDIR/log
	"$LOCKRUN" -v --ttl 9 --kill-after 1 -x step -- sh -c "echo enter >>$rec; sleep 60" 3>&- 2>"$log" &
	local a=$!
	bg_pids="$a"
	lr_wait_eq 1 holds step
	lr_wait_for grep -q enter "$rec"
	# What a forward step of (time left + 1 s) looks like to the server.
	sql "UPDATE lr_holds SET expires_at = NOW(6) - INTERVAL 1 SECOND WHERE resource = 'step'"
	run "$LOCKRUN" -n -x step -- echo stolen
	assert_failure 75
	refute_output --partial stolen
	# A's next renewal (every 3 s) still finds its lease.
	lr_wait_eq -t 8 1 sql "SELECT expires_at > NOW(6) FROM lr_holds WHERE resource = 'step'"
	kill -0 "$a"
	run cat "$log"
	refute_output --partial "lost"
	# A step beyond the grace: the lease is over for the server.
	sql "UPDATE lr_holds SET expires_at = NOW(6) - INTERVAL 6 SECOND WHERE resource = 'step'"
	run "$LOCKRUN" -n -x step -- echo taken
	assert_success
	assert_output taken
	kill "$a" 2>/dev/null || true
	wait "$a" || true
}

@test "a waiter stopped while another session locks its queue place still leaves the queue, once the lock is gone" {
	"$LOCKRUN" -x dql -- sleep 60 3>&- &
	local holder=$!
	bg_pids="$holder"
	lr_wait_eq 1 holds dql
	"$LOCKRUN" -x dql -- true 3>&- 2>"$BATS_TEST_TMPDIR/w.err" &
	local w=$!
	bg_pids+=" $w"
	lr_wait_eq 1 waiters dql
	# Longer than lockrun's lock wait (2 s): its first lockrun_dequeue
	# gets 1205 and must try again, not leave its place standing at the
	# head of the queue until it expires.
	lock_rows 3 lr_waiters "resource = 'dql'"
	kill -TERM "$w"
	local rc=0
	wait "$w" || rc=$?
	assert_equal "$rc" 143
	assert_equal "$(waiters dql)" 0
	wait "$locker"
	run cat "$BATS_TEST_TMPDIR/w.err"
	refute_output --partial "Lock wait timeout"
}

@test "a waiter that died holds back the queue for its short place lifetime, not its ttl" {
	"$LOCKRUN" -x wdie -- sleep 2 3>&- &
	local holder=$!
	bg_pids="$holder"
	lr_wait_eq 1 holds wdie
	max_ttl_at_once 1d
	"$LOCKRUN" --ttl 86400 -x wdie -- true 3>&- 2>/dev/null &
	local w=$!
	bg_pids+=" $w"
	lr_wait_eq 1 waiters wdie
	kill -9 "$w"
	local t0=$EPOCHREALTIME
	run "$LOCKRUN" -w 45 -x wdie -- echo ran
	assert_success
	assert_output ran
	# Place lifetime 10 s + grace 5 s, plus slack for a loaded machine.
	local ms
	ms=$(ms_since "$t0")
	((ms < 30000)) || fail "waited $ms ms behind a dead waiter"
	wait "$holder"
}

@test "a hostile request id in the queue is not pasted into SQL, and the queue still moves" {
	"$LOCKRUN" -x inj -- sleep 2 3>&- &
	local holder=$!
	bg_pids="$holder"
	lr_wait_eq 1 holds inj
	# Were it pasted into GET_LOCK('lockrun.wait.<id>', ...), this id would
	# make the waiter's session take the named lock 'pwn'.
	local id="x'',0),GET_LOCK(''pwn'',0),LEFT(''"
	sql "UPDATE lr_resources SET ticket = 100 WHERE name = 'inj';
		INSERT INTO lr_waiters (resource, ticket, request_id, permits, host, pid, os_user,
		command, since, expires_at) VALUES ('inj', 50, '$id', 1, 'evil', 1, 'evil', 'evil',
		NOW(6), NOW(6) + INTERVAL 3 SECOND)"
	assert_equal "$(sql "SELECT LENGTH(request_id) <= 32 FROM lr_waiters")" 1
	local t0=$EPOCHREALTIME
	"$LOCKRUN" -w 40 -x inj -- sh -c "echo enter >>$rec; sleep 2" 3>&- &
	local c=$!
	bg_pids+=" $c"
	until grep -q enter "$rec"; do
		assert_equal "$(sql "SELECT IS_USED_LOCK('pwn') IS NULL")" 1
		kill -0 "$c" || break
		sleep 0.2
	done
	# The waiter's session is still open while its command runs.
	assert_equal "$(sql "SELECT IS_USED_LOCK('pwn') IS NULL")" 1
	wait "$c"
	local ms
	ms=$(ms_since "$t0")
	((ms < 25000)) || fail "got the lock after $ms ms"
	assert_equal "$(cat "$rec")" enter
	wait "$holder"
}
