#!/usr/bin/env bats
#
# The release's hand-off (migration 5): a release that frees room grants
# the head of the queue inside its own transaction, and the waiter's next
# acquire only claims that grant. Driven with the mariadb client as the
# runtime account; judged from the rows (read as the admin), the answers,
# and a lockrun child's own environment.

load helpers/common
load helpers/sqlapi

bats_require_minimum_version 1.5.0

# handed REQUEST: the id of the live grant handed to REQUEST, if any.
handed() {
	sql "SELECT id FROM lr_grants WHERE queued_as = '$1' AND ended_at IS NULL"
}

@test "a release grants the head waiter in its own transaction; the waiter's acquire claims it, renewed" {
	local ra la rb lb out fa gid fence
	ra=$(newid) la=$(newid) rb=$(newid) lb=$(newid)
	out=$(acq mutex:h1 "$ra" "$la")
	fa=$(field fence "$out")
	out=$(acq mutex:h1 "$rb" "$lb" 20000 1)
	assert_equal "$(field outcome "$out")" queued
	assert_equal "$(sql "SELECT lease = '$lb' AND ttl_ms = 20000 FROM lr_waiters WHERE request_id = '$rb'")" 1

	out=$(rel "$la")
	assert_equal "$(field released "$out")" 1
	# Before B says anything: granted to B's lease, B's place is gone,
	# the fence is A's + 1, and the log has B's owner and wait.
	gid=$(handed "$rb")
	[[ -n $gid ]] || fail "no grant handed to B"
	assert_equal "$(sql "SELECT request_id FROM lr_grants WHERE id = $gid")" "$lb"
	assert_equal "$(waiters h1)" 0
	assert_equal "$(holds h1)" 1
	fence=$(sql "SELECT fence FROM lr_holds WHERE grant_id = $gid")
	assert_equal "$fence" "$((fa + 1))"
	assert_equal "$(sql "SELECT CONCAT(host, ':', pid, ' ', os_user, ' ', db_user <> '', ' ',
		requested_at < acquired_at, ' ', ttl_ms) FROM lr_grants WHERE id = $gid")" \
		"apphost:4242 tester 1 1 20000"
	assert_equal "$(sql "SELECT CONCAT(resource, ' ', kind, ' ', permits, ' ', fence)
		FROM lr_grant_items WHERE grant_id = $gid")" "h1 mutex 1 $fence"
	# B's poll sees no places left: attempt now.
	out=$(app "CALL lockrun_poll('$rb')")
	assert_equal "$(col resource <<<"$out" | wc -l)" 0

	sleep 1.1
	local before
	before=$(sql "SELECT UTC_TIMESTAMP(6)")
	out=$(acq mutex:h1 "$rb" "$lb" 20000 1)
	assert_equal "$(field outcome "$out")" granted
	assert_equal "$(field grant_id "$out")" "$gid"
	assert_equal "$(field fence "$out")" "$fence"
	assert_equal "$(field resource "$out")" h1
	# Renewed by the claim: 20 s from the claim (which came after
	# "before"), not from the hand-off (1.1 s before it), however long
	# this check takes on a loaded machine.
	assert_equal "$(sql "SELECT TIMESTAMPDIFF(MICROSECOND, '$before', expires_at) >= 20000000
		FROM lr_holds WHERE grant_id = $gid")" 1
	# Claimed twice: the same grant.
	out=$(acq mutex:h1 "$rb" "$lb" 20000 1)
	assert_equal "$(field grant_id "$out")" "$gid"
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_grants WHERE queued_as = '$rb'")" 1
	rel "$lb" >/dev/null
	assert_equal "$(holds h1)" 0
	used_ok
}

@test "a semaphore's release hands its permits to as many waiters as fit, in queue order" {
	local ra la out r1 l1 r2 l2 r3 l3 f1 f2
	ctl set hs2 3
	ra=$(newid) la=$(newid)
	out=$(acq semaphore:hs2:2 "$ra" "$la")
	assert_equal "$(field outcome "$out")" granted
	out=$(acq semaphore:hs2 "$(newid)" "$(newid)")
	assert_equal "$(field outcome "$out")" granted
	r1=$(newid) l1=$(newid) r2=$(newid) l2=$(newid) r3=$(newid) l3=$(newid)
	assert_equal "$(field outcome "$(acq semaphore:hs2 "$r1" "$l1" 30000 1)")" queued
	assert_equal "$(field outcome "$(acq semaphore:hs2 "$r2" "$l2" 30000 1)")" queued
	assert_equal "$(field outcome "$(acq semaphore:hs2:2 "$r3" "$l3" 30000 1)")" queued

	# Two permits freed: the first two waiters fit, the third (2) waits.
	rel "$la" >/dev/null
	[[ -n $(handed "$r1") && -n $(handed "$r2") ]] || fail "not handed to both"
	assert_equal "$(handed "$r3")" ""
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_waiters WHERE request_id = '$r3'")" 1
	assert_equal "$(sql "SELECT used FROM lr_resources WHERE name = 'hs2'")" 3
	f1=$(sql "SELECT fence FROM lr_holds WHERE grant_id = $(handed "$r1")")
	f2=$(sql "SELECT fence FROM lr_holds WHERE grant_id = $(handed "$r2")")
	((f1 < f2)) || fail "fences $f1 $f2 not in queue order"
	used_ok
}

