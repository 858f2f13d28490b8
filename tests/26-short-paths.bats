#!/usr/bin/env bats
#
# The short ways through lockrun_acquire and lockrun_release (the common
# acquire: one item, its row there, free, nobody queued, nothing to sweep,
# no fail-over; the common enqueue: the same, but busy, and the request
# not queued yet; the common release: one hold, nobody queued) and the
# general way they hand everything else to. Which way a call took is seen
# from the caller's session: the short release calls two routines
# (lr_enter, the server seam's lr_server_state in it), the short acquire
# the seam once more (the server's name), the short enqueue five more than
# that (lr_enqueue twice: once only to load it before the resource row is
# locked, then under the lock; its lr_leave, lr_wait_lock and its
# lr_lock_name), so the CALL statements of the session
# (Com_call_procedure) grow by 3, 4 and 9; the general way calls more.
# Every case also checks what was decided and written, as the admin reads
# the rows. Resource names start with sp- (the server is shared with the
# other files).

load helpers/common
load helpers/sqlapi

bats_require_minimum_version 1.5.0

setup() {
	# The minute after `lockrunctl init` takes the general way (lr_fresh):
	# put it behind us.
	sql "UPDATE lr_routines SET applied_at = UTC_TIMESTAMP(6) - INTERVAL 2 MINUTE WHERE name = 'procedures'"
}

teardown() {
	sql "UPDATE lr_epoch SET quarantine_until = LEAST(quarantine_until, UTC_TIMESTAMP(6)) WHERE id = 1"
	[[ ! -s $BATS_TEST_TMPDIR/floor ]] ||
		sql "UPDATE lr_epoch SET fence_floor = $(<"$BATS_TEST_TMPDIR/floor") WHERE id = 1"
}

# counted SQL: run SQL as the application account, then print the answer's
# column $COL (first row) and how many CALL statements the session ran.
counted() {
	local out
	out=$(app "$1; SHOW SESSION STATUS LIKE 'Com_call_procedure'")
	printf '%s %s\n' "$(head -n 2 <<<"$out" | col "${COL:-outcome}")" "$(tail -n 1 <<<"$out" | cut -f 2)"
}

# take ITEMS LEASE: an acquire with a new request id; prints "OUTCOME CALLS".
take() {
	counted "CALL lockrun_acquire('$1', '$(newid)', '$2', 30000, 0, 'sphost', 7, 'tester', 'sp test')"
}

give() {
	COL=released counted "CALL lockrun_release('$1', 'exited', 0, NULL)"
}

# queue ITEMS REQUEST LEASE: an acquire that may queue; prints "OUTCOME CALLS".
queue() {
	counted "CALL lockrun_acquire('$1', '$2', '$3', 30000, 1, 'sphost', 7, 'tester', 'sp test')"
}

# asked ITEMS REQUEST LEASE: the same acquire; prints its answer's row, the
# wake-up lock's holder (1: this session) and the session's CALL count,
# one a line, the row with the resource's name as R and the hold's age as
# held Ns (so two answers compare).
asked() {
	local out
	out=$(app "CALL lockrun_acquire('$1', '$2', '$3', 30000, 1, 'sphost', 7, 'tester', 'sp test');
		SELECT COALESCE(IS_USED_LOCK('$(wait_name "$2")') = CONNECTION_ID(), 0) AS held;
		SHOW SESSION STATUS LIKE 'Com_call_procedure'")
	sed -n 2p <<<"$out" | sed -E "s/'?${1#*:}'?/R/g; s/held [0-9]+s/held Ns/"
	sed -n 4p <<<"$out"
	sed -n 6p <<<"$out" | cut -f 2
}

# place REQUEST: the columns of REQUEST's queue place that its acquire
# writes, and the resource row's ticket.
place() {
	sql "SELECT CONCAT_WS(' ', w.ticket, w.permits, w.host, w.pid, w.os_user, w.command,
		TIMESTAMPDIFF(MICROSECOND, w.since, w.expires_at), w.lease IS NOT NULL, w.ttl_ms,
		w.db_user LIKE 'lockrun@%', w.host_behind,
		w.wake_conn IS NULL, r.ticket)
		FROM lr_waiters w JOIN lr_resources r ON r.name = w.resource WHERE w.request_id = '$1'"
}

