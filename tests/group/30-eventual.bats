#!/usr/bin/env bats
#
# group_replication_consistency EVENTUAL (run with tests/run-group): a new
# primary may answer reads before it has applied the old one's last
# commits, so lockrun names each member apart (lr_server_state) and takes a
# change of primary for a fail-over: a new epoch, whose grants wait for
# max-ttl plus 5 s, with tokens above every earlier one. At the default
# level (BEFORE_ON_PRIMARY_FAILOVER) the same kill starts no epoch
# (10-failover.bats). Last of the files: it leaves the group at the default
# level again, its quarantine paid.

bats_require_minimum_version 1.5.0

load suite

setup() {
	gr_reset
	clients_setup
	# A short bound on leases, so that a quarantine is short: 12 s.
	gr_ctl 1 -q max-ttl 7s
}

teardown() {
	gr_reset
	# Back at the default level: the group's name again, one epoch more,
	# paid here (a grant after its quarantine) rather than by what runs next.
	"$LOCKRUN" -c "$LR_GROUP/all.conf" -w 30 --ttl 2s --kill-after 0.1s -x ge -- true || true
}

# last_epoch N: "SERVER PREVIOUS" of the newest epoch, as member N has it.
last_epoch() {
	gr_sql "$1" "SELECT server, previous FROM lr_epochs ORDER BY epoch DESC LIMIT 1" lockrun
}

@test "EVENTUAL: the primary killed is a fail-over: a new epoch named by the new primary, its quarantine, tokens above" {
	local group f0 f1 t_el waited new
	group=$(gr_sql 1 "SELECT @@group_replication_group_name")
	gr_consistency EVENTUAL
	f0=$("$LOCKRUN" -c "$LR_GROUP/all.conf" -w 30 --ttl 2s --kill-after 0.1s -x ge -- sh -c 'echo "$LOCKRUN_FENCE"')
	# Member 1 named apart from the group now: an epoch of its own.
	assert_equal "$(last_epoch 1)" "$(printf 'group:%s:%s\tgroup:%s' "$group" "$(gr_uuid 1)" "$group")"
	gr_kill 1
	new=$(gr_wait_new_primary 1 90)
	t_el=$SECONDS
	f1=$("$LOCKRUN" -c "$LR_GROUP/all.conf" -w 40 --ttl 2s --kill-after 0.1s -x ge -- sh -c 'echo "$LOCKRUN_FENCE"')
	waited=$((SECONDS - t_el))
	echo "# EVENTUAL: member $new elected; its first grant ${waited} s later (quarantine: max-ttl 7 s plus 5 s)" >&3
	assert_equal "$(last_epoch "$new")" "$(printf 'group:%s:%s\tgroup:%s:%s' "$group" "$(gr_uuid "$new")" "$group" "$(gr_uuid 1)")"
	((waited >= 10)) || fail "granted ${waited} s after the election, within the quarantine"
	((f1 > f0))
	run "$LOCKRUNCTL" -c "$LR_GROUP/all.conf" doctor
	assert_output --regexp "WARN[[:space:]]+group[[:space:]]+group_replication_consistency[[:space:]]+is[[:space:]]+EVENTUAL"
}
