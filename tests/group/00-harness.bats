#!/usr/bin/env bats
#
# The Group Replication harness itself (run with tests/run-group): what the
# group's scenarios will take for granted about tests/helpers/group.bash.
# Rows written as root in a scratch database `lrh` show where, and when, a
# write arrives; lockrun itself, run through each member's config, locks on
# the primary only. Each fault test
# prints how long the group took to elect a new primary (tests/group/README.md
# keeps the figures).

bats_require_minimum_version 1.5.0

load suite

setup() {
	# Whatever the test before did (a kill, a freeze, another primary),
	# this one starts from three ONLINE members, member 1 the primary.
	gr_reset
	gr_sql 1 "CREATE DATABASE IF NOT EXISTS lrh;
		CREATE TABLE IF NOT EXISTS lrh.t (id INT PRIMARY KEY, note VARCHAR(40)) ENGINE=InnoDB;
		DELETE FROM lrh.t"
}

# has N ID: member N's row ID of lrh.t, or nothing.
has() {
	gr_sql "$1" "SELECT note FROM lrh.t WHERE id = $2"
}

# A member's view as one line, e.g. "1 PRIMARY ONLINE;2 SECONDARY ONLINE;".
view() {
	gr_view "$1" | sort | tr '\n' ';'
}

# elected OLD: wait (90 s at most: a loaded machine) until the others elect
# a primary other than OLD, print the time since $t0 to the TAP output,
# and check that both survivors agree on it. Sets `new`.
elected() {
	local old=$1 n
	new=$(gr_wait_new_primary "$old" 90)
	[[ -n $new && $new != "$old" ]] || fail "no new primary"
	echo "# $2: member $new elected $(gr_seconds_since "$t0") s after it" >&3
	for ((n = 1; n <= 3; n++)); do
		[[ $n == "$old" ]] && continue
		lr_wait_eq -t 30 "$new" gr_primary "$n"
	done
}

@test "harness: three members ONLINE, member 1 the one PRIMARY, and every member sees the same" {
	local want n
	want="1 PRIMARY ONLINE;2 SECONDARY ONLINE;3 SECONDARY ONLINE;"
	for n in 1 2 3; do
		assert_equal "$(view "$n")" "$want"
		# Each on its own address, all on one port, with Group
		# Replication's defaults: single-primary, and a new primary
		# applies the group's backlog before it takes writes.
		assert_equal "$(gr_sql "$n" "SELECT @@bind_address, @@port, @@report_host, @@server_id,
			@@group_replication_single_primary_mode, @@group_replication_consistency")" \
			"$(printf '%s\t%s\t%s\t2%s\t1\tBEFORE_ON_PRIMARY_FAILOVER' "$(gr_addr "$n")" \
				"$(gr_port)" "$(gr_addr "$n")" "$n")"
	done
	assert_equal "$(gr_primary) $(gr_secondaries | tr '\n' ' ')" "1 2 3 "
	# Three members, three server_uuids (the data dirs are copies).
	assert_equal "$(for n in 1 2 3; do gr_uuid "$n"; done | sort -u | wc -l)" 3
	# lockrun's schema reached the members that joined, by recovery.
	assert_equal "$(gr_sql 3 "SELECT MAX(version) FROM lockrun.lr_schema")" \
		"$(gr_sql 1 "SELECT MAX(version) FROM lockrun.lr_schema")"
	grep -qx 'host = 127.0.0.21, 127.0.0.22, 127.0.0.23' "$LR_GROUP/all.conf"
}

@test "harness: a write on the primary is on the others; a secondary is super_read_only and refuses one" {
	gr_sql 1 "INSERT INTO lrh.t VALUES (1, 'one')"
	lr_wait_eq -t 30 one has 2 1
	lr_wait_eq -t 30 one has 3 1
	assert_equal "$(gr_sql 1 "SELECT @@read_only, @@super_read_only")" "$(printf '0\t0')"
	local n
	for n in 2 3; do
		assert_equal "$(gr_sql "$n" "SELECT @@read_only, @@super_read_only")" "$(printf '1\t1')"
		run gr_sql "$n" "INSERT INTO lrh.t VALUES (2$n, 'on a secondary')"
		assert_failure
		assert_output --partial "ERROR 1290"
		assert_output --partial "super-read-only"
	done
	assert_equal "$(has 1 22)$(has 1 23)" ""
}

