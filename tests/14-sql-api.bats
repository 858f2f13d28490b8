#!/usr/bin/env bats
#
# The SQL API for applications (doc/sql-api.md), driven with the mariadb
# client alone, as the runtime account that has nothing but EXECUTE: the
# procedures' results, their errors, the rows they leave (read as the
# admin), and exclusion against lockrun-wrapped jobs judged from the
# children's own records and exit statuses.

load helpers/common
load helpers/records
load helpers/sqlapi

bats_require_minimum_version 1.5.0

setup() {
	setup_records
}

# rows: how many rows each lockrun table has, as the admin sees them.
rows() {
	sql "SELECT (SELECT COUNT(*) FROM lr_resources), (SELECT COUNT(*) FROM lr_holds),
		(SELECT COUNT(*) FROM lr_grants), (SELECT COUNT(*) FROM lr_waiters)"
}

@test "acquire, renew, check inside a transaction, release: round trip with the EXECUTE-only account" {
	local req lease out gid fence
	req=$(newid) lease=$(newid)
	out=$(acq mutex:m1 "$req" "$lease" 5000)
	assert_equal "$(field outcome "$out")" granted
	assert_equal "$(field resource "$out")" m1
	assert_equal "$(field state "$out")" ok
	assert_equal "$(field api "$out")" 3
	gid=$(field grant_id "$out")
	fence=$(field fence "$out")
	assert_equal "$gid" "$(sql "SELECT id FROM lr_grants WHERE request_id = '$lease'")"
	assert_equal "$fence" "$(sql "SELECT fence FROM lr_holds WHERE grant_id = $gid")"
	assert_equal "$(sql "SELECT CONCAT(host, ':', pid, ' ', os_user, ' ', command, ' ', ttl_ms)
		FROM lr_grants WHERE id = $gid")" "apphost:4242 tester 14-sql-api test 5000"

	out=$(app "CALL lockrun_renew('$lease', 60000)")
	assert_equal "$(field grant_id "$out")" "$gid"
	assert_equal "$(field holds "$out")" 1
	assert_equal "$(field renewed "$out")" 1
	assert_equal "$(field api "$out")" 3
	# The server's clock: a minute from now, not five seconds.
	assert_equal "$(sql "SELECT expires_at > UTC_TIMESTAMP(6) + INTERVAL 50 SECOND FROM lr_holds WHERE grant_id = $gid")" 1

	out=$(app "START TRANSACTION; CALL lockrun_check('$lease', 'm1'); COMMIT")
	assert_equal "$(field live "$out")" 1
	assert_equal "$(field holds "$out")" 1
	assert_equal "$(field fence "$out")" "$fence"
	local left
	left=$(field remaining_ms "$out")
	((left > 50000 && left <= 60000)) || fail "remaining_ms $left, renewed to 60000"

	out=$(rel "$lease")
	assert_equal "$(field released "$out")" 1
	assert_equal "$(sql "SELECT CONCAT(end_reason, ' ', exit_status, ' ', ended_at IS NOT NULL)
		FROM lr_grants WHERE id = $gid")" "exited 0 1"
	assert_equal "$(holds m1)" 0
	# Idempotent: a second release finds nothing and is no error.
	out=$(rel "$lease")
	assert_equal "$(field released "$out")" 0
	out=$(app "START TRANSACTION; CALL lockrun_check('$lease', 'm1'); COMMIT")
	assert_equal "$(field live "$out")" 0
	assert_equal "$(field holds "$out")" 0
	used_ok
}

@test "a request of several items is all or nothing" {
	local la out
	la=$(newid)
	acq mutex:aon-b "$(newid)" "$la" >/dev/null
	out=$(acq "mutex:aon-a,mutex:aon-b,mutex:aon-c" "$(newid)" "$(newid)")
	assert_equal "$(col outcome <<<"$out" | paste -sd,)" "busy,busy,busy"
	assert_equal "$(col state <<<"$out" | paste -sd,)" "ok,busy,ok"
	assert_equal "$(holds aon-a)/$(holds aon-b)/$(holds aon-c)" 0/1/0
	rel "$la" >/dev/null
	out=$(acq "mutex:aon-c,mutex:aon-a,mutex:aon-b" "$(newid)" "$(newid)")
	assert_equal "$(col outcome <<<"$out" | paste -sd,)" "granted,granted,granted"
	assert_equal "$(col resource <<<"$out" | paste -sd,)" "aon-a,aon-b,aon-c"
	assert_equal "$(sql "SELECT COUNT(DISTINCT grant_id), COUNT(*) FROM lr_holds")" "$(printf '1\t3')"
	used_ok
}

@test "the runtime account cannot read or write lockrun's tables, only call the procedures" {
	local t stmt
	for t in lr_holds lr_grants lr_resources lr_waiters; do
		for stmt in "SELECT * FROM $t" "DELETE FROM $t" \
			"INSERT INTO $t () VALUES ()" "UPDATE $t SET resource = resource"; do
			run -1 app "$stmt"
			assert_output --partial "ERROR 1142"
		done
	done
	# Not even a fake hold with a real-looking row.
	run -1 app "INSERT INTO lr_holds (resource, grant_id, permits, fence, expires_at)
		VALUES ('m1', 1, 1, 1, NOW() + INTERVAL 1 HOUR)"
	assert_output --partial "ERROR 1142"
	assert_equal "$(rows)" "$(printf '0\t0\t0\t0')"
	# What it is allowed: EXECUTE, and nothing on the tables.
	run app "SHOW GRANTS"
	assert_success
	# The role of sql/grant.sql, the account's default role; no grant on
	# the whole database (it would reach the internal routines). MySQL
	# names the role with its host, and lists what it grants as well.
	assert_output --regexp "GRANT \`lockrun_api\`(@\`%\`)? TO \`lockrun\`@\`%\`"
	refute_output --partial "ON \`lockrun\`.*"
	refute_output --partial "INSERT"
	refute_output --partial "DELETE"
	# Reading, only (MySQL) the Group Replication members, which
	# sql/grant.sql grants.
	output=$(grep -vx "GRANT SELECT ON \`performance_schema\`.\`replication_group_members\` TO \`lockrun\`@\`%\`" <<<"$output")
	refute_output --partial "SELECT"
}