@test "dequeue gives back a grant handed to a request that left, and hands it on" {
	local ra la rb lb rc lc out gb
	ra=$(newid) la=$(newid) rb=$(newid) lb=$(newid) rc=$(newid) lc=$(newid)
	acq mutex:h3 "$ra" "$la" >/dev/null
	assert_equal "$(field outcome "$(acq mutex:h3 "$rb" "$lb" 30000 1)")" queued
	assert_equal "$(field outcome "$(acq mutex:h3 "$rc" "$lc" 30000 1)")" queued
	rel "$la" >/dev/null
	gb=$(handed "$rb")
	[[ -n $gb ]] || fail "not handed to B"

	# B gives up without ever claiming it.
	out=$(app "CALL lockrun_dequeue('$rb')")
	assert_equal "$(field removed "$out")" 0
	assert_equal "$(field returned "$out")" 1
	assert_equal "$(sql "SELECT end_reason FROM lr_grants WHERE id = $gb")" aborted
	# ... and C, next in line, has it now.
	[[ -n $(handed "$rc") ]] || fail "not handed on to C"
	assert_equal "$(holds h3)" 1
	out=$(acq mutex:h3 "$rc" "$lc" 30000 1)
	assert_equal "$(field outcome "$out")" granted
	used_ok
}

@test "a handed grant not claimed within its ttl plus the grace is ended, and the late claim fails" {
	local ra la rb lb out gid
	ra=$(newid) la=$(newid) rb=$(newid) lb=$(newid)
	acq mutex:h4 "$ra" "$la" >/dev/null
	assert_equal "$(field outcome "$(acq mutex:h4 "$rb" "$lb" 1000 1)")" queued
	rel "$la" >/dev/null
	gid=$(handed "$rb")
	[[ -n $gid ]] || fail "not handed to B"
	sleep 6.3
	run app "CALL lockrun_acquire('mutex:h4', '$rb', '$lb', 1000, 1, 'h', 1, 'u', 'c')"
	assert_failure
	assert_output --partial "expired before it was claimed; queue again with a new lease id"
	assert_equal "$(sql "SELECT end_reason FROM lr_grants WHERE id = $gid")" lost
	assert_equal "$(holds h4)" 0
	out=$(acq mutex:h4 "$(newid)" "$(newid)")
	assert_equal "$(field outcome "$out")" granted
	used_ok
}

@test "requests of several items, and once items, are woken to acquire, not handed" {
	local ra la rb lb rc lc out
	ra=$(newid) la=$(newid) rb=$(newid) lb=$(newid) rc=$(newid) lc=$(newid)
	acq mutex:h5,mutex:h6 "$ra" "$la" >/dev/null
	assert_equal "$(field outcome "$(acq mutex:h5,mutex:h6 "$rb" "$lb" 30000 1)")" queued
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_waiters WHERE request_id = '$rb' AND lease IS NULL")" 2
	rel "$la" >/dev/null
	assert_equal "$(handed "$rb")" ""
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_waiters WHERE request_id = '$rb'")" 2
	out=$(acq mutex:h5,mutex:h6 "$rb" "$lb" 30000 1)
	assert_equal "$(field outcome "$out")" granted
	rel "$lb" >/dev/null

	ra=$(newid) la=$(newid)
	acq once:h7:3600000 "$ra" "$la" >/dev/null
	assert_equal "$(field outcome "$(acq once:h7:3600000 "$rc" "$lc" 30000 1)")" queued
	assert_equal "$(sql "SELECT lease IS NULL FROM lr_waiters WHERE request_id = '$rc'")" 1
	app "CALL lockrun_release('$la', 'exited', 1, NULL)" >/dev/null
	assert_equal "$(handed "$rc")" ""
	used_ok
}

@test "a lockrun waiter is handed the lock by an SQL client's release, and runs with the next fence" {
	local ra la out fa pid
	ra=$(newid) la=$(newid)
	out=$(acq mutex:h8 "$ra" "$la")
	fa=$(field fence "$out")
	"$LOCKRUN" -x h8 -- sh -c 'echo "$LOCKRUN_FENCE" >"$1"' sh "$BATS_TEST_TMPDIR/fence" &
	pid=$!
	until [[ $(waiters h8) == 1 ]]; do sleep 0.05; done
	rel "$la" >/dev/null
	wait "$pid"
	assert_equal "$(cat "$BATS_TEST_TMPDIR/fence")" "$((fa + 1))"
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_grants g JOIN lr_grant_items i ON i.grant_id = g.id
		WHERE i.resource = 'h8' AND g.queued_as IS NOT NULL AND g.end_reason = 'exited'")" 1
	assert_equal "$(holds h8)" 0
}

