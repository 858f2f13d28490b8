#!/usr/bin/env bats
#
# Hostile clients of the SQL API (API 3): the EXECUTE-only account
# `lockrun`, driven with the mariadb client and tests/tools/hostile.py
# (python3 + pymysql), tries what an application that wants more than its
# share could: call the internal routines, sweep a live hold, fake the
# clock or a grant id, read a waiter's secrets from what it is shown and
# claim its hand-off, pin a holder's rows in a transaction of its own (at
# any isolation level, with autocommit off), replay its lease with other
# items, fill the resource table with made-up names, feed every public
# routine bad arguments, and keep state in its session.
# Every test judges from the outside: error numbers and texts, the
# lockrun children's own records and exit statuses, and the rows as the
# admin reads them. Resource names start with h- (the server is shared
# with the other files).

load helpers/common
load helpers/records
load helpers/sqlapi

bats_require_minimum_version 1.5.0

setup_file() {
	# The interpreter that has pymysql (python3-pymysql, a package of
	# tests/run): Debian's, not a python3 that PATH may put first.
	local p
	for p in /usr/bin/python3 python3; do
		if "$p" -c 'import pymysql' 2>/dev/null; then
			export LR_HPY=$p
			return 0
		fi
	done
	echo "no python3 with pymysql (apt-get install python3-pymysql)" >&2
	return 1
}

setup() {
	rec=$BATS_TEST_TMPDIR/rec
	: >"$rec"
	pids=()
}

teardown() {
	kill_pids
}

hostile() {
	"$LR_HPY" "$BATS_TEST_DIRNAME/tools/hostile.py" "$@"
}

# app_force SQL: like app, but every statement runs even after an error
# (--force), without the header line.
app_force() {
	MYSQL_PWD=$(<"$LR_DB/lockrun.pw") mariadb --no-defaults --skip-ssl-verify-server-cert -h 127.0.0.1 \
		-P "$LR_PORT" -u lockrun -D lockrun -B -N --force <<<"$1"
}

# grant_of RESOURCE: the grant id of the (one) live hold of RESOURCE.
grant_of() {
	sql "SELECT grant_id FROM lr_holds WHERE resource = '$1'"
}

# wait_rc PID: the exit status of background job PID, in $rc (not in a
# $(...): a subshell cannot wait for its parent's jobs).
wait_rc() {
	rc=0
	wait "$1" || rc=$?
}

