#!/usr/bin/env bats
#
# lockrun on a Group Replication group without a fault (run with
# tests/run-group): a planned change of primary moves every client, holders
# and waiters; the secondaries are never written; multi-primary mode and
# --named are refused with one line; doctor names the group's mode, its
# primary and its consistency level.

bats_require_minimum_version 1.5.0

load suite

@test "set_as_primary moves every client, holders and waiters; the secondaries are never written" {
	local p3
	p3=$(proposed 3)
	primary_moved_under_workers gs
	# Member 3 was a secondary throughout: it proposed nothing.
	assert_equal "$(proposed 3)" "$p3"
	assert_equal "$(gr_sql 2 "SELECT COUNT(*) FROM lr_epochs" lockrun)" "$epochs0"
}

@test "multi-primary mode is refused with one line; --named is refused on every member; single-primary again, locks go on" {
	gr_multi_primary
	run --separate-stderr "$LOCKRUN" -c "$LR_GROUP/all.conf" -w 1 -x gm -- touch "$work/ran"
	local rc=$status err=$stderr
	gr_single_primary 1
	assert_equal "$rc" 69
	[[ $err == *"this group is in multi-primary mode, which lockrun does not support (1290)" ]]
	[[ ! -e $work/ran ]]
	local n
	for n in 1 2 3; do
		run -64 "$LOCKRUN" -c "$LR_GROUP/node$n.conf" --named x -- touch "$work/ran"
		assert_output --partial "is a member of a MySQL Group Replication group: named locks there are local to one member"
	done
	[[ ! -e $work/ran ]]
	run "$LOCKRUN" -c "$LR_GROUP/all.conf" -x gm -- true
	assert_success
}

@test "doctor names the mode, the primary and the consistency level, from the primary and from a secondary" {
	run "$LOCKRUNCTL" -c "$LR_GROUP/all.conf" doctor
	assert_output --regexp "ok[[:space:]]+galera[[:space:]]+a[[:space:]]+member[[:space:]]+of[[:space:]]+a[[:space:]]+single-primary[[:space:]]+MySQL[[:space:]]+Group[[:space:]]+Replication[[:space:]]+group[[:space:]]+\(3[[:space:]]+online\),[[:space:]]+itself[[:space:]]+ONLINE[[:space:]]+PRIMARY;[[:space:]]+the[[:space:]]+primary[[:space:]]+is[[:space:]]+127.0.0.21:$(gr_port)"
	assert_output --regexp "ok[[:space:]]+group[[:space:]]+group_replication_consistency[[:space:]]+is[[:space:]]+BEFORE_ON_PRIMARY_FAILOVER"
	run "$LOCKRUNCTL" -c "$LR_GROUP/node2.conf" doctor
	assert_output --regexp "itself[[:space:]]+ONLINE[[:space:]]+SECONDARY;[[:space:]]+the[[:space:]]+primary[[:space:]]+is[[:space:]]+127.0.0.21:$(gr_port)"
	assert_output --regexp "FAIL[[:space:]]+read_only[[:space:]]+super_read_only[[:space:]]+is[[:space:]]+ON"
}