@test "acquire is idempotent for the same lease id, and a new lease id is a new attempt" {
	local req lease out1 out2 out3
	req=$(newid) lease=$(newid)
	out1=$(acq mutex:idem "$req" "$lease")
	out2=$(acq mutex:idem "$req" "$lease")
	assert_equal "$(field outcome "$out2")" granted
	assert_equal "$(field grant_id "$out2")" "$(field grant_id "$out1")"
	assert_equal "$(field fence "$out2")" "$(field fence "$out1")"
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_grants")" 1
	assert_equal "$(sql "SELECT COUNT(*), SUM(permits) FROM lr_holds")" "$(printf '1\t1')"
	assert_equal "$(sql "SELECT CONCAT(used, ' ', fence) FROM lr_resources WHERE name = 'idem'")" "1 $(field fence "$out1")"
	# Same request, another lease: another attempt, busy behind our own grant.
	out3=$(acq mutex:idem "$req" "$(newid)")
	assert_equal "$(field outcome "$out3")" busy
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_grants")" 1
	used_ok
}

@test "busy, then queued, poll, granted in FIFO order for two SQL clients" {
	local ra la rb lb rc lc out
	ra=$(newid) la=$(newid) rb=$(newid) lb=$(newid) rc=$(newid) lc=$(newid)
	out=$(acq mutex:q "$ra" "$la")
	assert_equal "$(field outcome "$out")" granted

	# Without enqueue: busy, who holds it, and no waiter row.
	out=$(acq mutex:q "$rb" "$lb")
	assert_equal "$(field outcome "$out")" busy
	assert_equal "$(field state "$out")" busy
	assert_equal "$(field message "$out")" "'q' is busy"
	# Host, pid, account and how long held; never the command, which may
	# carry secrets.
	assert_equal "$(field holder "$out")" "apphost:4242 ($(app "SELECT USER()" | tail -n 1)), held 0s"
	assert_equal "$(field used "$out")/$(field capacity "$out")" 1/1
	assert_equal "$(waiters q)" 0

	# B queues first, then C: B is at the head, C waits for B.
	out=$(acq mutex:q "$rb" "$lb" 30000 1)
	assert_equal "$(field outcome "$out")" queued
	assert_equal "$(field at_head "$out")" 1
	assert_equal "$(field wait_for "$out")" NULL
	local tb
	tb=$(field ticket "$out")
	lc=$(newid)
	out=$(acq mutex:q "$rc" "$lc" 30000 1)
	assert_equal "$(field outcome "$out")" queued
	assert_equal "$(field at_head "$out")" 0
	assert_equal "$(field head "$out")" "$tb"
	assert_equal "$(field wait_for "$out")" "$(wait_name "$rb")"
	assert_equal "$(waiters q)" 2

	out=$(app "CALL lockrun_poll('$rb')")
	assert_equal "$(field at_head "$out")" 1
	assert_equal "$(field fits "$out")" 0
	assert_equal "$(field places "$out")" 1
	out=$(app "CALL lockrun_poll('$rc')")
	assert_equal "$(field at_head "$out")" 0
	assert_equal "$(field fits "$out")" 0
	local ahead
	ahead=$(field ahead_max "$out")
	((ahead >= 1)) || fail "ahead_max $ahead with B ahead of C"

	# The release hands the lock to B, the head, in its own transaction
	# (doc/sql-api.md, Hand-off): B's place is gone, and C, now at the
	# head, finds it held.
	rel "$la" >/dev/null
	out=$(app "CALL lockrun_poll('$rb')")
	assert_equal "$out" ""
	out=$(app "CALL lockrun_poll('$rc')")
	assert_equal "$(field at_head "$out")/$(field fits "$out")" 1/0
	out=$(acq mutex:q "$rc" "$(newid)" 30000 1)
	assert_equal "$(field outcome "$out")" busy
	assert_equal "$(field message "$out")" "'q' is busy"
	# Nor may a newcomer jump the queue.
	out=$(acq mutex:q "$(newid)" "$(newid)")
	assert_equal "$(field outcome "$out")" busy
	assert_equal "$(holds q)" 1

	# B's next acquire claims it.
	out=$(acq mutex:q "$rb" "$lb" 30000 1)
	assert_equal "$(field outcome "$out")" granted
	assert_equal "$(waiters q)" 1
	out=$(app "CALL lockrun_poll('$rc')")
	assert_equal "$(field at_head "$out")/$(field fits "$out")" 1/0
	# An attempt of a request that has its places: busy, places kept.
	out=$(acq mutex:q "$rc" "$lc" 30000 1)
	assert_equal "$(field outcome "$out")" busy
	assert_equal "$(field ticket "$out")" "$(sql "SELECT ticket FROM lr_waiters WHERE request_id = '$rc'")"
	assert_equal "$(field at_head "$out")" 1
	# B's release hands the lock to C under the lease C queued with, and
	# only that lease claims it.
	rel "$lb" >/dev/null
	run -1 acq mutex:q "$rc" "$(newid)" 30000 1
	assert_output --partial "ERROR 1644"
	assert_output --partial "claimed with the lease the request queued with"
	out=$(acq mutex:q "$rc" "$lc" 30000 1)
	assert_equal "$(field outcome "$out")" granted
	assert_equal "$(waiters q)" 0
	# Fences in grant order: A, B, C.
	run sql "SELECT GROUP_CONCAT(g.request_id ORDER BY h.fence) FROM lr_holds h
		JOIN lr_grants g ON g.id = h.grant_id WHERE h.resource = 'q'"
	assert_output "$lc"
	assert_equal "$(sql "SELECT GROUP_CONCAT(request_id ORDER BY id) FROM lr_grants WHERE request_id IN ('$la', '$lb', '$lc')")" "$la,$lb,$lc"
	used_ok
}

