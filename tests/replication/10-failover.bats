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
	assert_output --regexp "topology +a replica of 127\.0\.0\.11:[0-9]+: lockrun cannot lock here"
	repl_semisync_on
	run "$LOCKRUNCTL" -c "$LR_REPL/admin1.conf" doctor
	assert_output --regexp "semi-sync ON \(1"
}
