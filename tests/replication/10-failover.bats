#!/usr/bin/env bats
#
# lockrun across a fail-over of an asynchronous primary (run with
# tests/run-replication). Every job records, in a file of its own making,
# when it started with which token and when it ended; each scenario then
# asserts from those records alone that no two jobs holding the mutex
# overlapped and that tokens strictly increased. lockrun talks to both
# nodes (both.conf: node 1, then node 2). max-ttl is 8 s, so a fail-over's
# quarantine is 13 s; the figures each scenario measures go to the TAP
# output as comments.

bats_require_minimum_version 1.5.0

load suite

TTL=(--ttl 8 --kill-after 1)

setup() {
	repl_reset
	repl_clear_lockrun
	work=$LR_TMP/$(basename "$BATS_TEST_FILENAME" .bats).$BATS_TEST_NUMBER
	mkdir -p "$work"
	rec=$work/rec
	: >"$rec"
	"$LOCKRUNCTL" -q -c "$LR_REPL/admin$(repl_primary).conf" max-ttl 8s
	repl_wait_caught_up
	# job NAME SECONDS: what lockrun runs; records "start NAME TOKEN T" and
	# "end NAME T" (T in seconds since 1970), also when stopped.
	cat >"$work/job" <<-'EOF'
		#!/bin/sh
		echo "start $1 $LOCKRUN_FENCE $(date +%s.%N)" >>"$REC"
		trap 'echo "end $1 $(date +%s.%N)" >>"$REC"; exit 0' TERM
		sleep "$2" &
		wait
		echo "end $1 $(date +%s.%N)" >>"$REC"
	EOF
	chmod +x "$work/job"
	export REC=$rec
}

# The jobs a test left running (not a bare wait: bats's own timeout
# watchdog is a child too).
teardown() {
	local p
	for p in ${bg:-}; do
		kill "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
}

# lr NAME SECONDS [lockrun options...]: a job under lockrun, through both
# nodes, on the mutex fo.
lr() {
	local name=$1 secs=$2
	shift 2
	"$LOCKRUN" -c "$LR_REPL/both.conf" "${TTL[@]}" "$@" -x fo -- "$work/job" "$name" "$secs"
}

# lr_wait_for CMD...: run CMD every 0.1 s until it succeeds; fail after 20 s.
lr_wait_for() {
	local i
	for ((i = 0; i < 200; i++)); do
		"$@" && return 0
		sleep 0.1
	done
	echo "gave up after 20 s waiting for: $*" >&2
	return 1
}

started() { grep -q "^start $1 " "$rec"; }
ended() { grep -q "^end $1 " "$rec"; }

# exclusive: from the records alone, the jobs ran one at a time, each to its
# end, and each took a larger token than the one before.
exclusive() {
	awk '$1 == "start" { s[$2] = $4; f[$2] = $3; order[++n] = $2 }
		$1 == "end" { e[$2] = $3 }
		END {
			for (i = 1; i <= n; i++)
				if (!(order[i] in e)) { print "no end for " order[i]; bad = 1 }
			for (i = 2; i <= n; i++) {
				a = order[i - 1]; b = order[i]
				if (s[b] < e[a]) { printf "%s started %.3f s before %s ended\n", b, e[a] - s[b], a; bad = 1 }
				if (f[b] + 0 <= f[a] + 0) { print b "'"'"'s token " f[b] " is not above " a "'"'"'s " f[a]; bad = 1 }
			}
			exit bad
		}' "$rec" || {
		cat "$rec"
		return 1
	}
}

# since T NAME: seconds from T to NAME's start.
since() {
	awk -v t="$1" -v n="$2" '$1 == "start" && $2 == n { printf "%.1f", $4 - t }' "$rec"
}

now() { date +%s.%N; }

