#!/usr/bin/env bats
#
# What a fencing token guarantees for each kind of lock, as doc/design.md
# and lockrun(1) state it: tokens of one resource grow with every grant in
# commit order; a mutex or writer is the only live holder of its token's
# resource; holders of a semaphore or readers hold distinct tokens at the
# same time, so "refuse a token below the highest seen" is only right for
# exclusive locks, and a semaphore holder is checked by its lease instead.

load helpers/common
load helpers/records

bats_require_minimum_version 1.5.0

setup() {
	setup_records
	gate=$BATS_TEST_TMPDIR/gate
}

# hold_until_gate NAME: a command that records "NAME TOKEN GRANT" and then
# runs until $gate exists.
hold_until_gate() {
	printf 'echo %q "$LOCKRUN_FENCE" "$LOCKRUN_GRANT" >>%q; while [ ! -e %q ]; do sleep 0.05; done' \
		"$1" "$rec" "$gate"
}

token_of() {
	awk -v n="$1" '$1 == n { print $2 }' "$rec"
}

@test "two live holders of one semaphore hold distinct tokens; the later grant's is larger" {
	ctl set fs 2
	"$LOCKRUN" -s fs -- sh -c "$(hold_until_gate A)" 3>&- &
	local a=$!
	lr_wait_for grep -q '^A ' "$rec"
	"$LOCKRUN" -s fs -- sh -c "$(hold_until_gate B)" 3>&- &
	local b=$!
	lr_wait_for grep -q '^B ' "$rec"
	local ta tb
	ta=$(token_of A)
	tb=$(token_of B)
	((tb > ta)) || fail "tokens $ta then $tb"
	# Both are live at once: refusing tokens below the highest seen would
	# refuse A, a legitimate holder.
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_holds WHERE resource = 'fs' AND expires_at > NOW(6)")" 2
	assert_equal "$(sql "SELECT GROUP_CONCAT(fence ORDER BY fence) FROM lr_holds WHERE resource = 'fs'")" "$ta,$tb"
	touch "$gate"
	wait "$a"
	wait "$b"
}

@test "read-write lock: a writer's token is above every reader granted before it and below every later one" {
	"$LOCKRUN" --read frw -- sh -c "$(hold_until_gate R1)" 3>&- &
	local r1=$!
	lr_wait_for grep -q '^R1 ' "$rec"
	"$LOCKRUN" --write frw -- sh -c 'echo W "$LOCKRUN_FENCE" >>'"$rec" 3>&- &
	local w=$!
	lr_wait_eq 1 waiters frw
	touch "$gate"
	wait "$r1"
	wait "$w"
	rm -f "$gate"
	run "$LOCKRUN" --read frw -- sh -c 'echo R2 "$LOCKRUN_FENCE" >>'"$rec"
	assert_success
	run "$LOCKRUN" --write frw -- sh -c 'echo W2 "$LOCKRUN_FENCE" >>'"$rec"
	assert_success
	local t1 tw t2 tw2
	t1=$(token_of R1)
	tw=$(token_of W)
	t2=$(token_of R2)
	tw2=$(token_of W2)
	((t1 < tw && tw < t2 && t2 < tw2)) || fail "R1=$t1 W=$tw R2=$t2 W2=$tw2"
}

@test "a holder's lease is checkable from outside: its hold row is live while it runs, gone after" {
	ctl set fl 3
	"$LOCKRUN" -s fl -- sh -c "$(hold_until_gate A)" 3>&- &
	local a=$!
	lr_wait_for grep -q '^A ' "$rec"
	local lease token
	lease=$(awk '$1 == "A" { print $3 }' "$rec")
	token=$(token_of A)
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_holds WHERE grant_id = $lease AND resource = 'fl' AND fence = $token AND expires_at > NOW(6)")" 1
	touch "$gate"
	wait "$a"
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_holds WHERE grant_id = $lease")" 0
}