# stopped_past_handoff NAME: a lockrun waiter on mutex NAME, stopped
# (SIGSTOP) while a release hands it the grant, which then runs out
# unclaimed (the hold lives as long as the place did, 10 s, plus the
# grace). Sets pid (still stopped) and gid (the handed grant).
stopped_past_handoff() {
	local ra la
	ra=$(newid) la=$(newid)
	acq "mutex:$1" "$ra" "$la" >/dev/null
	"$LOCKRUN" -v -x "$1" -- sh -c 'echo ran >"$1"' sh "$BATS_TEST_TMPDIR/ran" \
		3>&- 2>"$BATS_TEST_TMPDIR/log" &
	pid=$!
	until [[ $(waiters "$1") == 1 ]]; do sleep 0.05; done
	kill -STOP "$pid"
	rel "$la" >/dev/null
	gid=$(sql "SELECT g.id FROM lr_grants g JOIN lr_grant_items i ON i.grant_id = g.id
		WHERE i.resource = '$1' AND g.queued_as IS NOT NULL")
	[[ -n $gid ]] || { kill -CONT "$pid"; fail "not handed to the waiter"; }
	lr_wait_eq -t 20 1 sql "SELECT expires_at < UTC_TIMESTAMP(6) - INTERVAL 5 SECOND
		FROM lr_holds WHERE grant_id = $gid"
}

# resumed_and_ran NAME WHY: the stopped waiter goes on, queues again under
# a new lease, runs once, says WHY at -v, and leaves NAME free.
resumed_and_ran() {
	kill -CONT "$pid"
	wait "$pid"
	assert_equal "$(cat "$BATS_TEST_TMPDIR/ran")" ran
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_grants g JOIN lr_grant_items i ON i.grant_id = g.id
		WHERE i.resource = '$1' AND g.end_reason = 'exited' AND g.id > $gid")" 1
	run cat "$BATS_TEST_TMPDIR/log"
	assert_output --partial "$2"
	assert_equal "$(holds "$1")" 0
}

@test "a lockrun waiter stopped until its handed grant ran out queues again under a new lease, and runs" {
	local pid gid
	stopped_past_handoff h9
	resumed_and_ran h9 "expired before it was claimed"
	assert_equal "$(sql "SELECT end_reason FROM lr_grants WHERE id = $gid")" lost
}

@test "a lockrun waiter stopped until its handed grant was swept queues again under a new lease, and runs" {
	local pid gid
	stopped_past_handoff h12
	# A sweep ends it while the waiter is still stopped: its lease id is
	# spent, as a grant's id is never given twice.
	"$LOCKRUNCTL" -q -c "$LR_ADMIN_CONFIG" sweep
	assert_equal "$(sql "SELECT end_reason FROM lr_grants WHERE id = $gid")" expired
	resumed_and_ran h12 "this lease id was used already"
}

@test "a release rings only the connection that holds the request's doorbell lock, never one that took its id" {
	local ra la rb lb rc lc out conn
	ra=$(newid) la=$(newid) rb=$(newid) lb=$(newid) rc=$(newid) lc=$(newid)
	acq mutex:h10 "$ra" "$la" >/dev/null
	acq mutex:h11 "$(newid)" "$(newid)" >/dev/null
	assert_equal "$(field outcome "$(acq mutex:h10 "$rb" "$lb" 30000 1)")" queued
	assert_equal "$(field outcome "$(acq mutex:h11 "$rc" "$lc" 30000 1)")" queued
	# C sleeps, on its own doorbell connection, in another queue.
	app "CALL lockrun_sleep('$rc', 20000)" >"$BATS_TEST_TMPDIR/c" 2>&1 3>&- &
	lr_wait_eq 1 sql "SELECT COUNT(*) FROM lr_waiters WHERE request_id = '$rc' AND wake_conn IS NOT NULL"
	conn=$(sql "SELECT wake_conn FROM lr_waiters WHERE request_id = '$rc'")
	lr_wait_eq 1 sql "SELECT COUNT(*) FROM information_schema.PROCESSLIST
		WHERE ID = $conn AND STATE = 'User sleep'"
	# B's registration names C's connection, as a stale one would after
	# a restart gave its id to someone else.
	sql "UPDATE lr_waiters SET wake_conn = $conn WHERE request_id = '$rb'"
	out=$(rel "$la")
	assert_equal "$(field woken "$out")" 0
	[[ -n $(handed "$rb") ]] || fail "not handed to B"
	# C sleeps on, untouched.
	sleep 0.5
	assert_equal "$(sql "SELECT COUNT(*) FROM information_schema.PROCESSLIST
		WHERE ID = $conn AND STATE = 'User sleep'")" 1
	sql "KILL $conn"
	wait
}
