#!/usr/bin/env bats
#
# A spy of lockrun's own account. The documented set-up gives every host
# one account, and every session of an account reads the statement text
# of the others in the process list. lockrun sends its request ids,
# leases, items and command as parameters of prepared statements, so that
# text holds only '?': a spy that polls the process list during every kind
# of call (acquire, queue, sleep, host queue, renew, release, dequeue)
# and replays every id it reads finds nothing to replay, and the runs it
# watches are not disturbed.

load helpers/common
load helpers/proxy

bats_require_minimum_version 1.5.0

teardown() {
	[[ -z ${proxy_pid:-} ]] || kill "$proxy_pid" 2>/dev/null || true
}

setup_file() {
	/usr/bin/python3 -c 'import pymysql' || {
		echo "python3-pymysql is not installed (tests/run installs it)" >&2
		return 1
	}
}

@test "a spy session of the same account reads no secret in the process list, and its replays act on nothing" {
	local spy=$BATS_TEST_TMPDIR/spy.json i
	if lr_server_is_mysql; then
		skip "MySQL shows the parameters in the process list (the last test here)"
	fi
	local -a run=("$LOCKRUN" --ttl 3s --kill-after 0.5s)
	/usr/bin/python3 "$LR_SRC/tests/tools/spy.py" "$LOCKRUN_CONFIG" 9 >"$spy" 3>&- &
	local spy_pid=$!
	sleep 0.5
	# A holder renewing every second while four waiters queue behind it
	# (the head sleeps on its doorbell, the others wait behind it, two of
	# them on one host's queue), one that gives up (dequeue), and a
	# semaphore run beside them.
	"${run[@]}" -x spy -- sh -c 'sleep 3.5; echo "holder $LOCKRUN_FENCE"' \
		>"$BATS_TEST_TMPDIR/r0" 2>&1 3>&- &
	local -a pids=($!)
	lr_wait_eq 1 holds spy
	for i in 1 2 3; do
		"${run[@]}" -w 30 -x spy -- sh -c 'sleep 0.3; echo "waiter $LOCKRUN_FENCE"' \
			>"$BATS_TEST_TMPDIR/r$i" 2>&1 3>&- &
		pids+=($!)
	done
	"${run[@]}" -w 1 -x spy -- echo never >"$BATS_TEST_TMPDIR/gave-up" 2>&1 3>&- &
	local quitter=$!
	ctl set spy-s 2
	"${run[@]}" -s spy-s:2 -- sleep 2 >"$BATS_TEST_TMPDIR/s" 2>&1 3>&-
	for i in "${pids[@]}"; do
		wait "$i" || fail "run $i exited $? ($(cat "$BATS_TEST_TMPDIR"/r*))"
	done
	local rc=0
	wait "$quitter" || rc=$?
	assert_equal "$rc" 75
	wait "$spy_pid"
	run /usr/bin/python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
print("seen", d["seen"] > 0)
print("ids", d["ids"])
print("acted", d["acted"])
for t in d["texts"]:
    print("text", t)' "$spy"
	assert_line "seen True"
	assert_line "acted []"
	# What it saw: calls, with nothing in their text but '?'. Which ones
	# it caught in flight is the sampling's luck (a renewal takes a
	# millisecond), so none is named.
	assert_line --regexp '^text CALL lockrun_[a-z_]+\(\?(,\?)*\)$'
	refute_line --regexp "^text CALL .*'"
	# The only 32-hex strings in sight are the public wake-up lock names
	# (hashes of request ids): no lease, no request id of the lock log.
	local ids
	ids=$(/usr/bin/python3 -c 'import json, sys
print(",".join("\x27%s\x27" % i for i in json.load(open(sys.argv[1]))["ids"]) or "NULL")' "$spy")
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_grants WHERE request_id IN ($ids) OR queued_as IN ($ids)")" 0
	# Nobody was disturbed: one holder, three waiters after it, in order.
	assert_equal "$(cat "$BATS_TEST_TMPDIR"/r[0-3] | sort -k2 -n | cut -d' ' -f1 | tr '\n' ' ')" \
		"holder waiter waiter waiter "
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_grant_items i JOIN lr_grants g ON g.id = i.grant_id
		WHERE i.resource = 'spy' AND g.end_reason <> 'exited'")" 0
}

# run_behind SECONDS: a holder of spy-slow for SECONDS, and a run that
# waits behind it (its result in $status and $output, as by run).
run_behind() {
	"$LOCKRUN" --ttl 3s --kill-after 0.5s -x spy-slow -- sleep "$1" 3>&- &
	local holder=$!
	lr_wait_eq 1 holds spy-slow
	run "$LOCKRUN" --ttl 3s --kill-after 0.5s -w 10 -x spy-slow -- true
	wait "$holder" || fail "the holder exited $?"
}

@test "lockrun's own statements stay out of the slow log: with it on, the spy still reads only '?'" {
	local spy=$BATS_TEST_TMPDIR/spy.json
	if lr_server_is_mysql; then
		skip "MySQL shows the parameters in the process list in any case (the last test here)"
	fi
	sql "SET GLOBAL log_slow_query = 1, GLOBAL long_query_time = 0"
	/usr/bin/python3 "$LR_SRC/tests/tools/spy.py" "$LOCKRUN_CONFIG" 5 >"$spy" 3>&- &
	local spy_pid=$!
	sleep 0.5
	# A waiter behind a holder: its wait is a statement in flight long
	# enough for the spy to read it, whatever the sampling's luck.
	run_behind 2
	sql "SET GLOBAL log_slow_query = 0, GLOBAL long_query_time = 10"
	assert_success
	wait "$spy_pid"
	run /usr/bin/python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
print("seen", d["seen"] > 0, "acted", d["acted"])
print(",".join("\x27%s\x27" % i for i in d["ids"]) or "NULL")' "$spy"
	assert_line "seen True acted []"
	# The only 32-hex strings it may read are the public wake-up lock
	# names: no request id, no lease.
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_grants WHERE request_id IN (${lines[1]})
		OR queued_as IN (${lines[1]})")" 0
}

# The SET that turns the slow log off for lockrun's session goes in the
# same send as the first CALL: the server must have run it before it
# prepares (MariaDB) or runs (MySQL) that CALL, or the CALL is logged.
@test "lockrun's statements stay out of the slow log, where they would show their leases, the first CALL too" {
	sql "SET GLOBAL log_output = 'TABLE', GLOBAL long_query_time = 0, GLOBAL slow_query_log = 1"
	sql "TRUNCATE mysql.slow_log"
	run_behind 1
	sql "SELECT 'spy-slow-probe'"
	local logged calls
	logged=$(sql "SELECT COUNT(*) FROM mysql.slow_log WHERE sql_text LIKE '%spy-slow-probe%'")
	calls=$(sql "SELECT COUNT(*) FROM mysql.slow_log WHERE sql_text LIKE '%lockrun\\_%'")
	sql "SET GLOBAL slow_query_log = 0, GLOBAL long_query_time = 10, GLOBAL log_output = 'FILE'"
	assert_success
	# The log was on (this test's own statement is in it); lockrun's are not.
	assert [ "$logged" -ge 1 ]
	assert_equal "$calls" 0
}

@test "with the general log on, the log holds the runs' leases, and doctor warns of it" {
	local want_off='^ok +general_log +general_log is OFF' want_on='^WARN +general_log +general_log is ON: the server writes every'
	if lr_server_is_mysql; then
		want_off='^WARN +general_log +MySQL shows every' want_on=$want_off
	fi
	run "$LOCKRUNCTL" -c "$LR_ADMIN_CONFIG" doctor
	assert_line --regexp "$want_off"
	sql "SET GLOBAL log_output = 'TABLE', GLOBAL general_log = ON"
	run "$LOCKRUNCTL" -c "$LR_ADMIN_CONFIG" doctor
	assert_line --regexp "$want_on"
	# Why: the server writes each execution with its parameters, a
	# run's lease among them, for whoever reads the log. (Whether a
	# session of the account also sees them in the process list depends
	# on when the server expands them: not asserted.)
	run "$LOCKRUN" -x spy-gl -- sh -c 'echo "$LOCKRUN_LEASE"'
	assert_success
	local lease=$output n
	[[ $lease =~ ^[0-9a-f]{32}$ ]] || fail "lease: '$lease'"
	n=$(sql "SELECT COUNT(*) FROM mysql.general_log WHERE argument LIKE '%$lease%'")
	sql "SET GLOBAL general_log = OFF; TRUNCATE mysql.general_log"
	((n > 0)) || fail "no statement in the general log names the lease"
}

@test "on MySQL a session of the same account reads a run's lease in the process list, as doctor warns" {
	lr_server_is_mysql || skip "MariaDB shows '?' (the first test here)"
	local spy=$BATS_TEST_TMPDIR/spy.json leases=$BATS_TEST_TMPDIR/leases spy_pid n=0
	run "$LOCKRUNCTL" -c "$LOCKRUN_CONFIG" doctor
	assert_line --regexp '^WARN +general_log +MySQL shows every statement.s parameters in the'
	# A run's CALL is in the account's process list, its lease in its
	# text, while the server parses it and loads its routine; inside the
	# routine the session shows the definer and the routine's own
	# statements, which the account does not see. So runs follow one
	# another for as long as the spy polls, each with such moments
	# (its acquire and its release), however loaded the machine is.
	/usr/bin/python3 "$LR_SRC/tests/tools/spy.py" "$LOCKRUN_CONFIG" 5 --no-replay >"$spy" 3>&- &
	spy_pid=$!
	while kill -0 "$spy_pid" 2>/dev/null; do
		"$LOCKRUN" -x spy-my -- sh -c 'echo "$LOCKRUN_LEASE"' >>"$leases" 3>&- ||
			fail "run $n exited $?"
		n=$((n + 1))
	done
	wait "$spy_pid"
	run /usr/bin/python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
leases = [l.strip() for l in open(sys.argv[2]) if l.strip()]
print("runs", len(leases))
print("texts with values", sum("\x27" in t for t in d["texts"]))
print("leases seen", sum(any(l in t for t in d["texts"]) for l in leases))' "$spy" "$leases"
	assert_line --regexp '^texts with values [1-9]'
	assert_line --regexp '^leases seen [1-9]'
}

# The round trips a run waits out, counted by lrproxy: the commands sent
# after an answer, the login and the goodbye left out.
turns() {
	local n
	n=$(grep -c '^turns ' "$fifo.log" || true)
	echo turns >"$fifo"
	lr_wait_eq "$((n + 1))" grep -c '^turns ' "$fifo.log" >/dev/null
	grep '^turns ' "$fifo.log" | tail -n 1 | cut -d' ' -f2
}

@test "an uncontended run waits out one round trip per CALL, the session's settings sent with the first" {
	# The SET that keeps the slow log out goes with the first CALL (on
	# MariaDB ahead of it in the same send, on MySQL in the same query);
	# on MariaDB each CALL's prepare goes with its execute, on MySQL the
	# CALLs go as text.
	local want=2
	proxy
	turns >/dev/null
	run "$LOCKRUN" -c "$pconf" -x spy-rt -- true
	assert_success
	assert_equal "$(turns)" "$want"
}