@test "harness: lockrun locks on the primary; a secondary alone refuses (69, read-only); its account reads the group's members" {
	local n
	run --separate-stderr "$LOCKRUN" -c "$LR_GROUP/node1.conf" -n -x h -- true
	assert_success
	for n in 2 3; do
		run --separate-stderr "$LOCKRUN" -c "$LR_GROUP/node$n.conf" -n -x h -- true
		assert_failure 69
		assert_regex "$stderr" "read-only server: read_only \(or super_read_only\) is ON here \(1290\)$"
	done
	run --separate-stderr "$LOCKRUN" -c "$LR_GROUP/all.conf" -n -x h -- true
	assert_success
	# sql/grant.sql's grant: the runtime account reads the membership.
	run gr_lockrun_sql 2 "SELECT COUNT(*) FROM performance_schema.replication_group_members"
	assert_success
	assert_output 3
}

@test "harness: kill the primary: the others elect a new one and agree on it; the old one rejoins as a secondary" {
	gr_sql 1 "INSERT INTO lrh.t VALUES (3, 'before')"
	lr_wait_eq -t 30 before has 2 3
	t0=$EPOCHREALTIME
	gr_kill 1
	elected 1 "killed primary"
	assert_equal "$(gr_sql "$new" "SELECT @@super_read_only")" 0
	gr_sql "$new" "INSERT INTO lrh.t VALUES (4, 'after')"
	assert_equal "$(has "$new" 3)" before
	# Killed, member 1 stays out until restarted and told to join.
	gr_restart 1
	gr_wait_online 60 1 2 3
	assert_equal "$(gr_primary 1)" "$new"
	assert_equal "$(gr_sql 1 "SELECT @@super_read_only")" 1
	lr_wait_eq -t 30 after has 1 4
}

@test "harness: freeze the primary: the others elect a new one; thawed, the old one fails a write and rejoins as a secondary" {
	t0=$EPOCHREALTIME
	gr_freeze 1
	elected 1 "frozen primary"
	gr_thaw 1
	# Thawed, it still takes itself for the primary of all three, until
	# it learns that it was expelled; a write there fails meanwhile.
	echo "# thawed: member 1 sees $(view 1)" >&3
	GR_SQL_TIMEOUT=60 run gr_sql 1 "INSERT INTO lrh.t VALUES (5, 'on the old primary')"
	assert_failure
	echo "# a write on it: $(grep ERROR <<<"$output")" >&3
	t0=$EPOCHREALTIME
	gr_rejoin 1
	gr_wait_online 60 1 2 3
	echo "# member 1 ONLINE again $(gr_seconds_since "$t0") s after the write failed" >&3
	assert_equal "$(gr_primary 1) $(gr_sql 1 "SELECT @@super_read_only")" "$new 1"
	assert_equal "$(has "$new" 5)$(has 1 5)" ""
}

@test "harness: cut the primary off: the others elect a new one; it cannot commit; let back, it rejoins as a secondary" {
	t0=$EPOCHREALTIME
	gr_cut 1
	elected 1 "primary cut off"
	# On its side of the cut it answers SQL, still writable, but cannot
	# commit: a write waits for the group.
	assert_equal "$(gr_sql 1 "SELECT @@super_read_only")" 0
	GR_SQL_TIMEOUT=5 run gr_sql 1 "INSERT INTO lrh.t VALUES (6, 'cut off')"
	assert_failure 124
	gr_uncut 1
	gr_rejoin 1
	gr_wait_online 60 1 2 3
	assert_equal "$(gr_primary 1) $(gr_sql 1 "SELECT @@super_read_only")" "$new 1"
	assert_equal "$(has "$new" 6)$(has 1 6)" ""
}

@test "harness: a planned change of primary, consistency, and multi-primary mode" {
	gr_set_primary 2
	assert_equal "$(gr_primary 1) $(gr_primary 3)" "2 2"
	assert_equal "$(gr_sql 2 "SELECT @@super_read_only")$(gr_sql 1 "SELECT @@super_read_only")" 01
	gr_consistency EVENTUAL
	assert_equal "$(gr_sql 3 "SELECT @@group_replication_consistency")" EVENTUAL
	gr_multi_primary
	gr_multi
	assert_equal "$(gr_primaries 3 | sort | tr '\n' ' ')" "1 2 3 "
	run ! gr_primary
	gr_sql 3 "INSERT INTO lrh.t VALUES (7, 'on 3')"
	lr_wait_eq -t 30 "on 3" has 1 7
	# gr_reset undoes all of it.
	gr_reset
	assert_equal "$(gr_primary) $(gr_sql 2 "SELECT @@group_replication_consistency")" \
		"1 BEFORE_ON_PRIMARY_FAILOVER"
	run ! gr_multi
}