@test "a queued session holds its wake-up lock; dequeue leaves the queue and frees it" {
	local ra la rb out
	ra=$(newid) la=$(newid) rb=$(newid)
	acq mutex:wk "$ra" "$la" >/dev/null
	# One session: enqueue, then look at the named lock from inside it.
	run app "CALL lockrun_acquire('mutex:wk', '$rb', '$(newid)', 30000, 1, NULL, NULL, NULL, NULL);
		SELECT 'mine', IS_USED_LOCK('$(wait_name "$rb")') = CONNECTION_ID();
		CALL lockrun_dequeue('$rb');
		SELECT 'free', IS_FREE_LOCK('$(wait_name "$rb")')"
	assert_success
	assert_line --regexp '^queued'
	assert_line "$(printf 'mine\t1')"
	assert_line --regexp "^1\s+0\s+3$"
	assert_line "$(printf 'free\t1')"
	assert_equal "$(waiters wk)" 0
	out=$(app "CALL lockrun_dequeue('$rb')")
	assert_equal "$(field removed "$out")" 0
	assert_equal "$(field api "$out")" 3
	# A dequeued request has no places: poll answers no rows, sleep returns.
	out=$(app "CALL lockrun_poll('$rb')")
	assert_equal "$out" ""
	out=$(app "CALL lockrun_sleep('$rb', 30000)")
	assert_equal "$(field woken "$out")/$(field places "$out")" 1/0
}

@test "lockrun_sleep: the head waiter's sleep is woken by the release, at once if it could succeed" {
	local ra la rb lb out pid t0 t1
	ra=$(newid) la=$(newid) rb=$(newid) lb=$(newid)
	acq mutex:sl "$ra" "$la" >/dev/null
	acq mutex:sl "$rb" "$lb" 30000 1 >/dev/null
	# The head sleeps on its own connection for up to 30 s.
	(
		rc=0
		app "CALL lockrun_sleep('$rb', 30000)" || rc=$?
		echo "rc=$rc"
	) >"$BATS_TEST_TMPDIR/sleep" 2>&1 3>&- &
	pid=$!
	lr_wait_eq 1 sql "SELECT COUNT(*) FROM lr_waiters WHERE request_id = '$rb' AND wake_conn IS NOT NULL"
	lr_wait_eq 1 sql "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID =
		(SELECT wake_conn FROM lr_waiters WHERE request_id = '$rb') AND STATE = 'User sleep'"
	t0=${EPOCHREALTIME/[.,]/}
	out=$(rel "$la")
	assert_equal "$(field woken "$out")" 1
	lr_wait_for -t 5 grep -q '^rc=' "$BATS_TEST_TMPDIR/sleep"
	t1=${EPOCHREALTIME/[.,]/}
	wait "$pid"
	(((t1 - t0) < 5000000)) || fail "the sleep ended $(((t1 - t0) / 1000)) ms after the release"
	# Killed in SLEEP: on MariaDB the CALL ends with "query interrupted",
	# on MySQL SLEEP returns 1 (woken): either means woken.
	run cat "$BATS_TEST_TMPDIR/sleep"
	if lr_server_is_mysql; then
		assert_line --regexp '^1	1	3$'
		assert_line rc=0
	else
		assert_line --regexp '^ERROR 1317 '
		assert_line rc=1
	fi
	# Could succeed now: returns at once.
	t0=${EPOCHREALTIME/[.,]/}
	out=$(app "CALL lockrun_sleep('$rb', 30000)")
	t1=${EPOCHREALTIME/[.,]/}
	assert_equal "$(field woken "$out")" 1
	(((t1 - t0) < 5000000)) || fail "sleep took $(((t1 - t0) / 1000)) ms with the lock free"
	out=$(acq mutex:sl "$rb" "$lb" 30000 1)
	assert_equal "$(field outcome "$out")" granted
}

@test "a waiter that stops polling loses its place after 10 s plus the grace; polling keeps it" {
	local ra la rb rc out
	ra=$(newid) la=$(newid) rb=$(newid) rc=$(newid)
	acq mutex:hb "$ra" "$la" >/dev/null
	acq mutex:hb "$rb" "$(newid)" 30000 1 >/dev/null
	acq mutex:hb "$rc" "$(newid)" 30000 1 >/dev/null
	# A fresh place lasts 10 s.
	assert_equal "$(sql "SELECT TIMESTAMPDIFF(SECOND, UTC_TIMESTAMP(6), expires_at) BETWEEN 8 AND 10
		FROM lr_waiters WHERE request_id = '$rb'")" 1
	# Heartbeat: with 2 s left, a poll extends the place to 10 s from now.
	sql "UPDATE lr_waiters SET expires_at = UTC_TIMESTAMP(6) + INTERVAL 2 SECOND WHERE request_id = '$rc'"
	app "CALL lockrun_poll('$rc')" >/dev/null
	assert_equal "$(sql "SELECT expires_at > UTC_TIMESTAMP(6) + INTERVAL 8 SECOND
		FROM lr_waiters WHERE request_id = '$rc'")" 1
	# B last polled 16 s ago (its place expired 6 s ago, past the 5 s grace):
	# the next acquire sweeps it, and C, behind it, is now first.
	sql "UPDATE lr_waiters SET expires_at = UTC_TIMESTAMP(6) - INTERVAL 6 SECOND WHERE request_id = '$rb'"
	rel "$la" >/dev/null
	out=$(acq mutex:hb "$rc" "$(newid)" 30000 1)
	assert_equal "$(field outcome "$out")" granted
	assert_equal "$(app "CALL lockrun_poll('$rb')")" ""
	assert_equal "$(waiters hb)" 0
}