@test "the replica missed the grant: the next job waits out the quarantine, after the first was stopped" {
	repl_stop_applier
	lr A 30 3>&- &
	bg=$!
	lr_wait_for started A
	repl_kill_primary
	repl_promote
	local t0
	t0=$(now)
	run -0 lr B 0 -w 60
	# A's lockrun found its grant gone at its next renewal and stopped it.
	local rc=0
	wait "$bg" || rc=$?
	assert_equal "$rc" 76
	exclusive
	echo "# lost grant: B granted $(since "$t0" B) s after the promotion (quarantine 13 s)" >&3
	assert_equal "$(rsql "$(repl_primary)" "SELECT COUNT(*) FROM lr_epochs WHERE previous IS NOT NULL")" 1
}

@test "the replica missed renewals: the holder renews on the new primary and runs on; the next waits for it" {
	lr A 16 3>&- &
	bg=$!
	lr_wait_for started A
	repl_wait_caught_up
	repl_stop_applier
	sleep 4 # renewals the replica never gets
	repl_kill_primary
	repl_promote
	local t0
	t0=$(now)
	run -0 lr B 0 -w 60
	wait "$bg"
	exclusive
	echo "# lost renewals: B granted $(since "$t0" B) s after the promotion, A ran to its end" >&3
}

@test "the replica missed the release: the next job gets a larger token" {
	repl_stop_applier
	run -0 lr A 0
	repl_kill_primary
	repl_promote
	run -0 lr B 0 -w 60
	exclusive
}

@test "a job queued at the fail-over waits on the new primary and runs after the holder" {
	lr A 12 3>&- &
	bg=$!
	lr_wait_for started A
	lr B 0 -w 60 3>&- &
	bg+=" $!"
	queued() { [[ $(rsql 1 "SELECT COUNT(*) FROM lr_waiters") == 1 ]]; }
	lr_wait_for queued
	repl_wait_caught_up
	repl_kill_primary
	repl_promote
	local p
	for p in $bg; do
		wait "$p"
	done
	exclusive
}

@test "a planned switchover: the holder moves on to the new primary; the next job waits for it and the quarantine" {
	lr A 6 3>&- &
	bg=$!
	lr_wait_for started A
	lr B 0 -w 60 3>&- &
	bg+=" $!"
	local t0 p
	t0=$(now)
	repl_switchover
	for p in $bg; do
		wait "$p"
	done
	exclusive
	echo "# planned switchover: B granted $(since "$t0" B) s after it began (A held for 6 s; quarantine 13 s)" >&3
}

@test "semi-synchronous replication: the fail-over still holds grants back, and nothing overlaps" {
	repl_semisync_on
	lr A 30 3>&- &
	bg=$!
	lr_wait_for started A
	repl_kill_primary
	repl_promote
	local t0
	t0=$(now)
	run -0 lr B 0 -w 60
	wait "$bg" || true
	exclusive
	echo "# semi-sync: B granted $(since "$t0" B) s after the promotion" >&3
}

@test "the old primary comes back read-only: lockrun passes over it to the new primary" {
	repl_stop_applier
	run -0 lr A 0
	repl_kill_primary
	repl_promote
	repl_restart_old_primary_read_only
	# both.conf lists the old primary first: it answers, read-only.
	run -0 lr B 0 -w 60
	exclusive
	run -0 "$LOCKRUN" -c "$LR_REPL/both.conf" "${TTL[@]}" -w 60 -x other -- true
}

@test "no epoch for a reconnect to the same primary, nor for its restart" {
	run -0 lr A 0
	local p
	p=$(repl_primary)
	lr_server_stop "$(repl_node "$p")"
	_repl_node_start "$p"
	run -0 lr B 0 -n
	exclusive
	assert_equal "$(rsql "$(repl_primary)" "SELECT COUNT(*) FROM lr_epochs")" 1
}

