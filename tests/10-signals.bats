#!/usr/bin/env bats
#
# Every signal the README says is forwarded reaches the command, and every
# signal it says stops a wait does so and leaves nothing behind.
# (SIGTERM, SIGHUP and SIGUSR1 forwarding are in 03-semaphore.bats.)
#
# A background job of a non-interactive shell starts with SIGINT and
# SIGQUIT ignored; lockrun installs its own handlers and resets the
# command's to the default, so these tests see what a terminal would.

load helpers/common

bats_require_minimum_version 1.5.0

setup() {
	reset_db
	out=$BATS_TEST_TMPDIR/out
}

# forwarded SIG: the command traps SIG, records it and exits 5.
forwarded() {
	local sig=$1
	"$LOCKRUN" -x "fwd-$sig" -- sh -c "trap 'echo $sig >>$out; exit 5' $sig; echo up >$out.up; while :; do sleep 0.05; done" 3>&- &
	local pid=$!
	lr_wait_for test -s "$out.up"
	kill "-$sig" "$pid"
	if ! lr_wait_for -t 5 test -s "$out"; then
		kill -KILL "$pid"
		fail "SIG$sig did not reach the command"
	fi
	local rc=0
	wait "$pid" || rc=$?
	assert_equal "$rc" 5
	assert_equal "$(cat "$out")" "$sig"
	assert_equal "$(holds "fwd-$sig")" 0
	assert_equal "$(sql "SELECT end_reason, exit_status FROM lr_grants")" "$(printf 'exited\t5')"
}

@test "SIGINT is forwarded to the command" {
	forwarded INT
}

@test "SIGQUIT is forwarded to the command" {
	forwarded QUIT
}

@test "SIGUSR2 is forwarded to the command" {
	forwarded USR2
}

gone() { ! kill -0 "$1" 2>/dev/null; }

# stops_wait SIG NUMBER: a waiter told SIG exits 128+NUMBER, holds nothing
# and leaves no place in the queue.
stops_wait() {
	local sig=$1 num=$2
	"$LOCKRUN" -x "stop-$sig" -- sleep 30 3>&- &
	local holder=$!
	lr_wait_eq 1 holds "stop-$sig"
	"$LOCKRUN" -x "stop-$sig" -- touch "$out" 3>&- &
	local waiter=$!
	lr_wait_eq 1 waiters "stop-$sig"
	kill "-$sig" "$waiter"
	if ! lr_wait_for -t 5 gone "$waiter"; then
		kill -KILL "$waiter" "$holder"
		fail "SIG$sig did not stop the wait"
	fi
	local rc=0
	wait "$waiter" || rc=$?
	assert_equal "$rc" $((128 + num))
	assert_equal "$(waiters)" 0
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_grants")" 1
	[[ ! -e $out ]] || fail "the waiter's command ran"
	kill "$holder"
	wait "$holder" || true
	assert_equal "$(holds)" 0
}

@test "SIGINT while waiting: stops waiting, exits 130, holds nothing" {
	stops_wait INT 2
}

@test "SIGHUP while waiting: stops waiting, exits 129, holds nothing" {
	stops_wait HUP 1
}

@test "SIGQUIT while waiting: stops waiting, exits 131, holds nothing" {
	stops_wait QUIT 3
}
