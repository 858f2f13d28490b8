#!/usr/bin/env bats
#
# The replication harness itself (run with tests/run-replication): what the
# fail-over scenarios in this directory take for granted about
# tests/helpers/replication.bash. Rows written as root in a scratch
# database `lrh` show whether, and when, the replica has a write; lockrun
# itself, run through each node's config, shows that the provisioning, the
# configs and the replica's read-only state are what the scenarios need.

bats_require_minimum_version 1.5.0

load suite

setup() {
	# Whatever the test before did (a promotion, a switchover), this one
	# starts from node 1 primary, node 2 its caught-up read-only replica.
	repl_reset
	repl_clear_lockrun
	repl_sql 1 "CREATE DATABASE IF NOT EXISTS lrh;
		CREATE TABLE IF NOT EXISTS lrh.t (id INT PRIMARY KEY, note VARCHAR(40)) ENGINE=InnoDB;
		DELETE FROM lrh.t"
	repl_wait_caught_up
}

# has N ID: node N's row ID of lrh.t, or nothing.
has() {
	repl_sql "$1" "SELECT note FROM lrh.t WHERE id = $2"
}

# received N SET: true if node N's IO thread has received every GTID of SET
# (its relay log holds them, applied or not).
received() {
	repl_has_gtids "$1" "$2" received
}

# uses_gtid N MODE: node N replicates by GTID, from the position MODE
# (Slave_Pos or Current_Pos) on MariaDB; MySQL has one mode for both,
# auto-positioning.
uses_gtid() {
	if lr_server_is_mysql; then
		assert_equal "$(repl_slave_field "$1" Auto_Position)" 1
	else
		assert_equal "$(repl_slave_field "$1" Using_Gtid)" "$2"
	fi
}

@test "harness: a row written on the primary appears on the replica" {
	assert_equal "$(repl_primary) $(repl_replica)" "1 2"
	repl_sql 1 "INSERT INTO lrh.t VALUES (1, 'one')"
	repl_wait_caught_up
	assert_equal "$(has 2 1)" one
	# The replica runs as a fail-over tool keeps it: read-only, GTID-based.
	local gtid=@@gtid_strict_mode updates=@@log_slave_updates
	lr_server_is_mysql && gtid="@@gtid_mode = 'ON'" updates=@@log_replica_updates
	assert_equal "$(repl_sql 2 "SELECT @@read_only, $gtid, @@log_bin, $updates")" \
		"$(printf '1\t1\t1\t1')"
	assert_equal "$(repl_sql 1 "SELECT @@read_only, @@server_id, @@binlog_format")" "$(printf '0\t11\tROW')"
	assert_equal "$(repl_sql 2 "SELECT @@server_id")" 12
	uses_gtid 2 Slave_Pos
	assert_equal "$(repl_slave_field 2 Master_Host)" 127.0.0.11
	# Each node listens on its own address only, both on one port.
	assert_equal "$(repl_sql 1 "SELECT @@bind_address, @@port")" "$(printf '127.0.0.11\t%s' "$(repl_port)")"
	assert_equal "$(repl_sql 2 "SELECT @@bind_address, @@port")" "$(printf '127.0.0.12\t%s' "$(repl_port)")"
	# lockrun's schema reached the replica through replication.
	assert_equal "$(rsql 2 "SELECT MAX(version) FROM lr_schema")" "$(rsql 1 "SELECT MAX(version) FROM lr_schema")"
}

@test "harness: lockrun works through the primary, its grant replicates, and the replica refuses lockrun's writes" {
	repl_ctl -q set h 1
	run "$LOCKRUN" -c "$LR_REPL/node1.conf" -s h -- true
	assert_success
	repl_wait_caught_up
	assert_equal "$(rsql 2 "SELECT end_reason, exit_status FROM lr_grants")" "$(printf 'exited\t0')"
	assert_equal "$(rsql 2 "SELECT fence, used FROM lr_resources WHERE name = 'h'")" "$(printf '1\t0')"
	# read_only holds back the 'lockrun' account, procedures and all.
	run "$LOCKRUN" -c "$LR_REPL/node2.conf" -n -s h -- true
	assert_failure
	echo "# through the replica: exit $status: $output" >&3
	# both.conf lists both nodes, the primary first.
	run "$LOCKRUN" -c "$LR_REPL/both.conf" -s h -- true
	assert_success
	grep -qx 'host = 127.0.0.11, 127.0.0.12' "$LR_REPL/both.conf"
}

@test "harness: with the applier stopped the replica receives a row but does not apply it" {
	repl_stop_applier
	repl_sql 1 "INSERT INTO lrh.t VALUES (2, 'two')"
	local want i
	want=$(repl_gtids 1)
	for ((i = 0; i < 100; i++)); do
		received 2 "$want" && break
		sleep 0.1
	done
	received 2 "$want" || fail "node 2 did not receive $want"
	sleep 1
	assert_equal "$(has 2 2)" ""
	run ! repl_caught_up
	run ! repl_wait_caught_up 2
	assert_output --partial "has not caught up"
	# Started again, it applies what it had received.
	repl_start_applier
	repl_wait_caught_up
	assert_equal "$(has 2 2)" two
}

