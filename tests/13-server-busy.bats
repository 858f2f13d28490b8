#!/usr/bin/env bats
#
# A full server is busy, not down: a waiter that is turned away with "too
# many connections" (1040) or a per-account limit (1226) keeps trying
# within --wait and gets the lock once connections are freed; one that
# may not wait, or whose wait runs out, is "not acquired" (75), not
# "database unavailable" (69). The server is the suite's, shared by every
# file: teardown always gives it back its limits.

load helpers/common

bats_require_minimum_version 1.5.0

setup() {
	reset_db
	fillers=()
	saved_max=$(sql "SELECT @@GLOBAL.max_connections")
	# Connections still closing (of the account, or any other, such as a
	# test's client that just left) would make room in a server made full
	# around them: start with none but the asking client.
	lr_wait_eq 0 lockrun_conns
	lr_wait_eq 0 others_open
	out=$BATS_TEST_TMPDIR/out
}

teardown() {
	sql "SET GLOBAL max_connections = $saved_max;
		ALTER USER 'lockrun'@'%' WITH MAX_USER_CONNECTIONS 0" || true
	unfill || true
	[[ -z ${bg:-} ]] || kill "$bg" 2>/dev/null || true
}

# others_open: the connections open at the server, less the one asking.
others_open() {
	echo $(($(sql "SHOW GLOBAL STATUS LIKE 'Threads_connected'" | cut -f2) - 1))
}

# lockrun_conns: open connections of the lockrun account.
lockrun_conns() {
	sql "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = 'lockrun'"
}

# fill N: N idle connections of the lockrun account (the one lockrun uses),
# each a mariadb client sleeping in the server; waits until all are in.
fill() {
	local i before
	before=$(lockrun_conns)
	for ((i = 0; i < $1; i++)); do
		MYSQL_PWD=$(<"$LR_DB/lockrun.pw") mariadb --no-defaults --skip-ssl-verify-server-cert -h 127.0.0.1 \
			-P "$LR_PORT" -u lockrun lockrun -e "SELECT SLEEP(120)" \
			>/dev/null 2>&1 3>&- &
		fillers+=($!)
	done
	lr_wait_eq $((before + $1)) lockrun_conns
}

# unfill: close the filler connections, at the server (a client that goes
# away is noticed during SLEEP only every few seconds).
unfill() {
	local p id
	for id in $(sql "SELECT ID FROM information_schema.PROCESSLIST
		WHERE USER = 'lockrun' AND INFO LIKE 'SELECT SLEEP(120)%'"); do
		sql "KILL CONNECTION $id" 2>/dev/null || true
	done
	for p in "${fillers[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${fillers[@]}"; do wait "$p" 2>/dev/null || true; done
	fillers=()
}

# full_server [SPARE]: the server takes no more connections from
# unprivileged accounts: max_connections is set to what is open now, with
# at least two fillers among them (so that freeing them makes room) and at
# least the server's minimum of 10 (plus SPARE, for a test that lowers it
# further). Root still gets in (the SUPER extra connection).
full_server() {
	local others spare=${1:-0}
	# Threads_connected counts the sql client asking, which will be gone.
	others=$(($(sql "SHOW GLOBAL STATUS LIKE 'Threads_connected'" | cut -f2) - 1))
	local n=$((others + 2 < 10 + spare ? 10 + spare - others : 2))
	fill "$n"
	max=$((others + n))
	sql "SET GLOBAL max_connections = $max"
	# Proof that it is full, by the lockrun account itself.
	run -1 env MYSQL_PWD="$(<"$LR_DB/lockrun.pw")" mariadb --no-defaults --skip-ssl-verify-server-cert -h 127.0.0.1 \
		-P "$LR_PORT" -u lockrun lockrun -e "SELECT 1"
	assert_output --partial "Too many connections"
}

# full_account: the lockrun account may hold one connection, and does.
full_account() {
	sql "ALTER USER 'lockrun'@'%' WITH MAX_USER_CONNECTIONS 1"
	fill 1
}

# waiter_sessions RESOURCE: the ids of the two sessions of the one request
# queued on RESOURCE, once both are there: the one that holds its queue's
# wake-up lock, and the head's doorbell connection (asleep in lockrun_sleep,
# which registered it).
waiter_sessions() {
	local ids
	# The wait lock's name is a hash of the request id (lr_lock_name).
	ids=$(sql "SELECT IS_USED_LOCK(CONCAT('lockrun.wait.',
			LEFT(SHA2(CONCAT('wait:', request_id), 256), 32))) FROM lr_waiters
			WHERE resource = '$1'
		UNION SELECT wake_conn FROM lr_waiters WHERE resource = '$1' AND wake_conn IS NOT NULL")
	[[ $(wc -w <<<"$ids") == 2 ]] && echo $ids
}

# alive_after PID SECONDS: PID is still running SECONDS from now.
alive_after() {
	sleep "$2"
	kill -0 "$1" 2>/dev/null
}

# waits_through RESOURCE: against a server made full, lockrun -w 30 -x
# RESOURCE is still waiting 3 s later, and runs its command once the
# fillers are gone.
waits_through() {
	"$LOCKRUN" -w 30 -x "$1" -- sh -c "echo ran >$BATS_TEST_TMPDIR/ran" 2>"$out" 3>&- &
	bg=$!
	alive_after "$bg" 3 || fail "lockrun exited while the server was full: $(cat "$out")"
	[[ ! -e $BATS_TEST_TMPDIR/ran ]] || fail "the command ran while the server was full"
	unfill
	local rc=0
	wait "$bg" || rc=$?
	bg=
	assert_equal "$rc" 0
	assert_equal "$(cat "$BATS_TEST_TMPDIR/ran")" ran
	assert_equal "$(holds "$1")" 0
}