# prime ITEM: its resource row made (a grant and its release), free.
prime() {
	local l
	l=$(newid)
	take "$1" "$l" >/dev/null
	give "$l" >/dev/null
}

@test "the common acquire and release take the short way and write what the general way writes" {
	local l1 l2 l3
	l1=$(newid) l2=$(newid) l3=$(newid)
	# The row does not exist yet: the general way creates it.
	run take mutex:sp-m "$l1"
	assert_output --regexp '^granted ([6-9]|[1-9][0-9])$'
	run give "$l1"
	assert_output "1 3"
	# Now it exists and is free: the short way.
	run take mutex:sp-m "$l2"
	assert_output "granted 4"
	# Two items: the general way, which writes the same columns.
	run take mutex:sp-m2,mutex:sp-m3 "$l3"
	assert_output --regexp '^granted ([6-9]|[1-9][0-9])$'
	run sql "SELECT host, pid, os_user, db_user, command, ttl_ms, requested_at = acquired_at,
		idem_key IS NULL, once_window IS NULL, queued_as IS NULL, claimed_at IS NULL
		FROM lr_grants WHERE request_id IN ('$l2', '$l3') ORDER BY id"
	assert_equal "${lines[0]}" "${lines[1]}"
	assert_equal "$(sql "SELECT CONCAT(h.permits, ' ', h.fence, ' ', i.kind, ' ', i.fence,
		' ', TIMESTAMPDIFF(SECOND, g.acquired_at, h.expires_at), ' ', r.used, ' ', r.fence)
		FROM lr_grants g JOIN lr_holds h ON h.grant_id = g.id
		JOIN lr_grant_items i ON i.grant_id = g.id AND i.resource = h.resource
		JOIN lr_resources r ON r.name = h.resource WHERE g.request_id = '$l2'")" "1 2 mutex 2 30 1 2"
	run give "$l2"
	assert_output "1 3"
	assert_equal "$(sql "SELECT CONCAT(end_reason, ' ', exit_status, ' ', ended_at IS NOT NULL)
		FROM lr_grants WHERE request_id = '$l2'")" "exited 0 1"
	assert_equal "$(sql "SELECT used FROM lr_resources WHERE name = 'sp-m'")" 0
	give "$l3" >/dev/null
}

@test "a mutex whose used was set to 0 under a live hold: the general way answers busy and mends the count" {
	local l1 l2
	l1=$(newid) l2=$(newid)
	take mutex:sp-drift "$l1" >/dev/null
	sql "UPDATE lr_resources SET used = 0 WHERE name = 'sp-drift'"
	run take mutex:sp-drift "$l2"
	assert_output --regexp '^busy ([6-9]|[1-9][0-9])$'
	assert_equal "$(sql "SELECT used FROM lr_resources WHERE name = 'sp-drift'")" 1
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_grants WHERE request_id = '$l2'")" 0
	give "$l1" >/dev/null
}