@test "lockrun_check inside a transaction: live with its fence, 0 after expiry, several holds" {
	local out gid lease fa
	lease=$(newid)
	ctl set chs 3
	# A ttl of 3 s: the checks below must see it live on a loaded machine.
	out=$(acq "mutex:cha,semaphore:chs:2" "$(newid)" "$lease" 3000)
	assert_equal "$(col resource <<<"$out" | paste -sd,)" "cha,chs"
	gid=$(field grant_id "$out")
	fa=$(field fence "$out")
	out=$(app "START TRANSACTION; CALL lockrun_check('$lease', NULL); COMMIT")
	assert_equal "$(field live "$out")" 1
	assert_equal "$(field holds "$out")" 2
	assert_equal "$(field fence "$out")" NULL
	out=$(app "START TRANSACTION; CALL lockrun_check('$lease', 'cha'); COMMIT")
	assert_equal "$(field live "$out")/$(field holds "$out")/$(field fence "$out")" "1/1/$fa"
	# Not renewed: no longer live once it ran out, although within the
	# grace the holds are still there (and renewable).
	sleep 3.3
	out=$(app "START TRANSACTION; CALL lockrun_check('$lease', NULL); COMMIT")
	assert_equal "$(field live "$out")" 0
	assert_equal "$(field holds "$out")" 2
	local left
	left=$(field remaining_ms "$out")
	((left <= 0)) || fail "remaining_ms $left after expiry"
	out=$(app "CALL lockrun_renew('$lease', 30000)")
	assert_equal "$(field holds "$out")/$(field renewed "$out")" 2/2
	out=$(app "START TRANSACTION; CALL lockrun_check('$lease', NULL); COMMIT")
	assert_equal "$(field live "$out")" 1
	# Past the grace, a renewal no longer counts: the lease is lost.
	sql "UPDATE lr_holds SET expires_at = UTC_TIMESTAMP(6) - INTERVAL 6 SECOND WHERE grant_id = $gid"
	out=$(app "CALL lockrun_renew('$lease', 30000)")
	assert_equal "$(field holds "$out")/$(field renewed "$out")" 2/0
	out=$(app "START TRANSACTION; CALL lockrun_check('$lease', 'chs'); COMMIT")
	assert_equal "$(field live "$out")" 0
}

@test "lockrun_check's share lock holds back the holder's renewal until the checking transaction ends" {
	local lease gid out pid
	lease=$(newid)
	out=$(acq mutex:shr "$(newid)" "$lease")
	gid=$(field grant_id "$out")
	# An application that checks, then dawdles 8 s before COMMIT.
	app "START TRANSACTION; CALL lockrun_check('$lease', 'shr'); SELECT SLEEP(8); COMMIT" \
		>/dev/null 2>&1 3>&- &
	pid=$!
	lr_wait_eq 1 sql "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = 'lockrun' AND INFO LIKE 'SELECT SLEEP(8)%'"
	# The renewal waits for the share lock: 2 s, then 1205 (CALL again).
	run -1 app "CALL lockrun_renew('$lease', 30000)"
	assert_output --partial "ERROR 1205"
	wait "$pid"
	out=$(app "CALL lockrun_renew('$lease', 30000)")
	assert_equal "$(field renewed "$out")" 1
}

@test "lockrun_settle after a lost answer: adopts an existing grant, tombstones a lease never run" {
	local req lease out gid fence
	req=$(newid) lease=$(newid)
	# The acquire committed, but (say) its answer was lost.
	out=$(acq mutex:st "$req" "$lease")
	gid=$(field grant_id "$out")
	fence=$(field fence "$out")
	out=$(app "CALL lockrun_settle('mutex:st', '$req', '$lease')")
	assert_equal "$(field outcome "$out")" granted
	assert_equal "$(field grant_id "$out")" "$gid"
	assert_equal "$(field fence "$out")" "$fence"
	assert_equal "$(field api "$out")" 3
	assert_equal "$(holds st)" 1
	rel "$lease" >/dev/null

	# Never reached the server (or not yet): settled as none, and a late
	# CALL with that lease can no longer grant.
	local req2 lease2
	req2=$(newid) lease2=$(newid)
	out=$(app "CALL lockrun_settle('mutex:st', '$req2', '$lease2')")
	assert_equal "$(field outcome "$out")" none
	assert_equal "$(field grant_id "$out")" NULL
	run -1 acq mutex:st "$req2" "$lease2"
	assert_output --partial "this lease id was used already"
	assert_equal "$(holds st)" 0
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_grants WHERE request_id = '$lease2' AND ended_at IS NOT NULL")" 1
	# A new lease id for the next attempt works.
	out=$(acq mutex:st "$req2" "$(newid)")
	assert_equal "$(field outcome "$out")" granted
	used_ok
}

@test "lockrun_settle of a queued request answers queued, keeps the place, and tombstones the lease" {
	local ra la rb lb out
	ra=$(newid) la=$(newid) rb=$(newid) lb=$(newid)
	acq mutex:stq "$ra" "$la" >/dev/null
	out=$(acq mutex:stq "$rb" "$lb" 30000 1)
	local ticket
	ticket=$(field ticket "$out")
	out=$(app "CALL lockrun_settle('mutex:stq', '$rb', '$lb')")
	assert_equal "$(field outcome "$out")" queued
	assert_equal "$(field ticket "$out")" "$ticket"
	assert_equal "$(waiters stq)" 1
	# Free now, and B at the head: the late CALL with the settled lease
	# would grant, and fails instead. A new lease id is granted.
	rel "$la" >/dev/null
	run -1 acq mutex:stq "$rb" "$lb" 30000 1
	assert_output --partial "this lease id was used already"
	assert_equal "$(holds stq)" 0
	out=$(acq mutex:stq "$rb" "$(newid)" 30000 1)
	assert_equal "$(field outcome "$out")" granted
}