@test "doctor knows the topology: the primary's replica and semi-sync, the replica's primary" {
	run "$LOCKRUNCTL" -c "$LR_REPL/admin1.conf" doctor
	assert_output --regexp "topology +a primary with 1 replica\(s\) attached, semi-sync OFF"
	run "$LOCKRUNCTL" -c "$LR_REPL/admin2.conf" doctor
	assert_output --regexp "FAIL +topology +a replica of 127\.0\.0\.11:[0-9]+ \(IO thread Yes, SQL"
	repl_semisync_on
	run "$LOCKRUNCTL" -c "$LR_REPL/admin1.conf" doctor
	assert_output --regexp "semi-sync ON \(1"
}

@test "doctor through several hosts reads each one's clock and connection, and says which did not answer" {
	run "$LOCKRUNCTL" -c "$LR_REPL/both.conf" --json doctor
	assert_output --regexp '"check":"host_clocks","status":"ok","detail":"against this host.s: 127\.0\.0\.11 [-+]0\.0[0-9]{2} s, 127\.0\.0\.12 [-+]0\.0[0-9]{2} s; 0\.0[0-9]{2} s apart'
	lr_server_stop "$(repl_node 2)"
	run "$LOCKRUNCTL" -c "$LR_REPL/both.conf" --json doctor
	assert_output --regexp '"check":"host_clocks","status":"ok","detail":"against this host.s: 127\.0\.0\.11 [-+]0\.0[0-9]{2} s, 127\.0\.0\.12 unknown \(no answer\)'
	# And how each host is reached, on a line of its own.
	assert_output --regexp '"check":"connection","status":"ok","detail":"127\.0\.0\.11: TCP, not encrypted; plugin '
	assert_output --regexp '"check":"connection","status":"warning","detail":"127\.0\.0\.12: no answer: '
}

# token NAME: the token NAME's job started with.
token() { awk -v n="$1" '$1 == "start" && $2 == n { print $3 }' "$rec"; }

# epochs N: node N's lr_epochs, one line each: epoch, server, previous.
epochs() { rsql "$1" "SELECT epoch, server, COALESCE(previous, '-') FROM lr_epochs ORDER BY epoch"; }

# ident N: how the name lockrun gives running node N as a writer begins
# (sql/routines/05-server.sql, lr_server_state): its server_id on MariaDB,
# its server_uuid on MySQL (where server_id need not differ).
ident() {
	if lr_server_is_mysql; then
		echo "server:$(repl_sql "$1" "SELECT @@server_uuid"):"
	else
		echo "server:1$1:"
	fi
}

# wait_started NAME: until NAME's job started; fail after 40 s (a
# quarantine is 13 s).
wait_started() {
	local i
	for ((i = 0; i < 400; i++)); do
		started "$1" && return 0
		sleep 0.1
	done
	echo "$1 did not start within 40 s" >&2
	return 1
}

# holder_on N NAME SECONDS: a job under lockrun through node N only, in the
# background (its pid appended to $bg).
holder_on() {
	"$LOCKRUN" -c "$LR_REPL/node$1.conf" "${TTL[@]}" -w 60 -x fo -- "$work/job" "$2" "$3" 3>&- &
	bg+=" $!"
}

@test "fail-back: an old primary that followed the new one and is promoted again starts an epoch, though it lacks the new one's" {
	run -0 lr A 0
	repl_wait_caught_up
	repl_kill_primary
	repl_promote
	# Node 1 comes back as node 2's replica and applies a first write of
	# node 2's, then stops applying: it never gets node 2's epoch.
	repl_sql 2 "CREATE DATABASE IF NOT EXISTS lrh; CREATE TABLE IF NOT EXISTS lrh.t (id INT PRIMARY KEY) ENGINE=InnoDB"
	repl_restart_old_primary_read_only
	repl_make_replica 1 current_pos
	repl_wait_caught_up
	repl_stop_applier
	holder_on 2 B 60
	wait_started B
	assert_equal "$(rsql 1 "SELECT COUNT(*) FROM lr_epochs")" 1
	# Node 2 fails while B holds the mutex; node 1 is promoted again.
	repl_kill_primary
	repl_promote
	local t0
	t0=$(now)
	run -0 lr C 0 -w 60
	# B's lockrun lost its lease with node 2 and stopped B before C ran.
	exclusive
	echo "# fail-back: C granted $(since "$t0" C) s after node 1's second promotion, token $(token C) > B's $(token B)" >&3
	run -0 epochs 1
	assert_line --regexp "^2	$(ident 1).*	$(ident 1)"
}