@test "write and read locks, keys and semaphores with a count take the short way" {
	local w r k1 k2 s1 s2 s3
	w=$(newid) r=$(newid) k1=$(newid) k2=$(newid) s1=$(newid) s2=$(newid) s3=$(newid)
	# First use of each row goes the general way; from then on the short one.
	prime write:sp-rw
	run take write:sp-rw "$w"
	assert_output "granted 4"
	assert_equal "$(sql "SELECT CONCAT(permits, ' ', used) FROM lr_holds h JOIN lr_resources r
		ON r.name = h.resource WHERE h.resource = 'sp-rw'")" "2147483647 2147483647"
	# A reader behind the writer is busy (the general way says why).
	run take read:sp-rw "$r"
	assert_output --regexp '^busy '
	give "$w" >/dev/null
	run take read:sp-rw "$r"
	assert_output "granted 4"
	give "$r" >/dev/null
	# A key: its row is id:KEY, the lock log keeps the key.
	prime key:sp-k
	run take key:sp-k "$k1"
	assert_output "granted 4"
	assert_equal "$(sql "SELECT CONCAT(h.resource, ' ', g.idem_key) FROM lr_grants g
		JOIN lr_holds h ON h.grant_id = g.id WHERE g.request_id = '$k1'")" "id:sp-k sp-k"
	run take key:sp-k "$k2"
	assert_output --regexp '^key_busy '
	give "$k1" >/dev/null
	# A semaphore of 3: 2 permits, then 2 more do not fit.
	ctl set sp-sem 3
	run take semaphore:sp-sem:2 "$s1"
	assert_output "granted 4"
	run take semaphore:sp-sem:2 "$s2"
	assert_output --regexp '^busy '
	run take semaphore:sp-sem:1 "$s3"
	assert_output "granted 4"
	assert_equal "$(sql "SELECT used FROM lr_resources WHERE name = 'sp-sem'")" 3
	give "$s1" >/dev/null
	give "$s3" >/dev/null
	assert_equal "$(sql "SELECT used FROM lr_resources WHERE name = 'sp-sem'")" 0
	# More than the capacity, or a count out of range: the general way's errors.
	run take semaphore:sp-sem:4 "$(newid)"
	assert_output --regexp '^invalid '
	run app "CALL lockrun_acquire('semaphore:sp-sem:1000001', '$(newid)', '$(newid)', 30000, 0, 'h', 1, 'u', 'c')"
	assert_failure
	assert_output --partial "invalid count '1000001'"
}

@test "a hold past its grace on a semaphore: the general way sweeps it before it grants" {
	local a b
	a=$(newid) b=$(newid)
	ctl set sp-sweep 2
	take semaphore:sp-sweep:1 "$a" >/dev/null
	sql "UPDATE lr_holds h JOIN lr_grants g ON g.id = h.grant_id
		SET h.expires_at = UTC_TIMESTAMP(6) - INTERVAL 10 SECOND WHERE g.request_id = '$a'"
	run take semaphore:sp-sweep:1 "$b"
	assert_output --regexp '^granted ([6-9]|[1-9][0-9])$'
	assert_equal "$(sql "SELECT end_reason FROM lr_grants WHERE request_id = '$a'")" expired
	assert_equal "$(sql "SELECT used FROM lr_resources WHERE name = 'sp-sweep'")" 1
	give "$b" >/dev/null
}

@test "nobody queued: a waiter's place sends the acquire the general way, and its release hands on" {
	local h q
	h=$(newid) q=$(newid)
	prime mutex:sp-q
	run take mutex:sp-q "$h"
	assert_output "granted 4"
	# A waiter with a lease (enqueue = 1): the release hands the lock to it.
	run app "CALL lockrun_acquire('mutex:sp-q', '$(newid)', '$q', 30000, 1, 'h', 1, 'u', 'c')"
	assert_output --partial queued
	run give "$h"
	assert_output --regexp '^1 ([5-9]|[1-9][0-9])$'
	assert_equal "$(sql "SELECT g.request_id FROM lr_holds h JOIN lr_grants g ON g.id = h.grant_id
		WHERE h.resource = 'sp-q'")" "$q"
	give "$q" >/dev/null
}

@test "a lease used before: granted and live is the same grant again; ended is refused" {
	local l g
	l=$(newid)
	prime mutex:sp-again
	take mutex:sp-again "$l" >/dev/null
	g=$(sql "SELECT id FROM lr_grants WHERE request_id = '$l'")
	give "$l" >/dev/null
	run app "CALL lockrun_acquire('mutex:sp-again', '$(newid)', '$l', 30000, 0, 'h', 1, 'u', 'c')"
	assert_failure
	assert_output --partial "this lease id was used already"
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_grants WHERE request_id = '$l'")" 1
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_holds WHERE grant_id = $g")" 0
}