@test "the procedures leave the caller's session settings as they were, also after an error" {
	local l iso=tx_isolation trx=@@in_transaction
	l=$(newid)
	# MySQL names the level transaction_isolation, and shows no account
	# without PROCESS whether it is in a transaction.
	if lr_server_is_mysql; then
		iso=transaction_isolation trx=0
	fi
	run env MYSQL_PWD="$(<"$LR_DB/lockrun.pw")" mariadb --no-defaults --skip-ssl-verify-server-cert -h 127.0.0.1 \
		-P "$LR_PORT" -u lockrun -D lockrun -B -N --force <<<"
		SET SESSION innodb_lock_wait_timeout = 37, SESSION $iso = 'SERIALIZABLE';
		CALL lockrun_acquire('mutex:sess', '$(newid)', '$l', 30000, 0, NULL, NULL, NULL, NULL);
		SELECT 'after', @@innodb_lock_wait_timeout, REPLACE(@@$iso, '-', ' '), $trx;
		CALL lockrun_acquire('bogus:x', '$(newid)', '$(newid)', 30000, 0, NULL, NULL, NULL, NULL);
		SELECT 'error', @@innodb_lock_wait_timeout, REPLACE(@@$iso, '-', ' '), $trx;
		CALL lockrun_release('$l', 'exited', 0, NULL);
		SELECT 'release', @@innodb_lock_wait_timeout, REPLACE(@@$iso, '-', ' '), $trx"
	assert_line --regexp '^granted'
	assert_line "$(printf 'after\t37\tSERIALIZABLE\t0')"
	assert_line --regexp '^ERROR 1644 \(45000\)'
	assert_line "$(printf 'error\t37\tSERIALIZABLE\t0')"
	assert_line "$(printf 'release\t37\tSERIALIZABLE\t0')"
}

# bad CALL: the CALL fails with SQLSTATE 45000 and a "lockrun:" message, and
# leaves every table as it was.
bad() {
	local before
	before=$(rows)
	run -1 app "$1"
	assert_line --regexp "^ERROR 1644 \(45000\) at line [0-9]+: lockrun"
	[[ -z ${2:-} ]] || assert_output --partial "$2"
	assert_equal "$(rows)" "$before"
}

@test "bad input: SQLSTATE 45000 with a clear message, and no row written" {
	local r l
	r=$(newid) l=$(newid)
	# Something to release and renew, so that no-op does not pass by luck.
	acq mutex:held "$(newid)" "$l" >/dev/null
	local hold
	hold=$(sql "SELECT * FROM lr_holds")
	local a="'$r', '$(newid)', 30000, 0, NULL, NULL, NULL, NULL"
	bad "CALL lockrun_acquire('bogus:x', $a)" kind
	bad "CALL lockrun_acquire('mutex:-x', $a)" name
	bad "CALL lockrun_acquire('mutex:a b', $a)" name
	bad "CALL lockrun_acquire('mutex:$(printf 'n%.0s' {1..65})', $a)" name
	bad "CALL lockrun_acquire('mutex:', $a)" name
	bad "CALL lockrun_acquire('', $a)"
	bad "CALL lockrun_acquire('semaphore:s:0', $a)" count
	bad "CALL lockrun_acquire('semaphore:s:1000001', $a)" count
	bad "CALL lockrun_acquire('semaphore:s:x', $a)" count
	bad "CALL lockrun_acquire('mutex:a,mutex:a', $a)"
	bad "CALL lockrun_acquire('$(seq -f 'mutex:m%g' -s, 65)', $a)"
	bad "CALL lockrun_acquire('mutex:m', 'xyz', '$(newid)', 30000, 0, NULL, NULL, NULL, NULL)"
	bad "CALL lockrun_acquire('mutex:m', '$r', '$(printf 'g%.0s' {1..32})', 30000, 0, NULL, NULL, NULL, NULL)"
	bad "CALL lockrun_acquire('mutex:m', '$r', NULL, 30000, 0, NULL, NULL, NULL, NULL)"
	bad "CALL lockrun_acquire('mutex:m', '$r', '$(newid)', 999, 0, NULL, NULL, NULL, NULL)" ttl
	bad "CALL lockrun_acquire('mutex:m', '$r', '$(newid)', 86400001, 0, NULL, NULL, NULL, NULL)" ttl
	bad "START TRANSACTION; CALL lockrun_acquire('mutex:m', $a)" transaction
	bad "CALL lockrun_renew('$l', 999)" ttl
	bad "CALL lockrun_renew('$l', 86400001)" ttl
	bad "CALL lockrun_renew('not-a-lease', 30000)"
	bad "CALL lockrun_release('$l', 'bored', 0, NULL)" reason
	bad "CALL lockrun_release('not-a-lease', 'exited', 0, NULL)"
	bad "CALL lockrun_settle('bogus:x', '$r', '$(newid)')" kind
	bad "CALL lockrun_poll('xyz')"
	bad "START TRANSACTION; CALL lockrun_release('$l', 'exited', 0, NULL)" transaction
	bad "START TRANSACTION; CALL lockrun_settle('mutex:held', '$r', '$(newid)')" transaction
	bad "START TRANSACTION; CALL lockrun_dequeue('$r')" transaction
	# The held lock is untouched by all of it: not renewed, not released.
	assert_equal "$(sql "SELECT * FROM lr_holds")" "$hold"
}

@test "invalid requests are an outcome with lockrun's message, not an error" {
	ctl set small 3
	local out
	out=$(acq semaphore:nosuch "$(newid)" "$(newid)")
	assert_equal "$(field outcome "$out")" invalid
	assert_equal "$(field message "$out")" "unknown semaphore 'nosuch'; create it with 'lockrunctl set nosuch CAPACITY'"
	out=$(acq semaphore:small:5 "$(newid)" "$(newid)")
	assert_equal "$(field outcome "$out")" invalid
	assert_equal "$(field message "$out")" "asked for 5 permits of semaphore 'small', whose capacity is 3"
	out=$(acq mutex:small "$(newid)" "$(newid)")
	assert_equal "$(field outcome "$out")" invalid
	assert_equal "$(field message "$out")" "'small' is a semaphore, not a mutex"
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_holds")" 0
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_grants")" 0
}