@test "an old primary restarted read-only and made writable again is not recognised (a limit); lockrunctl new-epoch starts its epoch" {
	run -0 lr A 0
	repl_kill_primary
	repl_promote
	holder_on 2 B 60
	wait_started B
	# Node 1 back read-only, replicating from nobody: it never applies
	# anything of node 2's, and its identity stays what its epoch names.
	repl_restart_old_primary_read_only
	repl_kill_primary
	repl_promote
	assert_equal "$(rsql 1 "SELECT COUNT(*) FROM lr_epochs")" 1
	# The fail-over tool's step (doc/production.md): a new epoch here.
	run -0 "$LOCKRUNCTL" -c "$LR_REPL/admin1.conf" new-epoch
	assert_output --regexp "^epoch 2: no new grants until .* UTC; tokens above [0-9]+$"
	run -0 lr C 0 -w 60
	exclusive
	run -0 epochs 1
	assert_line --regexp "^2	$(ident 1)[^	]*	$(ident 1)"
}

@test "a writable replica takes no lock while it replicates, and says why; doctor fails it also when stopped" {
	local p r before
	p=$(repl_primary)
	r=$(repl_replica)
	repl_sql "$r" "SET GLOBAL read_only = OFF"
	before=$(repl_written "$r")
	# Its threads run (as when a replica is promoted while its SQL
	# thread still applies old events): refused, nothing written.
	run -69 --separate-stderr "$LOCKRUN" -c "$LR_REPL/node$r.conf" "${TTL[@]}" -x fo -- true
	[[ $stderr == *"lockrun writes nothing on a replica, writable or not: this server replicates from another (1 channel(s) running)"*"(1290)"* ]] ||
		fail "$stderr"
	assert_equal "$(repl_written "$r")" "$before"
	run -1 "$LOCKRUNCTL" -c "$LR_REPL/admin$r.conf" --json doctor
	assert_output --partial '{"check":"read_only","status":"ok","detail":"the server accepts writes"}'
	assert_output --regexp "\"check\":\"topology\",\"status\":\"problem\",\"detail\":\"a replica of 127\.0\.0\.1$p:[0-9]+ \(IO thread Yes, SQL thread Yes\): lockrun cannot lock here, writable or not"
	# Its applier stopped, the routines cannot see it (doc/production.md):
	# doctor does.
	repl_stop_applier
	run -1 "$LOCKRUNCTL" -c "$LR_REPL/admin$r.conf" --json doctor
	assert_output --regexp "\"status\":\"problem\",\"detail\":\"a replica of 127\.0\.0\.1$p:[0-9]+ \(IO thread Yes, SQL thread No\)"
	# Promoted, it takes locks, after its epoch's quarantine.
	repl_kill_primary
	repl_promote
	run -0 lr A 0 -w 60
	assert_equal "$(rsql "$r" "SELECT COUNT(*) FROM lr_epochs WHERE previous IS NOT NULL")" 1
}