@test "a fail-over's quarantine and fence floor hold on the short way's resources too" {
	local l1 l2
	l1=$(newid) l2=$(newid)
	prime mutex:sp-epoch
	sql "UPDATE lr_epoch SET quarantine_until = UTC_TIMESTAMP(6) + INTERVAL 1 HOUR WHERE id = 1"
	COL=message run take mutex:sp-epoch "$l1"
	assert_output --partial "database fail-over at"
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_grants WHERE request_id = '$l1'")" 0
	sql "UPDATE lr_epoch SET quarantine_until = UTC_TIMESTAMP(6) WHERE id = 1"
	sql "SELECT fence_floor FROM lr_epoch WHERE id = 1" >"$BATS_TEST_TMPDIR/floor"
	sql "UPDATE lr_epoch SET fence_floor = GREATEST(fence_floor, 5000000) WHERE id = 1"
	run take mutex:sp-epoch "$l2"
	assert_output "granted 4"
	assert_equal "$(sql "SELECT h.fence > 5000000 FROM lr_holds h JOIN lr_grants g ON g.id = h.grant_id
		WHERE g.request_id = '$l2'")" 1
	assert_equal "$(sql "SELECT fence FROM lr_resources WHERE name = 'sp-epoch'")" \
		"$(sql "SELECT h.fence FROM lr_holds h JOIN lr_grants g ON g.id = h.grant_id WHERE g.request_id = '$l2'")"
	give "$l2" >/dev/null
}

@test "in the minute after init every call goes the general way" {
	local l
	l=$(newid)
	prime mutex:sp-fresh
	sql "UPDATE lr_routines SET applied_at = UTC_TIMESTAMP(6) WHERE name = 'procedures'"
	run take mutex:sp-fresh "$l"
	assert_output --regexp '^granted ([6-9]|[1-9][0-9])$'
	run give "$l"
	assert_output --regexp '^1 ([5-9]|[1-9][0-9])$'
}

@test "a force-released grant's own release keeps the reason and records how the command ended" {
	local l
	l=$(newid)
	prime mutex:sp-force
	take mutex:sp-force "$l" >/dev/null
	ctl release "$(sql "SELECT id FROM lr_grants WHERE request_id = '$l'")" --reason "a test"
	run give "$l"
	assert_output --regexp '^0 '
	assert_equal "$(sql "SELECT CONCAT(end_reason, ' ', exit_status) FROM lr_grants WHERE request_id = '$l'")" \
		"force_released 0"
}

@test "a busy mutex: the enqueue takes the short way and writes and answers what the general way does" {
	local h1 h2 r1 r2 l1 l2 general short
	h1=$(newid) h2=$(newid) r1=$(newid) r2=$(newid) l1=$(newid) l2=$(newid)
	prime mutex:sp-eq1
	prime mutex:sp-eq2
	take mutex:sp-eq1 "$h1" >/dev/null
	take mutex:sp-eq2 "$h2" >/dev/null
	# In lr_fresh's minute every call goes the general way: its answer.
	sql "UPDATE lr_routines SET applied_at = UTC_TIMESTAMP(6) WHERE name = 'procedures'"
	general=$(asked mutex:sp-eq1 "$r1" "$l1")
	sql "UPDATE lr_routines SET applied_at = UTC_TIMESTAMP(6) - INTERVAL 2 MINUTE WHERE name = 'procedures'"
	short=$(asked mutex:sp-eq2 "$r2" "$l2")
	# The short way: 9 CALLs, the general one more.
	assert_equal "$(sed -n 3p <<<"$short")" 9
	[[ $(sed -n 3p <<<"$general") -gt 9 ]]
	# The same answer (queued, busy, ticket 1, used 1 of 1, at the head,
	# the holder, the message) and the wake-up lock held by the session.
	assert_equal "$(sed -n 1,2p <<<"$short")" "$(sed -n 1,2p <<<"$general")"
	assert_equal "$(sed -n 1p <<<"$short" | cut -f 1,4,6-10,12-13)" \
		"$(printf 'queued\tbusy\t1\t1\t1\tNULL\t1\tsphost:7 (%s), held Ns\tR is busy' \
			"$(sql "SELECT db_user FROM lr_grants WHERE request_id = '$h2'")")"
	assert_equal "$(sed -n 2p <<<"$short")" 1
	# The same place, the same tickets.
	assert_equal "$(place "$r2")" "$(place "$r1")"
	assert_equal "$(place "$r2")" "1 1 sphost 7 tester sp test 10000000 1 30000 1 0 1 1"
	# The release hands the lock to the place's lease, which the waiter
	# claims.
	give "$h2" >/dev/null
	assert_equal "$(sql "SELECT g.request_id FROM lr_holds h JOIN lr_grants g ON g.id = h.grant_id
		WHERE h.resource = 'sp-eq2'")" "$l2"
	run queue mutex:sp-eq2 "$r2" "$l2"
	assert_output --regexp '^granted '
	give "$l2" >/dev/null
	give "$h1" >/dev/null
	queue mutex:sp-eq1 "$r1" "$l1" >/dev/null
	give "$l1" >/dev/null
}