@test "too many connections (1040): a waiter keeps trying and runs the command once there is room" {
	full_server
	waits_through busy1
	# Told once at the normal level, not once per try.
	run cat "$out"
	assert_output "lockrun: warning: database server full, still trying: 127.0.0.1:$LR_PORT: Too many connections (1040)"
}

@test "per-account connection limit (1226): a waiter keeps trying and runs the command once there is room" {
	full_account
	waits_through busy2
	run cat "$out"
	assert_output "lockrun: warning: database server full, still trying: 127.0.0.1:$LR_PORT: User 'lockrun' has exceeded the 'max_user_connections' resource (current value: 1) (1226)"
}

@test "-n against a full server: not acquired (75), one line naming the cause, at once" {
	full_server
	local t0=${EPOCHREALTIME/[.,]/}
	run "$LOCKRUN" -n -x busy3 -- true
	assert_failure 75
	assert_output "lockrun: not acquired: the database server is full: 127.0.0.1:$LR_PORT: Too many connections (1040)"
	(((${EPOCHREALTIME/[.,]/} - t0) / 1000 < 3000))
	# -q hides a busy lock, not a full database; -E applies as to any
	# request not acquired.
	run "$LOCKRUN" -q -n -E 3 -x busy3 -- true
	assert_failure 3
	assert_output --partial "not acquired: the database server is full"
}

@test "--wait runs out while the account stays at its limit: not acquired (75), not unavailable" {
	full_account
	local t0=${EPOCHREALTIME/[.,]/}
	run "$LOCKRUN" -w 2 -x busy4 -- true
	assert_failure 75
	assert_line --index 0 --partial "database server full, still trying"
	assert_line --index 1 --regexp "^lockrun: not acquired: the database server was still full after 2\.[0-9] s: 127\.0\.0\.1:$LR_PORT: User 'lockrun' has exceeded the 'max_user_connections' resource"
	assert_equal "${#lines[@]}" 2
	local ms=$(((${EPOCHREALTIME/[.,]/} - t0) / 1000))
	((ms >= 2000 && ms < 8000)) || fail "gave up after $ms ms"
}

@test "-v says once that the server is full and how it retries" {
	full_server
	run "$LOCKRUN" -v -w 4 -x busy5 -- true
	assert_failure 75
	# The warning, the plan, and the end: nothing per try.
	assert_line --index 0 "lockrun: warning: database server full, still trying: 127.0.0.1:$LR_PORT: Too many connections (1040)"
	assert_line --index 1 "lockrun: retrying the connection every 50 ms to 2 s (jittered) for up to 4 s"
	assert_line --index 2 --regexp "^lockrun: not acquired: the database server was still full after 4\.[0-9] s: "
	assert_equal "${#lines[@]}" 3
}

@test "SIGTERM while waiting for a full server: stops at once, nothing held" {
	full_server
	"$LOCKRUN" -x busy6 -- true 2>"$out" 3>&- &
	bg=$!
	lr_wait_for grep -q "still trying" "$out"
	local t0=${EPOCHREALTIME/[.,]/} rc=0
	kill -TERM "$bg"
	wait "$bg" || rc=$?
	bg=
	assert_equal "$rc" 143
	local ms=$(((${EPOCHREALTIME/[.,]/} - t0) / 1000))
	((ms < 1500)) || fail "took $ms ms to stop"
	unfill
	assert_equal "$(holds)" 0
	assert_equal "$(waiters)" 0
}

@test "a queued waiter cut off while the server is full: not acquired (75) when its wait runs out" {
	"$LOCKRUN" -x busy7 -- sh -c "while [ ! -e $BATS_TEST_TMPDIR/go ]; do sleep 0.1; done" 3>&- &
	bg=$!
	lr_wait_eq 1 holds busy7
	local t0=${EPOCHREALTIME/[.,]/}
	"$LOCKRUN" -w 12 -x busy7 -- true 2>"$out" 3>&- &
	local b=$! id
	lr_wait_eq 1 waiters busy7
	lr_wait_for waiter_sessions busy7
	full_server 2
	# Cut the waiter off: both its connections. Two slots less at the same
	# time, so that they leave no room behind.
	local ids
	ids=($(waiter_sessions busy7))
	sql "SET GLOBAL max_connections = $((max - 2)); KILL CONNECTION ${ids[0]};
		KILL CONNECTION ${ids[1]}"
	local rc=0
	wait "$b" || rc=$?
	assert_equal "$rc" 75
	local ms=$(((${EPOCHREALTIME/[.,]/} - t0) / 1000))
	((ms >= 12000 && ms < 20000)) || fail "gave up after $ms ms"
	run cat "$out"
	assert_line --index 0 "lockrun: warning: database trouble, still trying: the database server is full: 127.0.0.1:$LR_PORT: Too many connections (1040)"
	assert_line --index 1 "lockrun: not acquired: the database server is full: 127.0.0.1:$LR_PORT: Too many connections (1040)"
	assert_equal "${#lines[@]}" 2
	unfill
	touch "$BATS_TEST_TMPDIR/go"
	rc=0
	wait "$bg" || rc=$?
	bg=
	assert_equal "$rc" 0
}