@test "a writable replica refuses renewals, releases and queue calls too (1290), and keeps replicating" {
	local p r lease before call
	p=$(repl_primary)
	r=$(repl_replica)
	"$LOCKRUN" -c "$LR_REPL/node$p.conf" "${TTL[@]}" -x fo -- \
		sh -c "echo \$LOCKRUN_LEASE >$work/lease; sleep 4" 3>&- &
	bg=$!
	lr_wait_for test -s "$work/lease"
	lease=$(<"$work/lease")
	repl_wait_caught_up
	repl_sql "$r" "SET GLOBAL read_only = OFF"
	before=$(repl_written "$r")
	# One write of any of these would give the replica a transaction of
	# its own, which stops its replication (GTID strict mode): a replica
	# that no longer replicates would then take locks.
	for call in "lockrun_renew('$lease', 8000)" "lockrun_release('$lease', 'exited', 0, NULL)" \
		"lockrun_poll('$(openssl rand -hex 16)')" "lockrun_dequeue('$(openssl rand -hex 16)')"; do
		run mariadb --no-defaults -h "$(repl_addr "$r")" -P "$(repl_port)" -u lockrun \
			-p"$(<"$LR_REPL/lockrun.pw")" lockrun -e "CALL $call"
		assert_failure
		assert_output --partial "ERROR 1290"
		assert_output --partial "lockrun writes nothing on a replica"
	done
	assert_equal "$(repl_written "$r")" "$before"
	assert_equal "$(repl_slave_field "$r" Slave_SQL_Running)" Yes
	repl_sql "$r" "SET GLOBAL read_only = ON"
	# The holder, on the primary, ran to its end and released there.
	wait "$bg"
	bg=
	assert_equal "$(rsql "$p" "SELECT end_reason FROM lr_grants WHERE request_id = '$lease'")" exited
}

@test "a raise of max-ttl reaches grants only after a minute: a replica that missed it missed no lease it allowed" {
	repl_stop_applier
	run -0 repl_ctl max-ttl 60s
	assert_output --regexp "^max-ttl 1m \(was 8s\): .* leases up to 1m from [0-9:]+ UTC, once replicas have it"
	run -64 --separate-stderr "$LOCKRUN" -c "$LR_REPL/both.conf" --ttl 60 -x fo -- true
	[[ $stderr == *"ttl_ms must be 1000-8000"* ]] || fail "$stderr"
	run -0 lr A 0
	# A replica that has the raise quarantines for it at once.
	repl_start_applier
	repl_wait_caught_up
	assert_equal "$(rsql "$(repl_replica)" "SELECT value FROM lr_settings WHERE name = 'max_ttl_ms'")" 60000
}

@test "a new primary whose clock is behind the previous writer's starts no epoch until it has passed that one's quarantine" {
	# The replica's copy of the epoch as a writer whose clock is 20 s
	# ahead of this machine's wrote it, just before granting token F + 1
	# (which the replica missed): its quarantine ends 28 s from now.
	local r floor
	r=$(repl_replica)
	rsql "$r" "UPDATE lr_epoch SET epoch = 5, server = 'server:99:elsewhere:3306:',
		started_at = UTC_TIMESTAMP(6) + INTERVAL 20 SECOND,
		quarantine_until = UTC_TIMESTAMP(6) + INTERVAL 28 SECOND,
		fence_floor = TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6) + INTERVAL 20 SECOND)"
	floor=$(rsql "$r" "SELECT fence_floor FROM lr_epoch")
	repl_kill_primary
	repl_promote
	run -1 "$LOCKRUNCTL" -c "$LR_REPL/admin$r.conf" new-epoch
	assert_output --partial "no new epoch: this server's clock has not passed the end of the previous writer's quarantine"
	run -75 --separate-stderr "$LOCKRUN" -c "$LR_REPL/node$r.conf" -v "${TTL[@]}" -n -x fo -- true
	[[ $stderr == *"this server's clock"*"is before the end of the previous writer's quarantine"* ]] || fail "$stderr"
	run -0 lr A 0 -w 90
	# Above every token the previous epoch could have issued in fewer
	# grants than its quarantine (8 s) has microseconds.
	(($(token A) > floor + 8000000)) || fail "token $(token A), floor $floor"
	run -0 epochs "$r"
	assert_line --regexp "^6	$(ident "$r").*	server:99:elsewhere:3306:$"
}