@test "the short enqueue goes to the tail behind others, for every kind that waits, and the queue is served in order" {
	local h a b la lb out
	h=$(newid) a=$(newid) b=$(newid) la=$(newid) lb=$(newid)
	prime mutex:sp-tail
	take mutex:sp-tail "$h" >/dev/null
	run queue mutex:sp-tail "$a" "$la"
	assert_output "queued 9"
	# Behind a: the next ticket, a at the head, a's wake-up lock to wait
	# on, the session holding its own.
	out=$(asked mutex:sp-tail "$b" "$lb")
	assert_equal "$(sed -n 1p <<<"$out" | cut -f 1,6,9-11)" \
		"$(printf 'queued\t2\t1\t0\t%s' "$(wait_name "$a")")"
	assert_equal "$(sed -n 2,3p <<<"$out")" "$(printf '1\n9')"
	# Served in order: a, then b.
	give "$h" >/dev/null
	assert_equal "$(sql "SELECT g.request_id FROM lr_holds h JOIN lr_grants g ON g.id = h.grant_id
		WHERE h.resource = 'sp-tail'")" "$la"
	give "$la" >/dev/null
	assert_equal "$(sql "SELECT g.request_id FROM lr_holds h JOIN lr_grants g ON g.id = h.grant_id
		WHERE h.resource = 'sp-tail'")" "$lb"
	give "$lb" >/dev/null
	# A semaphore of 3, 2 held: 2 more do not fit (the short way); 1 more
	# fits, but another is queued ahead (the general way says so).
	ctl set sp-tsem 3
	take semaphore:sp-tsem:2 "$(newid)" >/dev/null
	COL=message run queue semaphore:sp-tsem:2 "$(newid)" "$(newid)"
	assert_output "'sp-tsem' is busy (2/3 used) 9"
	COL=message run queue semaphore:sp-tsem:1 "$(newid)" "$(newid)"
	assert_output --regexp "^'sp-tsem' has requests queued ahead (1[0-9]|[2-9][0-9])$"
	# A writer behind a reader.
	prime read:sp-trw
	take read:sp-trw "$(newid)" >/dev/null
	COL=message run queue write:sp-trw "$(newid)" "$(newid)"
	assert_output "'sp-trw' is busy 9"
	assert_equal "$(sql "SELECT CONCAT(permits, ' ', ticket) FROM lr_waiters WHERE resource = 'sp-trw'")" \
		"2147483647 1"
}