@test "used is the sum of live permits after grants, releases and an expired-hold sweep" {
	ctl set pool5 5
	local l1 l2 l3 out
	l1=$(newid) l2=$(newid) l3=$(newid)
	acq semaphore:pool5:2 "$(newid)" "$l1" >/dev/null
	acq semaphore:pool5:1 "$(newid)" "$l2" >/dev/null
	out=$(acq semaphore:pool5:1 "$(newid)" "$l3")
	assert_equal "$(field used "$out")/$(field capacity "$out")" 4/5
	assert_equal "$(sql "SELECT used FROM lr_resources WHERE name = 'pool5'")" 4
	used_ok
	out=$(acq semaphore:pool5:2 "$(newid)" "$(newid)")
	assert_equal "$(field outcome "$out")" busy
	assert_equal "$(field message "$out")" "'pool5' is busy (4/5 used)"
	rel "$l2" >/dev/null
	assert_equal "$(sql "SELECT used FROM lr_resources WHERE name = 'pool5'")" 3
	used_ok
	# The holder of 2 crashed 16 s ago: its hold is past the grace; the next
	# acquire sweeps it and counts its permits free.
	sql "UPDATE lr_holds h JOIN lr_grants g ON g.id = h.grant_id
		SET h.expires_at = UTC_TIMESTAMP(6) - INTERVAL 6 SECOND WHERE g.request_id = '$l1'"
	assert_equal "$(sql "SELECT used FROM lr_resources WHERE name = 'pool5'")" 3
	out=$(acq semaphore:pool5:4 "$(newid)" "$(newid)")
	assert_equal "$(field outcome "$out")" granted
	assert_equal "$(field used "$out")" 5
	assert_equal "$(sql "SELECT end_reason FROM lr_grants WHERE request_id = '$l1'")" expired
	assert_equal "$(sql "SELECT used FROM lr_resources WHERE name = 'pool5'")" 5
	used_ok
}

@test "an account without EXECUTE gets 1370, and reads and writes nothing" {
	sql "DROP USER IF EXISTS 'noexec'@'%'; CREATE USER 'noexec'@'%' IDENTIFIED BY 'noexec-pw'"
	run -1 env MYSQL_PWD=noexec-pw mariadb --no-defaults --skip-ssl-verify-server-cert -h 127.0.0.1 -P "$LR_PORT" -u noexec -B \
		-e "CALL lockrun.lockrun_acquire('mutex:ne', '$(newid)', '$(newid)', 30000, 0, NULL, NULL, NULL, NULL)"
	assert_output --partial "ERROR 1370"
	sql "DROP USER 'noexec'@'%'"
	assert_equal "$(rows)" "$(printf '0\t0\t0\t0')"
}

@test "read locks are shared, a write lock excludes them; a held key is key_busy and never queued" {
	local r1 r2 out
	r1=$(newid) r2=$(newid)
	out=$(acq read:rw "$(newid)" "$r1")
	assert_equal "$(field outcome "$out")" granted
	out=$(acq read:rw "$(newid)" "$r2")
	assert_equal "$(field outcome "$out")" granted
	assert_equal "$(field used "$out")" 2
	out=$(acq write:rw "$(newid)" "$(newid)")
	assert_equal "$(field outcome "$out")" busy
	rel "$r1" >/dev/null
	rel "$r2" >/dev/null
	local w
	w=$(newid)
	out=$(acq write:rw "$(newid)" "$w")
	assert_equal "$(field outcome "$out")" granted
	out=$(acq read:rw "$(newid)" "$(newid)")
	assert_equal "$(field outcome "$out")" busy
	rel "$w" >/dev/null

	out=$(acq key:nightly "$(newid)" "$(newid)")
	assert_equal "$(field outcome "$out")" granted
	assert_equal "$(field resource "$out")" id:nightly
	out=$(acq key:nightly "$(newid)" "$(newid)" 30000 1)
	assert_equal "$(field outcome "$out")" key_busy
	assert_equal "$(field message "$out")" "another run with --id 'nightly' is still going"
	assert_equal "$(waiters)" 0
}

@test "the waiter behind wakes from GET_LOCK(wait_for) when the request ahead is granted" {
	local ra la rb lb rc out pid
	ra=$(newid) la=$(newid) rb=$(newid) lb=$(newid) rc=$(newid)
	acq mutex:ch "$ra" "$la" >/dev/null
	# B's session: queue, wait 4 s, attempt again with the same lease
	# (granted by then: the release handed it to B), stay.
	app "CALL lockrun_acquire('mutex:ch', '$rb', '$lb', 30000, 1, NULL, NULL, NULL, NULL);
		SELECT SLEEP(4);
		CALL lockrun_acquire('mutex:ch', '$rb', '$lb', 30000, 1, NULL, NULL, NULL, NULL);
		SELECT SLEEP(30)" >"$BATS_TEST_TMPDIR/b" 2>&1 3>&- &
	pid=$!
	lr_wait_eq 1 waiters ch
	out=$(acq mutex:ch "$rc" "$(newid)" 30000 1)
	assert_equal "$(field wait_for "$out")" "$(wait_name "$rb")"
	run app "SELECT GET_LOCK('$(wait_name "$rb")', 0)"
	assert_line 0
	rel "$la" >/dev/null
	# Returns once B is granted, while B's session is still there.
	run app "SELECT GET_LOCK('$(wait_name "$rb")', 20), (SELECT 1)"
	assert_line "$(printf '1\t1')"
	kill -0 "$pid"
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_grants g JOIN lr_holds h ON h.grant_id = g.id
		WHERE g.request_id = '$lb'")" 1
	kill "$pid"
	wait "$pid" || true
	sql "KILL CONNECTION $(sql "SELECT ID FROM information_schema.PROCESSLIST WHERE INFO LIKE 'SELECT SLEEP(30)%'")" || true
}