@test "harness: kill the primary, promote the replica: it takes writes and lacks what it never applied" {
	repl_sql 1 "INSERT INTO lrh.t VALUES (3, 'before')"
	repl_wait_caught_up
	repl_stop_applier
	repl_sql 1 "INSERT INTO lrh.t VALUES (4, 'missed')"
	repl_ctl -q set h 1
	repl_kill_primary
	run ! repl_running 1
	repl_promote
	assert_equal "$(repl_primary) $(repl_replica)" "2 1"
	assert_equal "$(repl_sql 2 "SELECT @@read_only")" 0
	assert_equal "$(repl_slave_field 2 Master_Host)" ""
	assert_equal "$(has 2 3)" before
	assert_equal "$(has 2 4)" ""
	# The 'lockrun' account writes there now: lockrun runs through node 2,
	# which, another server than the one that wrote the tables, holds new
	# grants back for max-ttl plus 5 s (10-failover.bats tests that). (The
	# resource set before the crash was missed too: set it again.)
	repl_ctl -q set h 1
	run -75 "$LOCKRUN" -c "$LR_REPL/node2.conf" -n -s h -- true
	assert_output --partial "database fail-over at "
	repl_sql 2 "INSERT INTO lrh.t VALUES (5, 'after')"

	# The old primary, restarted read-only, has the row the new one lacks,
	# and none of what the new one wrote since.
	repl_restart_old_primary_read_only
	assert_equal "$(repl_sql 1 "SELECT @@read_only")" 1
	assert_equal "$(has 1 4)" missed
	assert_equal "$(has 1 5)" ""
	assert_equal "$(repl_slave_field 1 Master_Host)" ""
	run "$LOCKRUN" -c "$LR_REPL/node1.conf" -n -s h -- true
	assert_failure
}

@test "harness: an old primary with a commit the new one lacks: MariaDB will not follow, MySQL follows and keeps it" {
	repl_stop_applier
	repl_sql 1 "INSERT INTO lrh.t VALUES (10, 'diverged')"
	repl_kill_primary
	repl_promote
	repl_sql 2 "INSERT INTO lrh.t VALUES (11, 'new')"
	repl_restart_old_primary_read_only
	if lr_server_is_mysql; then
		# No strict mode: it replicates, with the row the new primary
		# never had (doc/production.md, MySQL).
		repl_make_replica 1 current_pos
		repl_wait_caught_up
		assert_equal "$(has 1 11)" new
		assert_equal "$(has 1 10)" diverged
		assert_equal "$(has 2 10)" ""
	else
		run ! repl_make_replica 1 current_pos
		assert_output --partial "does not replicate from node 2"
		assert_equal "$(has 1 11)" ""
	fi
}

@test "harness: semi-sync on: the primary waits for the replica's acknowledgement" {
	repl_semisync_on
	assert_equal "$(repl_status 1 Rpl_semi_sync_master_status)" ON
	assert_equal "$(repl_status 2 Rpl_semi_sync_slave_status)" ON
	local before
	before=$(repl_status 1 Rpl_semi_sync_master_yes_tx)
	repl_sql 1 "INSERT INTO lrh.t VALUES (6, 'acked')"
	(($(repl_status 1 Rpl_semi_sync_master_yes_tx) > before))
	repl_wait_caught_up
	assert_equal "$(has 2 6)" acked
	repl_semisync_off
	assert_equal "$(repl_status 1 Rpl_semi_sync_master_status)" OFF
}

@test "harness: switchover: the old primary replicates from the new one, read-only" {
	repl_sql 1 "INSERT INTO lrh.t VALUES (7, 'on 1')"
	repl_switchover
	assert_equal "$(repl_primary) $(repl_replica)" "2 1"
	assert_equal "$(repl_sql 1 "SELECT @@read_only")" 1
	assert_equal "$(repl_sql 2 "SELECT @@read_only")" 0
	assert_equal "$(has 2 7)" "on 1"
	assert_equal "$(repl_slave_field 1 Master_Host)" 127.0.0.12
	uses_gtid 1 Current_Pos
	assert_equal "$(repl_slave_field 1 Slave_IO_Running) $(repl_slave_field 1 Slave_SQL_Running)" "Yes Yes"
	assert_equal "$(repl_slave_field 2 Master_Host)" ""
	repl_sql 2 "INSERT INTO lrh.t VALUES (8, 'on 2')"
	repl_wait_caught_up
	assert_equal "$(has 1 8)" "on 2"
	# lockrun follows: through the new primary only, which holds new grants
	# back for max-ttl plus 5 s, as after any change of the writing server
	# (10-failover.bats); the old primary refuses it (read-only).
	repl_ctl -q set h 1
	run -75 "$LOCKRUN" -c "$LR_REPL/node2.conf" -n -s h -- true
	assert_output --partial "database fail-over at "
	run "$LOCKRUN" -c "$LR_REPL/node1.conf" -n -s h -- true
	assert_failure
}

@test "harness: repl_reset brings back node 1 primary, node 2 its replica, after a fail-over" {
	repl_sql 1 "INSERT INTO lrh.t VALUES (9, 'gone')"
	repl_kill_primary
	repl_promote
	repl_restart_old_primary_read_only
	repl_reset
	assert_equal "$(repl_primary) $(repl_replica)" "1 2"
	assert_equal "$(repl_sql 1 "SELECT @@read_only")" 0
	assert_equal "$(repl_sql 2 "SELECT @@read_only")" 1
	assert_equal "$(repl_slave_field 2 Slave_IO_Running) $(repl_slave_field 2 Slave_SQL_Running)" "Yes Yes"
	# From the snapshot: lockrun initialised, the scratch database not there.
	assert_equal "$(repl_sql 1 "SHOW DATABASES LIKE 'lrh'")" ""
	assert_equal "$(rsql 2 "SELECT COUNT(*) FROM lr_resources")" 0
	repl_sql 1 "CREATE DATABASE lrh"
	repl_wait_caught_up
	assert_equal "$(repl_sql 2 "SHOW DATABASES LIKE 'lrh'")" lrh
	# And a second reset, with nothing changed, is cheap and says nothing.
	run repl_reset
	assert_success
	assert_output ""
}
