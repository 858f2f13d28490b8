#!/usr/bin/env bats
#
# The lock log keeps what each grant held, when it asked, was granted,
# last renewed and ended, after its holds are gone; a resource created
# again after `lockrunctl delete` starts its tokens above its old ones.

load helpers/common
load helpers/records

bats_require_minimum_version 1.5.0

setup() {
	setup_records
	gate=$BATS_TEST_TMPDIR/gate
}

@test "the log keeps a finished grant's items and tokens, its wait, renewal and end" {
	ctl set ll 3
	# A holds 2 permits of ll and the mutex llm, long enough to renew
	# (--ttl 4: about every 1.3 s); B queues behind it on llm.
	"$LOCKRUN" --ttl 4 --kill-after 1 -s ll:2 -x llm -- sh -c \
		"echo A \$LOCKRUN_GRANT \"\$LOCKRUN_FENCES\" >>'$rec'; while [ ! -e '$gate' ]; do sleep 0.05; done" 3>&- &
	local a=$!
	lr_wait_for grep -q '^A ' "$rec"
	"$LOCKRUN" -x llm -- sh -c "echo B \$LOCKRUN_GRANT >>'$rec'" 3>&- &
	local b=$!
	queued() { (($(waiters llm) >= 1)); }
	lr_wait_for queued
	local ga
	ga=$(awk '$1 == "A" { print $2 }' "$rec")
	renewed() { [[ $(sql "SELECT renewed_at IS NOT NULL FROM lr_grants WHERE id = $ga") == 1 ]]; }
	lr_wait_for renewed
	sleep 0.5
	touch "$gate"
	wait "$a"
	wait "$b"
	local gb
	gb=$(awk '$1 == "B" { print $2 }' "$rec")
	# A's items, with the tokens its command saw, outlive its holds.
	assert_equal "$(holds llm)" 0
	assert_equal "$(sql "SELECT resource, kind, permits, fence FROM lr_grant_items
		WHERE grant_id = $ga ORDER BY resource")" \
		"$(printf 'll\tsemaphore\t2\t%s\nllm\tmutex\t1\t%s' \
			"$(grep -o 'll=[0-9]*' "$rec" | cut -d= -f2)" \
			"$(grep -o 'llm=[0-9]*' "$rec" | cut -d= -f2)")"
	assert_equal "$(sql "SELECT end_reason, exit_status, requested_at <= acquired_at,
		renewed_at > acquired_at AND renewed_at < ended_at FROM lr_grants WHERE id = $ga")" \
		"$(printf 'exited\t0\t1\t1')"
	# B asked while A held: its wait (from its queue place) is recorded.
	assert_equal "$(sql "SELECT TIMESTAMPDIFF(MICROSECOND, requested_at, acquired_at) >= 500000
		FROM lr_grants WHERE id = $gb")" 1
	assert_equal "$(sql "SELECT resource, kind, permits FROM lr_grant_items WHERE grant_id = $gb")" \
		"$(printf 'llm\tmutex\t1')"
}

@test "a resource created again starts its tokens above its fence floor" {
	sql "INSERT INTO lr_fence_floor (name, fence, deleted_at) VALUES ('ffl', 41, UTC_TIMESTAMP(6))"
	run "$LOCKRUN" -x ffl -- sh -c 'echo "$LOCKRUN_FENCE"'
	assert_success
	assert_output 42
	run "$LOCKRUN" --write ffw -- sh -c 'echo "$LOCKRUN_FENCE"'
	assert_output 1
}