@test "an expired hold counts as used for the 5 s grace; a busy attempt still keeps its sweep" {
	ctl set g2 2
	local l1 l2 out
	l1=$(newid) l2=$(newid)
	acq semaphore:g2:1 "$(newid)" "$l1" >/dev/null
	acq semaphore:g2:1 "$(newid)" "$l2" >/dev/null
	# l1 expired 2 s ago: within the grace, still used, still renewable.
	sql "UPDATE lr_holds h JOIN lr_grants g ON g.id = h.grant_id
		SET h.expires_at = UTC_TIMESTAMP(6) - INTERVAL 2 SECOND WHERE g.request_id = '$l1'"
	out=$(acq semaphore:g2:1 "$(newid)" "$(newid)")
	assert_equal "$(field outcome "$out")" busy
	assert_equal "$(holds g2)" 2
	# Past the grace: the next attempt sweeps it, even one that stays busy
	# (2 permits asked, 1 free after the sweep).
	sql "UPDATE lr_holds h JOIN lr_grants g ON g.id = h.grant_id
		SET h.expires_at = UTC_TIMESTAMP(6) - INTERVAL 6 SECOND WHERE g.request_id = '$l1'"
	out=$(acq semaphore:g2:2 "$(newid)" "$(newid)")
	assert_equal "$(field outcome "$out")" busy
	assert_equal "$(field message "$out")" "'g2' is busy (1/2 used)"
	assert_equal "$(holds g2)" 1
	assert_equal "$(sql "SELECT end_reason FROM lr_grants WHERE request_id = '$l1'")" expired
	out=$(app "CALL lockrun_renew('$l1', 30000)")
	assert_equal "$(field grant_id "$out")/$(field renewed "$out")" NULL/0
	used_ok
}

# A lockrun child that records "enter NAME 1 LEASE FENCE", runs until
# $BATS_TEST_TMPDIR/stop exists, then records leave.
until_stopped() {
	printf 'echo enter %s 1 $LOCKRUN_LEASE $LOCKRUN_FENCE >>%q; while [ ! -e %q ]; do sleep 0.05; done; echo leave %s 1 >>%q' \
		"$1" "$rec" "$BATS_TEST_TMPDIR/stop" "$1" "$rec"
}

@test "a lockrun job and an SQL client exclude each other, both ways" {
	local out pid
	# 1. lockrun holds: the SQL acquire is busy while the child runs.
	"$LOCKRUN" -x shared -- sh -c "$(until_stopped shared)" 3>&- &
	pid=$!
	lr_wait_for grep -q '^enter shared' "$rec"
	local lease fence
	read -r _ _ _ lease fence <"$rec"
	out=$(acq mutex:shared "$(newid)" "$(newid)")
	assert_equal "$(field outcome "$out")" busy
	# The child's LOCKRUN_LEASE is the secret an application checks with.
	out=$(app "START TRANSACTION; CALL lockrun_check('$lease', 'shared'); COMMIT")
	assert_equal "$(field live "$out")/$(field fence "$out")" "1/$fence"
	touch "$BATS_TEST_TMPDIR/stop"
	wait "$pid"
	assert_equal "$(rec_count "$rec" leave shared)" 1
	out=$(app "START TRANSACTION; CALL lockrun_check('$lease', 'shared'); COMMIT")
	assert_equal "$(field live "$out")" 0

	# 2. The SQL client holds: lockrun -n exits with the conflict status
	# and its command never runs.
	local sl
	sl=$(newid)
	out=$(acq mutex:shared "$(newid)" "$sl")
	assert_equal "$(field outcome "$out")" granted
	local sqlfence
	sqlfence=$(field fence "$out")
	((sqlfence > fence)) || fail "SQL fence $sqlfence after lockrun's $fence"
	rm -f "$BATS_TEST_TMPDIR/stop"
	run -75 "$LOCKRUN" -n -x shared -- sh -c "$(until_stopped shared)"
	assert_equal "$(rec_count "$rec" enter shared)" 1

	# 3. A waiting lockrun starts only after the SQL client released, with
	# the next fence.
	"$LOCKRUN" -x shared -- sh -c "$(until_stopped shared)" 3>&- &
	pid=$!
	lr_wait_eq 1 waiters shared
	sleep 0.5
	assert_equal "$(rec_count "$rec" enter shared)" 1
	rel "$sl" >/dev/null
	lr_wait_eq 2 rec_count "$rec" enter shared
	touch "$BATS_TEST_TMPDIR/stop"
	wait "$pid"
	local f3
	f3=$(awk '$1 == "enter" { f = $5 } END { print f }' "$rec")
	((f3 > sqlfence)) || fail "lockrun's fence $f3 after the SQL client's $sqlfence"
	assert_equal "$(rec_max "$rec" shared)" 1
	assert_equal "$(holds shared)" 0
	used_ok
}

# The Python example (contrib/sql-api-example.py) with the test server's
# runtime account.
example() {
	"$LR_SRC/contrib/sql-api-example.py" -c "$LOCKRUN_CONFIG" "$@"
}

need_pymysql() {
	/usr/bin/python3 -c 'import pymysql' 2>/dev/null ||
		skip "python3-pymysql is not installed (tests/run installs it)"
}

@test "the Python example takes the lock, renews, checks before COMMIT, releases; lockrun is kept out" {
	need_pymysql
	local pid
	# ttl 2 s, 4 s of work: only the background renewal keeps it live.
	example --ttl 2 --work 4 shared >"$BATS_TEST_TMPDIR/py" 2>&1 3>&- &
	pid=$!
	lr_wait_for grep -q '^granted' "$BATS_TEST_TMPDIR/py"
	run -75 "$LOCKRUN" -n -x shared -- sh -c "$(until_stopped shared)"
	assert_equal "$(rec_count "$rec" enter shared)" 0
	local rc=0
	wait "$pid" || rc=$?
	cat "$BATS_TEST_TMPDIR/py"
	assert_equal "$rc" 0
	run cat "$BATS_TEST_TMPDIR/py"
	assert_line --regexp '^renewed'
	assert_line --regexp '^checked: live, fence [0-9]+, committed$'
	assert_line 'released'
	assert_equal "$(holds shared)" 0
	assert_equal "$(sql "SELECT end_reason FROM lr_grants ORDER BY id DESC LIMIT 1")" exited
}

