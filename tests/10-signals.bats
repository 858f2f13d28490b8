#!/usr/bin/env bats
#
# Every signal the README says is forwarded reaches the command, and every
# signal it says stops a wait does so and leaves nothing behind.
# (SIGTERM, SIGHUP and SIGUSR1 forwarding are in 03-semaphore.bats.)
#
# A background job of a non-interactive shell starts with SIGINT and
# SIGQUIT ignored, and lockrun keeps a signal ignored at its start ignored
# (the last tests); so the tests of forwarding start lockrun with every
# signal at its default (env --default-signal), as a terminal's
# foreground job is.

load helpers/common

bats_require_minimum_version 1.5.0

setup() {
	reset_db
	out=$BATS_TEST_TMPDIR/out
}

# forwarded SIG: the command traps SIG, records it and exits 5.
forwarded() {
	local sig=$1
	env --default-signal "$LOCKRUN" -x "fwd-$sig" -- sh -c "trap 'echo $sig >>$out; exit 5' $sig; echo up >$out.up; while :; do sleep 0.05; done" 3>&- &
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
	env --default-signal "$LOCKRUN" -x "stop-$sig" -- touch "$out" 3>&- &
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

# ignored_mask: the SigIgn line of /proc/self/status of a command that
# lockrun runs directly, started with the arguments as env options.
ignored_mask() {
	env "$@" "$LOCKRUN" -x sigign -- grep '^SigIgn:' /proc/self/status | awk '{ print $2 }'
}

@test "the command starts with the dispositions lockrun started with, not lockrun's own" {
	# lockrun ignores SIGPIPE itself and catches SIGCHLD and the forwarded
	# signals: none of that reaches the command.
	assert_equal "$(ignored_mask --default-signal)" 0000000000000000
	# Ignored at the start: SIGHUP (bit 0) and SIGPIPE (bit 12).
	assert_equal "$(ignored_mask --default-signal --ignore-signal=HUP,PIPE)" 0000000000001001
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_grants WHERE end_reason = 'exited' AND exit_status = 0")" 2
}

@test "nohup: a SIGHUP neither reaches the command nor stops lockrun" {
	local pidf=$BATS_TEST_TMPDIR/cmd.pid
	env --default-signal nohup "$LOCKRUN" -x nohup -- sh -c "echo \$\$ >$pidf; sleep 1; echo done >$out" \
		>"$BATS_TEST_TMPDIR/nohup.log" 2>&1 3>&- &
	local pid=$!
	lr_wait_for test -s "$pidf"
	kill -HUP "$pid"
	kill -HUP -- "-$(cat "$pidf")" # the command's own group: ignored there too
	local rc=0
	wait "$pid" || rc=$?
	assert_equal "$rc" 0
	assert_equal "$(cat "$out")" done
	assert_equal "$(sql "SELECT end_reason, exit_status FROM lr_grants")" "$(printf 'exited\t0')"
}

@test "a background job's SIGINT stays ignored: no wait given up, nothing forwarded" {
	"$LOCKRUN" -x bgint -- sleep 30 3>&- &
	local holder=$!
	lr_wait_eq 1 holds bgint
	# Started with &: the shell ignores SIGINT for it, as lockrun does.
	"$LOCKRUN" -x bgint -- sh -c "echo ran >$out" 3>&- &
	local waiter=$!
	lr_wait_eq 1 waiters bgint
	kill -INT "$waiter" "$holder"
	sleep 0.5
	kill -0 "$waiter" || fail "SIGINT stopped the wait"
	kill -0 "$holder" || fail "SIGINT stopped the holder"
	kill "$holder"
	wait "$holder" || true
	local rc=0
	wait "$waiter" || rc=$?
	assert_equal "$rc" 0
	assert_equal "$(cat "$out")" ran
	assert_equal "$(holds)" 0
}