@test "the account sees only the 13 public procedures; internal routines 1370, tables 1142, temporary tables 1044" {
	local out
	if lr_server_is_mysql; then
		# MySQL's information_schema shows no routine to an account that
		# may only execute it; its grants, roles' included, name them.
		out=$(app "SHOW GRANTS" | grep -o 'EXECUTE ON PROCEDURE `lockrun`.`[a-z_]*`' |
			sed 's/.*`\.`\(.*\)`/PROCEDURE \1/' | sort | paste -sd,)
		assert_equal "$out" \
			"PROCEDURE lockrun_acquire,PROCEDURE lockrun_check,PROCEDURE lockrun_dequeue,PROCEDURE lockrun_grant,PROCEDURE lockrun_history,PROCEDURE lockrun_host_queue,PROCEDURE lockrun_list,PROCEDURE lockrun_poll,PROCEDURE lockrun_release,PROCEDURE lockrun_renew,PROCEDURE lockrun_settle,PROCEDURE lockrun_sleep,PROCEDURE lockrun_status"
		! app "SHOW GRANTS" | grep -qF 'ON `lockrun`.*' || fail "a grant on the whole database"
	else
		out=$(app "SELECT CONCAT(ROUTINE_TYPE, ' ', ROUTINE_NAME) AS r FROM information_schema.ROUTINES
			WHERE ROUTINE_SCHEMA = 'lockrun' ORDER BY ROUTINE_NAME")
		assert_equal "$(col r <<<"$out" | paste -sd,)" \
			"PROCEDURE lockrun_acquire,PROCEDURE lockrun_check,PROCEDURE lockrun_dequeue,PROCEDURE lockrun_grant,PROCEDURE lockrun_history,PROCEDURE lockrun_host_queue,PROCEDURE lockrun_list,PROCEDURE lockrun_poll,PROCEDURE lockrun_release,PROCEDURE lockrun_renew,PROCEDURE lockrun_settle,PROCEDURE lockrun_sleep,PROCEDURE lockrun_status"
	fi
	# Not even the body of a public one.
	out=$(app "SELECT COUNT(*) AS n FROM information_schema.ROUTINES
		WHERE ROUTINE_SCHEMA = 'lockrun' AND ROUTINE_DEFINITION IS NOT NULL")
	assert_equal "$(field n "$out")" 0
	# There are internal routines (the admin sees them), and each CALL or
	# SELECT of one by the account is 1370 and writes nothing.
	(($(sql "SELECT COUNT(*) FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = 'lockrun'
		AND ROUTINE_NAME LIKE 'lr\\_%'") > 0))
	run hostile surface
	assert_success
	refute_output --partial FAIL
	assert_line --regexp '^ok internal\.lr_sweep '
	assert_line --regexp '^ok table\.lr_holds\.delete'
	assert_line --regexp '^ok temporary\.lr_resources'
}

@test "lr_sweep of a held mutex with a far future is 1370: the holder keeps it, lockrun -n stays busy (75)" {
	"$LOCKRUN" -x h-sweep -- sh -c "$(rec_cmd "$rec" h-sweep -- 3)" 3>&- &
	pids+=($!)
	lr_wait_eq 1 holds h-sweep
	local gid
	gid=$(grant_of h-sweep)
	run app "CALL lr_sweep('h-sweep', '2100-01-01')"
	assert_failure
	assert_output --partial "ERROR 1370"
	run app "CALL lockrun.lr_sweep('h-sweep', '2100-01-01 00:00:00.000000')"
	assert_output --partial "ERROR 1370"
	assert_equal "$(sql "SELECT CONCAT(COUNT(*), ' ', COALESCE(MAX(grant_id), 0)) FROM lr_holds
		WHERE resource = 'h-sweep'")" "1 $gid"
	run "$LOCKRUN" -n -x h-sweep -- sh -c "$(rec_cmd "$rec" h-sweep)"
	assert_equal "$status" 75
	wait_rc "${pids[0]}"
	assert_equal "$rc" 0
	assert_equal "$(rec_count "$rec" enter h-sweep)" 1
	assert_equal "$(rec_max "$rec" h-sweep)" 1
	assert_equal "$(sql "SELECT end_reason FROM lr_grants WHERE id = $gid")" exited
}

@test "SET timestamp to tomorrow: the acquire is busy behind a live lockrun holder, and holds and renewals run on the server's clock" {
	# The holder holds until the checks are done (a fixed 2 s ran out
	# before them on a loaded machine).
	"$LOCKRUN" -x h-ts -- sh -c "$(rec_cmd "$rec" h-ts -- until "$BATS_TEST_TMPDIR/go")" 3>&- &
	pids+=($!)
	lr_wait_eq 1 holds h-ts
	local gid l out
	gid=$(grant_of h-ts)
	l=$(newid)
	out=$(app "SET timestamp = UNIX_TIMESTAMP(NOW() + INTERVAL 1 DAY);
		CALL lockrun_acquire('mutex:h-ts', '$(newid)', '$l', 30000, 0, 'apphost', 4242, 'tester', 'h-ts');")
	if [[ $(field outcome "$out") == granted ]]; then
		# It would run now: its own record, against the holder's.
		echo "enter h-ts 1 $(field fence "$out")" >>"$rec"
		sleep 0.3
		echo "leave h-ts 1" >>"$rec"
		rel "$l" >/dev/null
	fi
	assert_equal "$(field outcome "$out")" busy
	assert_equal "$(sql "SELECT CONCAT(COUNT(*), ' ', MAX(grant_id)) FROM lr_holds WHERE resource = 'h-ts'")" "1 $gid"
	assert_equal "$(sql "SELECT ended_at IS NULL FROM lr_grants WHERE id = $gid")" 1
	touch "$BATS_TEST_TMPDIR/go"
	wait_rc "${pids[0]}"
	assert_equal "$rc" 0
	assert_equal "$(rec_max "$rec" h-ts)" 1
	assert_equal "$(sql "SELECT end_reason FROM lr_grants WHERE id = $gid")" exited

	# Now free: granted, but its hold expires by the server's clock, not a
	# day later; a renewal with the fake clock neither.
	l=$(newid)
	out=$(app "SET timestamp = UNIX_TIMESTAMP(NOW() + INTERVAL 1 DAY);
		CALL lockrun_acquire('mutex:h-ts', '$(newid)', '$l', 30000, 0, 'apphost', 4242, 'tester', 'h-ts');")
	assert_equal "$(field outcome "$out")" granted
	assert_equal "$(sql "SELECT CONCAT(h.expires_at BETWEEN UTC_TIMESTAMP(6) + INTERVAL 25 SECOND
			AND UTC_TIMESTAMP(6) + INTERVAL 31 SECOND, ' ',
		g.acquired_at BETWEEN UTC_TIMESTAMP(6) - INTERVAL 5 SECOND AND UTC_TIMESTAMP(6))
		FROM lr_holds h JOIN lr_grants g ON g.id = h.grant_id WHERE g.request_id = '$l'")" "1 1"
	out=$(app "SET timestamp = UNIX_TIMESTAMP(NOW() + INTERVAL 1 DAY); CALL lockrun_renew('$l', 60000)")
	assert_equal "$(field renewed "$out")" 1
	assert_equal "$(sql "SELECT h.expires_at BETWEEN UTC_TIMESTAMP(6) + INTERVAL 55 SECOND
			AND UTC_TIMESTAMP(6) + INTERVAL 61 SECOND
		FROM lr_holds h JOIN lr_grants g ON g.id = h.grant_id WHERE g.request_id = '$l'")" 1
	rel "$l" >/dev/null
}

@test "SET insert_id does not choose a grant's id" {
	local v l out rc
	# An id nobody has, 1, and 0 (which MySQL takes as the id itself).
	v=$(sql "SELECT COALESCE(MAX(id), 0) + 100000 FROM lr_grants")
	for want in 0 1 "$v"; do
		l=$(newid)
		rc=0
		out=$(app "SET insert_id = $want;
			CALL lockrun_acquire('mutex:h-ins-$want', '$(newid)', '$l', 30000, 0, 'apphost', 4242, 'tester', 'h-ins')" 2>&1) || rc=$?
		if ((rc == 0)); then
			assert_equal "$(field outcome "$out")" granted
			[[ $(field grant_id "$out") != "$want" ]] || fail "SET insert_id = $want gave grant $want"
			assert_equal "$(field grant_id "$out")" "$(sql "SELECT id FROM lr_grants WHERE request_id = '$l'")"
			rel "$l" >/dev/null
		else
			# Failing cleanly is fine too: an error, nothing written.
			# MySQL cannot unset insert_id, so it refuses the session.
			[[ $out == *"ERROR "* ]] || fail "no error: $out"
			! lr_server_is_mysql || [[ $out == *"this session set insert_id"* ]] || fail "$out"
			assert_equal "$(sql "SELECT COUNT(*) FROM lr_grants WHERE request_id = '$l'")" 0
		fi
	done
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_grants WHERE id IN (0, $v)")" 0
}

@test "hand-off: wait_for is a hash, a leaked request id cannot claim the victim's handed grant, a made-up dequeue changes nothing" {
	local go=$BATS_TEST_TMPDIR/go
	# H holds until told; W (lockrun) queues behind it; S (SQL) behind W.
	"$LOCKRUN" -x h-hand -- sh -c "echo \"enter h-hand 1 \$LOCKRUN_FENCE\" >>$rec
		i=0; while [ ! -e $go ] && [ \$i -lt 1000 ]; do sleep 0.02; i=\$((i + 1)); done
		echo 'leave h-hand 1' >>$rec" 3>&- &
	pids+=($!)
	lr_wait_eq 1 holds h-hand
	"$LOCKRUN" -w 30 -x h-hand -- sh -c "echo \"enter h-hand 1 \$LOCKRUN_FENCE\" >>$rec
		sleep 0.3; echo 'leave h-hand 1' >>$rec" 3>&- &
	pids+=($!)
	local wpid=$!
	lr_wait_eq 1 waiters h-hand
	local wreq wlease sr out wf
	wreq=$(sql "SELECT request_id FROM lr_waiters WHERE resource = 'h-hand'")
	wlease=$(sql "SELECT lease FROM lr_waiters WHERE resource = 'h-hand'")
	sr=$(newid)
	out=$(acq mutex:h-hand "$sr" "$(newid)" 30000 1)
	assert_equal "$(field outcome "$out")" queued
	wf=$(field wait_for "$out")
	# (The SHA-256 of the secret: nothing to read back.)
	assert_equal "$wf" "lockrun.wait.$(sql "SELECT LEFT(SHA2(CONCAT('wait:', '$wreq'), 256), 32)")"
	out=$(app "CALL lockrun_poll('$sr')")
	assert_equal "$(field wait_for "$out")" "$wf"
	# No id the database keeps appears in what S is shown.
	local shown
	shown="$(acq mutex:h-hand "$sr" "$(newid)" 30000 1) $out"
	assert_equal "$(sql "SELECT COUNT(*) FROM (SELECT request_id AS id FROM lr_waiters
		UNION SELECT lease FROM lr_waiters WHERE lease IS NOT NULL
		UNION SELECT request_id FROM lr_grants
		UNION SELECT queued_as FROM lr_grants WHERE queued_as IS NOT NULL) x
		WHERE LOCATE(x.id, '${shown//\'/}') > 0")" 0

	# W is slow to claim (stopped): H ends, its release hands W the grant.
	kill -STOP "$wpid"
	touch "$go"
	lr_wait_eq 1 sql "SELECT COUNT(*) FROM lr_grants WHERE queued_as = '$wreq' AND ended_at IS NULL"
	local gid fence
	gid=$(sql "SELECT id FROM lr_grants WHERE queued_as = '$wreq' AND ended_at IS NULL")
	fence=$(sql "SELECT fence FROM lr_grant_items WHERE grant_id = $gid")
	assert_equal "$(sql "SELECT CONCAT(request_id, ' ', claimed_at IS NULL) FROM lr_grants WHERE id = $gid")" "$wlease 1"

	# S got W's request id (a leak): claiming with a lease of its own fails.
	local before
	before=$(sql "SELECT CONCAT_WS(' ', (SELECT COUNT(*) FROM lr_grants), (SELECT COUNT(*) FROM lr_holds),
		(SELECT COUNT(*) FROM lr_waiters), (SELECT COUNT(*) FROM lr_resources))")
	run app "CALL lockrun_acquire('mutex:h-hand', '$wreq', '$(newid)', 30000, 1, 'evil', 666, 'evil', 'hijack')"
	assert_failure
	assert_output --partial "ERROR 1644"
	assert_output --partial "lockrun: the grant handed to this request is claimed with the lease the request queued with"
	run app "CALL lockrun_acquire('mutex:h-hand', '$wreq', '$(newid)', 30000, 0, 'evil', 666, 'evil', 'hijack')"
	assert_failure
	assert_output --partial "ERROR 1644"
	# Nor is the request id a lease; and a made-up request has nothing.
	out=$(app "CALL lockrun_release('$wreq', 'exited', 0, NULL)")
	assert_equal "$(field released "$out")" 0
	out=$(app "CALL lockrun_dequeue('$(newid)')")
	assert_equal "$(field removed "$out")/$(field returned "$out")" 0/0
	assert_equal "$(sql "SELECT CONCAT(request_id, ' ', claimed_at IS NULL, ' ', ended_at IS NULL) FROM lr_grants
		WHERE id = $gid")" "$wlease 1 1"
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_grants WHERE host = 'evil'")" 0
	assert_equal "$(sql "SELECT CONCAT_WS(' ', (SELECT COUNT(*) FROM lr_grants), (SELECT COUNT(*) FROM lr_holds),
		(SELECT COUNT(*) FROM lr_waiters), (SELECT COUNT(*) FROM lr_resources))")" "$before"

	# W goes on, claims its grant and runs with its own fence.
	kill -CONT "$wpid"
	wait_rc "$wpid"
	assert_equal "$rc" 0
	wait_rc "${pids[0]}"
	assert_equal "$rc" 0
	assert_equal "$(rec_count "$rec" enter h-hand)" 2
	assert_equal "$(rec_max "$rec" h-hand)" 1
	assert_equal "$(awk '$1 == "enter" { f = $4 } END { print f }' "$rec")" "$fence"
	assert_equal "$(sql "SELECT CONCAT(request_id, ' ', claimed_at IS NOT NULL, ' ', end_reason) FROM lr_grants
		WHERE id = $gid")" "$wlease 1 exited"
	app "CALL lockrun_dequeue('$sr')" >/dev/null
}

@test "lockrun_host_queue counts on the caller's own places only: a made-up id, a lease or the wake-up hash changes no count" {
	local ra la rb lb out hash
	ra=$(newid) la=$(newid) rb=$(newid) lb=$(newid)
	acq mutex:h-hq "$ra" "$la" >/dev/null
	assert_equal "$(field outcome "$(acq mutex:h-hq "$rb" "$lb" 30000 1)")" queued
	# The waiter's own request id sets its count.
	out=$(app "CALL lockrun_host_queue('$rb', 4)")
	assert_equal "$(field places "$out")" 1
	assert_equal "$(sql "SELECT host_behind FROM lr_waiters WHERE request_id = '$rb'")" 4
	# Anything else an application could have seen writes nothing: a
	# made-up id, the holder's lease or request id, the waiter's lease, and
	# the public hash the waiter behind is shown (wait_for).
	hash=$(sql "SELECT LEFT(SHA2(CONCAT('wait:', '$rb'), 256), 32)")
	local id
	for id in "$(newid)" "$la" "$ra" "$lb" "$hash"; do
		out=$(app "CALL lockrun_host_queue('$id', 999)")
		assert_equal "$(field places "$out")" 0
	done
	assert_equal "$(sql "SELECT host_behind FROM lr_waiters WHERE request_id = '$rb'")" 4
	app "CALL lockrun_dequeue('$rb')" >/dev/null
	rel "$la" >/dev/null
}

@test "lockrun_check takes a lease: someone else's grant number is 1644, and a random lease in an open transaction does not stall a holder (ttl 3 s)" {
	"$LOCKRUN" --ttl 3 --kill-after 0.5 -x h-chk -- sh -c "$(rec_cmd "$rec" h-chk -- 6)" \
		2>"$BATS_TEST_TMPDIR/holder.err" 3>&- &
	pids+=($!)
	lr_wait_eq 1 holds h-chk
	local gid
	gid=$(grant_of h-chk)
	run app "CALL lockrun_check($gid, 'h-chk')"
	assert_failure
	assert_output --partial "ERROR 1644"
	assert_output --partial "lockrun: lease must be 32 lowercase hex digits"
	run app "START TRANSACTION; CALL lockrun_check('$gid', NULL); COMMIT"
	assert_failure
	assert_output --partial "lockrun: lease must be 32 lowercase hex digits"
	# A transaction left open for 8 s after checks of a random lease (and
	# of the grant number, refused), while the holder renews every second.
	app_force "START TRANSACTION;
		CALL lockrun_check('$(newid)', 'h-chk');
		CALL lockrun_check('$(newid)', NULL);
		CALL lockrun_check($gid, 'h-chk');
		CALL lockrun_check('$gid', NULL);
		SELECT 'sleeping', SLEEP(8);
		COMMIT" >"$BATS_TEST_TMPDIR/checker" 2>&1 3>&- &
	pids+=($!)
	lr_wait_for grep -q sleeping "$BATS_TEST_TMPDIR/checker"
	run cat "$BATS_TEST_TMPDIR/checker"
	assert_line --regexp "^0\s+0\s+NULL\s+NULL\s+3$"
	wait_rc "${pids[0]}"
	assert_equal "$rc" 0
	run cat "$BATS_TEST_TMPDIR/holder.err"
	refute_output --partial lost
	assert_equal "$(rec_count "$rec" leave h-chk)" 1
	assert_equal "$(sql "SELECT end_reason FROM lr_grants WHERE id = $gid")" exited
}

@test "a live lease replayed with other items (someone else's, one more, another count or kind, a new name) is refused, writing nothing; the same items answer the same grant" {
	run hostile replay
	assert_success
	refute_output --partial FAIL
	assert_line --regexp '^ok replay\.someone-elses\.enqueue-0 '
	assert_line 'ok replay.no-new-rows'
	assert_line --regexp '^ok replay\.same-items '
}

@test "a renewal under way as its hold's grace ends, committed after a sweep read the hold, keeps it: renewed, the acquirer busy" {
	run hostile sweeprace
	assert_success
	refute_output --partial FAIL
	assert_line --regexp '^ok sweeprace\.kept '
}

@test "lockrun_check in a transaction left open, at every isolation level (also one set for the next transaction only) and with autocommit=0, keeps out only the release of the grant it checked" {
	run hostile checklocks
	assert_success
	refute_output --partial FAIL
	local level
	for level in read-uncommitted read-committed repeatable-read serializable serializable-once; do
		assert_line --regexp "^ok checklocks\.$level\.start-transaction "
		assert_line --regexp "^ok checklocks\.$level\.autocommit-0 "
	done
}

@test "rows an account makes by naming locks are reclaimed once idle for ten minutes, two per new row, and a name made again (or set as a semaphore) starts above its tokens" {
	run hostile reclaim "$BATS_TEST_NUMBER"
	assert_success
	refute_output --partial FAIL
	assert_line --regexp '^ok reclaim\.idle '
	assert_line 'ok reclaim.kept'
	assert_line 'ok reclaim.fences'
	# lockrunctl set makes a semaphore of a reclaimed name above its tokens.
	local l fence n
	n=h-rc-sa-$(newid | cut -c1-8)
	l=$(newid)
	fence=$(field fence "$(acq "mutex:$n" "$(newid)" "$l")")
	rel "$l" >/dev/null
	sql "UPDATE lr_resources SET updated_at = UTC_TIMESTAMP(6) - INTERVAL 1 HOUR WHERE name = '$n'"
	local i
	for i in 1 2 3 4 5; do
		[[ $(sql "SELECT COUNT(*) FROM lr_resources WHERE name = '$n'") == 1 ]] || break
		l=$(newid)
		acq "mutex:$n-made$i" "$(newid)" "$l" >/dev/null
		rel "$l" >/dev/null
	done
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_resources WHERE name = '$n'")" 0
	ctl set "$n" 2
	(($(sql "SELECT fence FROM lr_resources WHERE name = '$n'") >= fence)) ||
		fail "the semaphore starts at $(sql "SELECT fence FROM lr_resources WHERE name = '$n'"), below $fence"
}

@test "a busy answer's holder is host:pid and the account, never the command line; nor does lockrun -v print it" {
	"$LOCKRUN" -x h-priv -- sh -c 'sleep 3 # secret=hunter2' 3>&- &
	pids+=($!)
	local pid=$!
	lr_wait_eq 1 holds h-priv
	local out holder
	out=$(acq mutex:h-priv "$(newid)" "$(newid)")
	assert_equal "$(field outcome "$out")" busy
	holder=$(field holder "$out")
	[[ $holder =~ ^"$(hostname)":$pid\ \(lockrun@[^\)]*\),\ held\ [0-9]+s$ ]] ||
		fail "holder '$holder', want '$(hostname):$pid (lockrun@...), held Ns'"
	[[ $out != *hunter2* && $holder != *sleep* ]] || fail "the command shows: $out"
	run "$LOCKRUN" -n -v -x h-priv -- true
	assert_equal "$status" 75
	refute_output --partial hunter2
	refute_output --partial sleep
	wait_rc "$pid"
	assert_equal "$rc" 0
}

@test "bad arguments to every public routine: 1644 'lockrun...' or the server's data error, nothing written" {
	ctl set h-arg-sem 5
	run hostile args
	assert_success
	refute_output --partial FAIL
	# Enough cases ran (each prints a line).
	(($(grep -c '^ok ' <<<"$output") >= 200)) || fail "only $(grep -c '^ok ' <<<"$output") cases"
}

@test "writers inside an open transaction are refused with '<proc>: call it outside a transaction', nothing written" {
	run hostile txn
	assert_success
	refute_output --partial FAIL
	assert_line --regexp '^ok start-transaction\.lockrun_renew '
	assert_line --regexp '^ok start-transaction\.lockrun_poll '
	assert_line --regexp '^ok start-transaction\.lockrun_sleep '
	assert_line --regexp '^ok start-transaction\.lockrun_host_queue '
	assert_line 'ok txn.untouched'
}

@test "autocommit=0: each CALL commits its own work and leaves no row lock while the session idles" {
	local ac=$BATS_TEST_TMPDIR/ac0
	# A lockrun holder with a 3 s lease (a renewal every second) of the
	# resource the idle session queues on, settles and leaves.
	"$LOCKRUN" --ttl 3 --kill-after 0.5 -x h-ac0-q -- sh -c "$(rec_cmd "$rec" h-ac0-q -- 4)" \
		2>"$BATS_TEST_TMPDIR/holder.err" 3>&- &
	pids+=($!)
	lr_wait_eq 1 holds h-ac0-q
	"$LR_HPY" "$BATS_TEST_DIRNAME/tools/hostile.py" ac0 "$ac" 6 h-ac0-q >"$BATS_TEST_TMPDIR/ac0.out" 2>&1 3>&- &
	pids+=($!)
	lr_wait_for test -s "$ac"
	local res
	res=$(head -n 1 "$ac")
	# jget KEY: KEY of the session's JSON line.
	jget() { "$LR_HPY" -c 'import json, sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$res" "$1"; }
	local lease req settled released
	lease=$(jget lease) req=$(jget request) settled=$(jget settled) released=$(jget released)
	# No row the session's calls touched is locked while it idles.
	run sql "SET SESSION innodb_lock_wait_timeout = 1; START TRANSACTION;
		SELECT COUNT(*) FROM lr_resources WHERE name IN ('h-ac0', 'h-ac0-q', 'h-ac0-r') FOR UPDATE;
		SELECT COUNT(*) FROM lr_holds WHERE resource IN ('h-ac0', 'h-ac0-q', 'h-ac0-r') FOR UPDATE;
		SELECT COUNT(*) FROM lr_grants WHERE request_id IN ('$lease', '$settled', '$released') FOR UPDATE;
		SELECT COUNT(*) FROM lr_waiters WHERE resource IN ('h-ac0', 'h-ac0-q', 'h-ac0-r') FOR UPDATE;
		COMMIT"
	assert_success
	# The holder renews and releases while the session idles.
	wait_rc "${pids[0]}"
	assert_equal "$rc" 0
	run cat "$BATS_TEST_TMPDIR/holder.err"
	refute_output --partial lost
	assert_equal "$(holds h-ac0-q)" 0
	# What the calls did is there for everyone (committed), and the
	# session's ROLLBACK at the end undoes none of it.
	local i
	for i in 1 2; do
		assert_equal "$(sql "SELECT h.expires_at > UTC_TIMESTAMP(6) + INTERVAL 30 SECOND FROM lr_holds h
			JOIN lr_grants g ON g.id = h.grant_id WHERE g.request_id = '$lease'")" 1
		assert_equal "$(sql "SELECT COUNT(*) FROM lr_waiters WHERE request_id = '$req'")" 0
		assert_equal "$(sql "SELECT COUNT(*) FROM lr_grants WHERE request_id = '$settled' AND ended_at IS NOT NULL")" 1
		assert_equal "$(sql "SELECT CONCAT(g.end_reason, ' ', COUNT(h.grant_id)) FROM lr_grants g
			LEFT JOIN lr_holds h ON h.grant_id = g.id WHERE g.request_id = '$released' GROUP BY g.id")" "exited 0"
		if ((i == 1)); then
			wait_rc "${pids[1]}"
			assert_equal "$rc" 0
			assert_equal "$(tail -n 1 "$ac")" "done"
		fi
	done
	rel "$lease" >/dev/null
	assert_equal "$(holds h-ac0)" 0
	# Every call answered as it would with autocommit.
	assert_equal "acquire $(jget acquire), renew $(jget renew), enqueue $(jget enqueue), poll $(jget poll), settle $(jget settle), dequeue $(jget dequeue), release $(jget release)" \
		"acquire granted, renew 1/1, enqueue queued, poll 1, settle queued, dequeue 1, release 1"
}

@test "autocommit=0: every procedure and path (grant, busy, queued, poll, sleep, host_queue, settle, dequeue, claim, renew, release with hand-off or wake-up) ends with no transaction open; check keeps it until the COMMIT" {
	run hostile ac0paths
	assert_success
	refute_output --partial FAIL
	assert_line 'ok ac0paths.acquire.claim'
	assert_line 'ok ac0paths.renew.after-claim'
	assert_line 'ok ac0paths.release.hand-off'
	assert_line 'ok ac0paths.release.wakes'
	assert_line --regexp '^ok ac0paths\.check '
}

@test "no temporary table in the caller's session, and the caller's user variables change nothing" {
	run hostile session
	assert_success
	refute_output --partial FAIL
	assert_line --regexp '^ok session\.no-temporary-table\.lr_req\.after-acquire'
	assert_line --regexp '^ok session\.cycle'
}

@test "afterwards: used matches the holds of every h- resource, and fences rise in grant order" {
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_resources r
		WHERE (r.name LIKE 'h-%' OR r.name LIKE 'id:h-%') AND r.used <>
		(SELECT COALESCE(SUM(h.permits), 0) FROM lr_holds h WHERE h.resource = r.name)")" 0
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_grant_items a JOIN lr_grant_items b
		ON b.resource = a.resource AND b.grant_id > a.grant_id
		WHERE (a.resource LIKE 'h-%' OR a.resource LIKE 'id:h-%') AND a.fence >= b.fence")" 0
	# Something to judge: the fences of this file's grants.
	(($(sql "SELECT COUNT(*) FROM lr_grant_items WHERE resource LIKE 'h-%' AND fence IS NOT NULL") >= 10))
}

@test "the views (lockrun_status, _list, _history, _grant) refuse an open transaction; at SERIALIZABLE with autocommit=0 (also one set for the next transaction only) they lock nothing a release needs and show no command, lease or request id" {
	"$LOCKRUN" -x h-view -- sh -c 'sleep 30 # h-view-marker-1' 3>&- &
	pids+=($!)
	lr_wait_eq 1 holds h-view
	"$LOCKRUN" -w 30 -x h-view -- sh -c 'true # h-view-marker-2' 3>&- &
	pids+=($!)
	lr_wait_eq 1 waiters h-view
	local gid calls secret secrets
	gid=$(grant_of h-view)
	secrets=$(sql "SELECT request_id FROM lr_grants WHERE id = $gid
		UNION ALL SELECT request_id FROM lr_waiters WHERE resource = 'h-view'")
	[[ $(wc -l <<<"$secrets") == 2 ]] || fail "secrets: $secrets"
	calls="CALL lockrun_status('resources', 'h-view'); CALL lockrun_status('holders', NULL);
		CALL lockrun_status('epoch', NULL); CALL lockrun_status('ended', NULL);
		CALL lockrun_list(NULL); CALL lockrun_history('h-view', 3600, 10); CALL lockrun_grant($gid);"
	# Inside a transaction: refused, each.
	local p
	for p in "lockrun_status('holders', NULL)" "lockrun_list('mutex')" \
		"lockrun_history(NULL, NULL, 5)" "lockrun_grant($gid)"; do
		run app "START TRANSACTION; CALL $p; COMMIT"
		assert_failure
		assert_output --partial "${p%%(*}: call it outside a transaction"
	done
	# Outside one, in a session that would make every read lock: what
	# they show, and then the session stays open (8 s) while the grant is
	# released by force, which deletes the hold row they read.
	app "SET SESSION TRANSACTION ISOLATION LEVEL SERIALIZABLE; SET autocommit = 0; $calls
		SET TRANSACTION ISOLATION LEVEL SERIALIZABLE; $calls SELECT SLEEP(8)" \
		>"$BATS_TEST_TMPDIR/views" 2>&1 &
	local viewer=$!
	sleeping() { [[ $(sql "SELECT COUNT(*) FROM information_schema.PROCESSLIST
		WHERE INFO LIKE 'SELECT SLEEP(8)%'") == 1 ]]; }
	lr_wait_for -t 5 sleeping
	local t0=$SECONDS
	run timeout 5 "$LOCKRUNCTL" -c "$LR_ADMIN_CONFIG" release "$gid" --reason h-view
	assert_success
	((SECONDS - t0 < 3)) || fail "the release waited $((SECONDS - t0)) s for the views' session"
	wait "$viewer"
	run cat "$BATS_TEST_TMPDIR/views"
	assert_output --partial h-view
	refute_output --partial h-view-marker
	refute_output --partial ERROR
	for secret in $secrets; do
		refute_output --partial "$secret"
	done
}