@test "the Python example waits in the queue behind lockrun, and gives up at its timeout" {
	need_pymysql
	local pid py
	"$LOCKRUN" -x shared -- sh -c "$(until_stopped shared)" 3>&- &
	pid=$!
	lr_wait_for grep -q '^enter shared' "$rec"
	run -75 example --timeout 1.5 shared
	assert_output --partial "timed out"
	refute_output --partial "granted"
	assert_equal "$(waiters shared)" 0

	# Queued behind the job, it gets in when the job ends.
	example --timeout 30 --work 0.2 shared >"$BATS_TEST_TMPDIR/py" 2>&1 3>&- &
	py=$!
	lr_wait_for grep -q '^queued' "$BATS_TEST_TMPDIR/py"
	assert_equal "$(waiters shared)" 1
	touch "$BATS_TEST_TMPDIR/stop"
	wait "$pid"
	local rc=0
	wait "$py" || rc=$?
	cat "$BATS_TEST_TMPDIR/py"
	assert_equal "$rc" 0
	grep -q '^granted' "$BATS_TEST_TMPDIR/py"
	assert_equal "$(holds shared)" 0
}

@test "the Python example stops with 76 when its lease is taken away, and commits nothing" {
	need_pymysql
	local pid rc=0
	example --ttl 3 --work 8 pylost >"$BATS_TEST_TMPDIR/py" 2>&1 3>&- &
	pid=$!
	lr_wait_for grep -q '^granted' "$BATS_TEST_TMPDIR/py"
	# An operator removes the hold; the next renewal (every ttl/3) sees it.
	sql "DELETE FROM lr_holds WHERE resource = 'pylost'"
	wait "$pid" || rc=$?
	cat "$BATS_TEST_TMPDIR/py"
	assert_equal "$rc" 76
	run cat "$BATS_TEST_TMPDIR/py"
	assert_line 'lost: a renewal found the lease gone'
	refute_line --partial committed
	assert_line released
	assert_equal "$(sql "SELECT CONCAT(end_reason, ' ', exit_status) FROM lr_grants ORDER BY id DESC LIMIT 1")" "aborted 76"
}

@test "only the lease id renews or releases a grant: another id, or the grant's number, changes nothing" {
	local req lease other out gid
	req=$(newid) lease=$(newid) other=$(newid)
	out=$(acq mutex:cap1 "$req" "$lease" 5000)
	gid=$(field grant_id "$out")
	assert_equal "$(field outcome "$out")" granted
	out=$(app "CALL lockrun_renew('$other', 60000)")
	assert_equal "$(field renewed "$out")" 0
	out=$(rel "$other")
	assert_equal "$(field released "$out")" 0
	# The public grant number is not a lease id.
	out=$(rel "$(printf '%032d' "$gid")")
	assert_equal "$(field released "$out")" 0
	run -1 rel "$gid"
	assert_output --partial "lease must be 32 lowercase hex digits"
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_holds WHERE grant_id = $gid")" 1
	assert_equal "$(sql "SELECT expires_at < UTC_TIMESTAMP(6) + INTERVAL 10 SECOND FROM lr_holds WHERE grant_id = $gid")" 1
	assert_equal "$(sql "SELECT ended_at IS NULL FROM lr_grants WHERE id = $gid")" 1
	# No lease at all: the release is only prepared, nothing is released.
	out=$(app "CALL lockrun_release(NULL, NULL, NULL, NULL)")
	assert_equal "$(field released "$out")" 0
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_holds WHERE grant_id = $gid")" 1
	assert_equal "$(sql "SELECT ended_at IS NULL FROM lr_grants WHERE id = $gid")" 1
	out=$(rel "$lease")
	assert_equal "$(field released "$out")" 1
}

@test "a renewal under snapshot isolation is not failed by a hold changed after its first read (1020)" {
	local r l gid out
	if lr_server_is_mysql; then
		skip "MySQL has no innodb_snapshot_isolation (MariaDB 11.6 and later)"
	fi
	r=$(newid) l=$(newid)
	acq mutex:snap "$r" "$l" >/dev/null
	gid=$(sql "SELECT id FROM lr_grants WHERE request_id = '$l'")
	# The hold row is locked while the renewal starts; then it is changed
	# and committed, after the renewal's transaction read the grant but
	# before its UPDATE of the hold, as a check on Galera or a claim would.
	sql "START TRANSACTION; SELECT 1 FROM lr_holds WHERE grant_id = $gid FOR UPDATE;
		DO SLEEP(1); UPDATE lr_holds SET checks = checks + 1 WHERE grant_id = $gid; COMMIT" \
		>/dev/null 3>&- &
	local locker=$!
	sleep 0.3
	run app "SET SESSION innodb_snapshot_isolation = ON; CALL lockrun_renew('$l', 30000)"
	wait "$locker"
	assert_success
	assert_equal "$(field renewed "$output")" 1
	assert_equal "$(sql "SELECT checks FROM lr_holds WHERE grant_id = $gid")" 1
	rel "$l" >/dev/null
}

@test "release answers ended: NULL for its own end (also when called again), why for a grant swept or released by force before it" {
	local l out gid
	l=$(newid)
	out=$(acq mutex:ended-own "$(newid)" "$l")
	assert_equal "$(field outcome "$out")" granted
	out=$(rel "$l")
	assert_equal "$(field released "$out") $(field ended "$out")" "1 NULL"
	out=$(rel "$l")
	assert_equal "$(field released "$out") $(field ended "$out")" "0 NULL"
	# Released by force while it ran: the release says by whom and why,
	# and keeps the force release as the grant's end.
	l=$(newid)
	out=$(acq mutex:ended-force "$(newid)" "$l")
	gid=$(field grant_id "$out")
	ctl release "$gid" --reason "a test"
	out=$(rel "$l")
	assert_equal "$(field released "$out")" 0
	assert_equal "$(field ended "$out")" "released by force by root@localhost ($(id -un)@$(hostname)): a test"
	assert_equal "$(sql "SELECT CONCAT(end_reason, ':', exit_status) FROM lr_grants WHERE id = $gid")" "force_released:0"
	# Swept as expired: said so.
	l=$(newid)
	out=$(acq mutex:ended-swept "$(newid)" "$l" 1000)
	gid=$(field grant_id "$out")
	sql "UPDATE lr_holds SET expires_at = UTC_TIMESTAMP(6) - INTERVAL 10 SECOND WHERE grant_id = $gid"
	ctl sweep
	out=$(rel "$l")
	assert_equal "$(field ended "$out")" "swept: its lease had expired"
}