@test "the enqueue goes the general way when there is something to sweep, a pause, a fail-over, or a count to mend" {
	local h r l
	# A hold past its grace: swept, and the lock granted.
	h=$(newid) r=$(newid) l=$(newid)
	prime mutex:sp-n1
	take mutex:sp-n1 "$h" >/dev/null
	sql "UPDATE lr_holds h JOIN lr_grants g ON g.id = h.grant_id
		SET h.expires_at = UTC_TIMESTAMP(6) - INTERVAL 10 SECOND WHERE g.request_id = '$h'"
	run queue mutex:sp-n1 "$r" "$l"
	assert_output --regexp '^granted (1[0-9]|[2-9][0-9])$'
	assert_equal "$(sql "SELECT end_reason FROM lr_grants WHERE request_id = '$h'")" expired
	give "$l" >/dev/null
	# A queue place past its grace: swept, and this one queued.
	h=$(newid) r=$(newid)
	prime mutex:sp-n2
	take mutex:sp-n2 "$h" >/dev/null
	queue mutex:sp-n2 "$r" "$(newid)" >/dev/null
	sql "UPDATE lr_waiters SET expires_at = UTC_TIMESTAMP(6) - INTERVAL 10 SECOND WHERE request_id = '$r'"
	r=$(newid)
	run queue mutex:sp-n2 "$r" "$(newid)"
	assert_output --regexp '^queued (1[0-9]|[2-9][0-9])$'
	assert_equal "$(sql "SELECT GROUP_CONCAT(request_id) FROM lr_waiters WHERE resource = 'sp-n2'")" "$r"
	# The request's own place already there: the general way keeps it.
	run queue mutex:sp-n2 "$r" "$(newid)"
	assert_output --regexp '^busy (1[0-9]|[2-9][0-9])$'
	# Paused: the general way says so.
	sql "UPDATE lr_resources SET paused_at = UTC_TIMESTAMP(6) WHERE name = 'sp-n2'"
	COL=message run queue mutex:sp-n2 "$(newid)" "$(newid)"
	assert_output --regexp "^'sp-n2' is paused since .* (1[0-9]|[2-9][0-9])$"
	sql "UPDATE lr_resources SET paused_at = NULL WHERE name = 'sp-n2'"
	# A fail-over's quarantine.
	sql "UPDATE lr_epoch SET quarantine_until = UTC_TIMESTAMP(6) + INTERVAL 1 HOUR WHERE id = 1"
	run queue mutex:sp-n2 "$(newid)" "$(newid)"
	assert_output --regexp '^queued (1[0-9]|[2-9][0-9])$'
	sql "UPDATE lr_epoch SET quarantine_until = UTC_TIMESTAMP(6) WHERE id = 1"
	# Over: the short way again, behind the three queued.
	run queue mutex:sp-n2 "$(newid)" "$(newid)"
	assert_output "queued 9"
	# Without enqueue: busy, and nothing written.
	run take mutex:sp-n2 "$(newid)"
	assert_output --regexp '^busy (1[0-9]|[2-9][0-9])$'
	# A lease used before: its holder's, the same grant again; an ended
	# one, refused.
	run queue mutex:sp-n2 "$(newid)" "$h"
	assert_output --regexp '^granted (1[0-9]|[2-9][0-9])$'
	run app "CALL lockrun_acquire('mutex:sp-n2', '$(newid)', '$l', 30000, 1, 'h', 1, 'u', 'c')"
	assert_failure
	assert_output --partial "this lease id was used already"
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_waiters WHERE resource = 'sp-n2'")" 4
	# A count that drifted high (no hold): mended, and the lock granted.
	prime mutex:sp-n3
	sql "UPDATE lr_resources SET used = 1 WHERE name = 'sp-n3'"
	l=$(newid)
	run queue mutex:sp-n3 "$(newid)" "$l"
	assert_output --regexp '^granted (1[0-9]|[2-9][0-9])$'
	give "$l" >/dev/null
	# A held key does not queue.
	prime key:sp-n4
	take key:sp-n4 "$(newid)" >/dev/null
	run queue key:sp-n4 "$(newid)" "$(newid)"
	assert_output --regexp '^key_busy (1[0-9]|[2-9][0-9])$'
}

@test "the enqueue of other spellings, or of more than one item, goes the general way" {
	local item
	prime mutex:sp-s1
	prime mutex:sp-s2
	take mutex:sp-s1 "$(newid)" >/dev/null
	ctl set sp-ssem 1
	take semaphore:sp-ssem:1 "$(newid)" >/dev/null
	for item in 'mutex:sp-s1 ' ' mutex:sp-s1' 'mutex:sp-s1,mutex:sp-s2' 'mutex:sp-s2,mutex:sp-s1' \
		'mutex:sp-s1,' semaphore:sp-ssem semaphore:sp-ssem:01; do
		run queue "$item" "$(newid)" "$(newid)"
		assert_output --regexp '^queued (1[0-9]|[2-9][0-9])$'
	done
	run queue semaphore:sp-ssem:1 "$(newid)" "$(newid)"
	assert_output "queued 9"
}
