#!/usr/bin/env bats
#
# Counting semaphores end to end: exclusion judged from the children's own
# records, exit statuses, signals, waiting, idempotency keys, lease
# renewal and recovery after crashes.

load helpers/common
load helpers/records

bats_require_minimum_version 1.5.0

setup() {
	setup_records
}

@test "32 concurrent jobs on a semaphore of capacity 3: never more than 3 inside" {
	ctl set pool 3
	local i pids=()
	for i in $(seq 32); do
		"$LOCKRUN" -s pool:1 -- sh -c "$(rec_cmd "$rec" pool)" 3>&- &
		pids+=($!)
	done
	local failed=0
	for i in "${pids[@]}"; do wait "$i" || failed=$((failed + 1)); done
	assert_equal "$failed" 0
	assert_equal "$(rec_count "$rec" enter pool)" 32
	assert_equal "$(rec_count "$rec" leave pool)" 32
	local max
	max=$(rec_max "$rec" pool)
	((max <= 3)) || fail "$max inside at once"
	((max >= 2)) || fail "never more than one inside: not a semaphore"
	assert_equal "$(holds pool)" 0
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_grants WHERE end_reason = 'exited' AND exit_status = 0")" 32
}

@test "multi-semaphore requests racing with single ones: no partial grant, no overrun, no deadlock" {
	ctl set sa 2
	ctl set sb 3
	local i pids=()
	for i in $(seq 8); do
		"$LOCKRUN" -s sa:1 -s sb:2 -- sh -c "$(rec_cmd "$rec" sa:1 sb:2)" 3>&- &
		pids+=($!)
		"$LOCKRUN" -s sb:1 -- sh -c "$(rec_cmd "$rec" sb:1)" 3>&- &
		pids+=($!)
		"$LOCKRUN" -s sa:2 -- sh -c "$(rec_cmd "$rec" sa:2)" 3>&- &
		pids+=($!)
	done
	local failed=0
	for i in "${pids[@]}"; do wait "$i" || failed=$((failed + 1)); done
	assert_equal "$failed" 0
	local ma mb
	ma=$(rec_max "$rec" sa)
	mb=$(rec_max "$rec" sb)
	((ma <= 2)) || fail "sa: $ma permits in use at once, capacity 2"
	((mb <= 3)) || fail "sb: $mb permits in use at once, capacity 3"
	assert_equal "$(rec_count "$rec" enter sa)" 16
	assert_equal "$(rec_count "$rec" enter sb)" 16
	assert_equal "$(holds)" 0
}

@test "fencing tokens of a resource strictly increase over 100 grants" {
	ctl set fence1 1
	local w
	for w in $(seq 8); do
		(for i in $(seq 13); do
			"$LOCKRUN" -s fence1 -- sh -c 'flock "$0.lk" sh -c "echo \$LOCKRUN_FENCE >>\"$0\""' "$rec"
		done) 3>&- &
	done
	wait
	run wc -l <"$rec"
	assert_output 104
	# Granted one at a time, so the file is in grant order.
	run awk 'NR > 1 && $1 <= prev { print "token " $1 " after " prev; bad = 1 } { prev = $1 } END { exit bad }' "$rec"
	assert_success
	assert_equal "$(sql "SELECT fence FROM lr_resources WHERE name = 'fence1'")" 104
}

@test "exit status passes through: 0, 3, 255" {
	ctl set st 1
	run "$LOCKRUN" -s st -- true
	assert_success
	run "$LOCKRUN" -s st -- sh -c 'exit 3'
	assert_failure 3
	run "$LOCKRUN" -s st -- sh -c 'exit 255'
	assert_failure 255
	assert_equal "$(sql "SELECT GROUP_CONCAT(exit_status ORDER BY id) FROM lr_grants")" "0,3,255"
}

@test "a child killed by SIGKILL: 137, and its permit is free at once" {
	ctl set st 1
	run "$LOCKRUN" -s st -- sh -c 'kill -KILL $$'
	assert_failure 137
	assert_equal "$(holds st)" 0
	assert_equal "$(sql "SELECT CONCAT(end_reason, ' ', term_signal) FROM lr_grants")" "signaled 9"
}

@test "126 when the command cannot be executed, 127 when it is not found" {
	ctl set st 1
	run "$LOCKRUN" -s st -- "$BATS_TEST_TMPDIR"
	assert_failure 126
	printf 'echo hi\n' >"$BATS_TEST_TMPDIR/noexec"
	run "$LOCKRUN" -s st -- "$BATS_TEST_TMPDIR/noexec"
	assert_failure 126
	assert_output "lockrun: $BATS_TEST_TMPDIR/noexec: Permission denied"
	run -127 "$LOCKRUN" -s st -- no-such-command-here
	assert_output "lockrun: no-such-command-here: command not found"
	assert_equal "$(holds st)" 0
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_grants WHERE end_reason = 'spawn_failed'")" 3
}

@test "signals reach a grandchild in the child's process group; permits released after" {
	ctl set sig 1
	local mark=$BATS_TEST_TMPDIR/mark
	"$LOCKRUN" -s sig -- sh -c "sh -c 'trap \"echo TERM >$mark; exit 0\" TERM; echo up >$mark.up; while :; do sleep 0.05; done' & wait" 3>&- &
	local pid=$!
	lr_wait_for test -s "$mark.up"
	kill -TERM "$pid"
	local rc=0
	wait "$pid" || rc=$?
	lr_wait_for test -s "$mark"
	assert_equal "$(cat "$mark")" TERM
	assert_equal "$(holds sig)" 0
	# The shell in between died of the SIGTERM too: lockrun reports it.
	assert_equal "$rc" 143
}

@test "SIGUSR1 and SIGHUP are forwarded to the child" {
	ctl set sig 1
	local out=$BATS_TEST_TMPDIR/sigs
	"$LOCKRUN" -s sig -- sh -c "trap 'echo USR1 >>$out' USR1; trap 'echo HUP >>$out; exit 7' HUP; echo up >$out.up; while :; do sleep 0.05; done" 3>&- &
	local pid=$!
	lr_wait_for test -s "$out.up"
	kill -USR1 "$pid"
	lr_wait_for grep -q USR1 "$out"
	kill -HUP "$pid"
	local rc=0
	wait "$pid" || rc=$?
	assert_equal "$rc" 7
	assert_equal "$(cat "$out")" "$(printf 'USR1\nHUP')"
}

@test "-n and -w against a held semaphore: 75 in the expected time; -E changes the code" {
	ctl set busy 1
	"$LOCKRUN" -s busy -- sleep 5 3>&- &
	local holder=$!
	lr_wait_eq 1 holds busy
	local t0=$EPOCHREALTIME ms
	run "$LOCKRUN" -n -s busy -- echo never
	ms=$(((${EPOCHREALTIME/[.,]/} - ${t0/[.,]/}) / 1000))
	assert_failure 75
	assert_output --regexp "^lockrun: not acquired: 'busy' is busy \(1/1 used\); 'busy' held by $(hostname):$holder \(lockrun@[^)]+\), held [0-9]+s$"
	((ms < 1000)) || fail "-n took $ms ms"
	t0=$EPOCHREALTIME
	run "$LOCKRUN" -w 0.5 -s busy -- echo never
	ms=$(((${EPOCHREALTIME/[.,]/} - ${t0/[.,]/}) / 1000))
	assert_failure 75
	((ms >= 450 && ms < 1500)) || fail "-w 0.5 took $ms ms"
	run "$LOCKRUN" -q -n -E 9 -s busy -- echo never
	assert_failure 9
	assert_output ""
	kill "$holder"
	wait "$holder" || true
}

@test "a waiter gets the semaphore when the holder finishes" {
	ctl set handoff 1
	"$LOCKRUN" -s handoff -- sleep 1 3>&- &
	lr_wait_eq 1 holds handoff
	run "$LOCKRUN" -w 10 -s handoff -- echo got it
	assert_success
	assert_output "got it"
	wait
}

@test "bad requests: unknown semaphore, count 0, count over capacity, bad names; nothing written" {
	ctl set small 2
	local before
	before=$(sql "SELECT CONCAT((SELECT COUNT(*) FROM lr_resources), '/', (SELECT COUNT(*) FROM lr_grants), '/', (SELECT COUNT(*) FROM lr_holds))")
	run "$LOCKRUN" -s nosuch -- true
	assert_failure 64
	assert_output "lockrun: unknown semaphore 'nosuch'; create it with 'lockrunctl set nosuch CAPACITY'"
	run "$LOCKRUN" -s small:0 -- true
	assert_failure 64
	assert_output --partial "invalid count '0' for 'small'"
	run "$LOCKRUN" -s small:3 -- true
	assert_failure 64
	assert_output "lockrun: asked for 3 permits of semaphore 'small', whose capacity is 2"
	run "$LOCKRUN" -s 'sm@ll' -- true
	assert_failure 64
	assert_output --partial "invalid name 'sm@ll'"
	run "$LOCKRUN" -s "$(printf 'a%.0s' $(seq 65))" -- true
	assert_failure 64
	run "$LOCKRUN" -s small -s small -- true
	assert_failure 64
	assert_output "lockrun: 'small' is named more than once"
	run "$LOCKRUN" -s small:1 -s nosuch -- true
	assert_failure 64
	assert_equal "$(sql "SELECT CONCAT((SELECT COUNT(*) FROM lr_resources), '/', (SELECT COUNT(*) FROM lr_grants), '/', (SELECT COUNT(*) FROM lr_holds))")" "$before"
}

@test "an unknown semaphore does not wait, even with no --wait" {
	run timeout 5 "$LOCKRUN" -s nosuch -- true
	assert_failure 64
}

@test "kill -9 of the supervisor: the child dies too, the permit returns after the ttl and the grace" {
	ctl set crash 1
	local pidf=$BATS_TEST_TMPDIR/child.pid
	"$LOCKRUN" --ttl 3 --kill-after 0.5 -s crash -- sh -c "echo \$\$ >$pidf; exec sleep 60" 3>&- &
	local sup=$!
	lr_wait_for test -s "$pidf"
	local child t0
	child=$(cat "$pidf")
	kill -KILL "$sup"
	t0=$EPOCHREALTIME
	lr_wait_for -t 3 sh -c "! kill -0 $child 2>/dev/null"
	run "$LOCKRUN" -w 15 -s crash -- true
	assert_success
	local ms=$(((${EPOCHREALTIME/[.,]/} - ${t0/[.,]/}) / 1000))
	# A lease is swept 5 s (the grace) after it expired.
	((ms <= 3000 + 5000 + 1500)) || fail "permit came back after $ms ms, ttl 3 s + 5 s grace"
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_grants WHERE end_reason = 'expired'")" 1
}

@test "--id: a second copy does not start while the first runs; after it, one does" {
	ctl set idsem 5
	"$LOCKRUN" --id nightly -s idsem -- sleep 2 3>&- &
	lr_wait_eq 1 sql "SELECT COUNT(*) FROM lr_holds WHERE resource = 'id:nightly'"
	local t0=$EPOCHREALTIME
	run "$LOCKRUN" --id nightly -s idsem -- echo second
	assert_failure 75
	assert_output "lockrun: not acquired: another run with --id 'nightly' is still going"
	local ms=$(((${EPOCHREALTIME/[.,]/} - ${t0/[.,]/}) / 1000))
	((ms < 1000)) || fail "took $ms ms: it waited"
	wait
	run "$LOCKRUN" --id nightly -s idsem -- echo second
	assert_success
	assert_output second
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_grants WHERE idem_key = 'nightly'")" 2
}

@test "SIGTERM while waiting: stops waiting, exits, holds nothing" {
	ctl set wait1 1
	"$LOCKRUN" -s wait1 -- sleep 5 3>&- &
	local holder=$!
	lr_wait_eq 1 holds wait1
	"$LOCKRUN" -s wait1 -- echo never 3>&- &
	local waiter=$!
	sleep 0.5
	kill -TERM "$waiter"
	local rc=0
	wait "$waiter" || rc=$?
	assert_equal "$rc" 143
	assert_equal "$(holds wait1)" 1
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_grants")" 1
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_waiters")" 0
	kill "$holder"
	wait "$holder" || true
}

@test "the lease is renewed while the child runs longer than the ttl" {
	ctl set renew 1
	run "$LOCKRUN" --ttl 2 --kill-after 0.2 -s renew -- sh -c 'sleep 3.5; echo done'
	assert_success
	assert_output done
	# Renewals pushed the expiry past acquisition + ttl.
	assert_equal "$(sql "SELECT end_reason FROM lr_grants")" exited
}

@test "a ttl too short for the kill grace is refused before anything happens" {
	run "$LOCKRUN" --ttl 3 --kill-after 5 -s anything -- true
	assert_failure 64
	assert_output --partial "ttl 3 with kill-after 5 cannot be safe"
}

@test "the child inherits stdio but not the database connection" {
	ctl set fds 1
	run sh -c 'echo from-stdin | "$0" -s fds -- sh -c "cat; for f in /proc/\$\$/fd/*; do readlink \$f || true; done"' "$LOCKRUN"
	assert_success
	assert_line from-stdin
	refute_output --partial "socket:"
}

@test "the command sees LOCKRUN_FENCE, LOCKRUN_FENCES, LOCKRUN_LEASE and LOCKRUN_GRANT" {
	ctl set e1 1
	ctl set e2 2
	run "$LOCKRUN" -s e1 -- sh -c 'echo "$LOCKRUN_FENCE|$LOCKRUN_FENCES|$LOCKRUN_LEASE|$LOCKRUN_GRANT"'
	assert_success
	local gid lease
	gid=$(sql "SELECT MAX(id) FROM lr_grants")
	# LOCKRUN_LEASE is the grant's secret (lr_grants.request_id), the
	# number is LOCKRUN_GRANT.
	lease=$(sql "SELECT request_id FROM lr_grants WHERE id = $gid")
	[[ $lease =~ ^[0-9a-f]{32}$ ]] || fail "lease '$lease'"
	assert_output "1|e1=1|$lease|$gid"
	run "$LOCKRUN" -s e2 -s e1 -- sh -c 'echo "${LOCKRUN_FENCE-unset}|$LOCKRUN_FENCES"'
	assert_output "unset|e1=2 e2=1"
}

@test "lockrunctl set records every change; lowering below use stops new grants" {
	ctl set audited 2
	ctl set audited 2
	ctl set audited 3
	assert_equal "$(sql "SELECT GROUP_CONCAT(CONCAT(COALESCE(old_capacity, '-'), '>', new_capacity) ORDER BY id) FROM lr_capacity_audit WHERE resource = 'audited'")" "->2,2>3"
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_capacity_audit WHERE os_user = '$(id -un)' AND host = '$(hostname)' AND db_user LIKE 'root@%'")" 2
	# Held until the test says so: a fixed sleep ran out before the check
	# on a loaded machine.
	"$LOCKRUN" -s audited:2 -- sh -c 'while [ ! -e "$0" ]; do sleep 0.1; done' \
		"$BATS_TEST_TMPDIR/done" 3>&- &
	lr_wait_eq 2 holds audited
	ctl set audited 1
	run "$LOCKRUN" -n -s audited -- true
	assert_failure 75
	touch "$BATS_TEST_TMPDIR/done"
	wait
	run "$LOCKRUN" -n -s audited -- true
	assert_success
}

@test "lockrunctl set refuses bad input with a one-line error" {
	run "$LOCKRUNCTL" -c "$LR_ADMIN_CONFIG" set 'bad name' 3
	assert_failure 64
	assert_output --partial "invalid name 'bad name'"
	run "$LOCKRUNCTL" -c "$LR_ADMIN_CONFIG" set ok lots
	assert_failure 64
	assert_output "lockrunctl: invalid capacity 'lots': use a whole number 1-1000000"
	run "$LOCKRUNCTL" -c "$LR_ADMIN_CONFIG" set ok 2000000
	assert_failure 64
	run "$LOCKRUNCTL" -c "$LR_ADMIN_CONFIG" set ok
	assert_failure 64
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_resources")" 0
}

@test "waiting with -v says what it waits for" {
	ctl set vis 1
	"$LOCKRUN" -s vis -- sleep 2 3>&- &
	lr_wait_eq 1 holds vis
	run "$LOCKRUN" -v -w 0.3 -s vis -- true
	assert_failure 75
	assert_output --partial "waiting: 'vis' is busy (1/1 used); 'vis' held by $(hostname):"
	wait
}

@test "a permit freed by a holder that is not the oldest goes to the queued waiter at once" {
	ctl set s3 3
	# H1, the oldest holder, stays to the end: every permit comes from
	# another holder, and each round's waiter takes it.
	local h pids=()
	for h in H1 H2 H3; do
		"$LOCKRUN" -s s3 -- sh -c "$(until_cmd "$h")" 3>&- &
		pids+=($!)
		lr_wait_for grep -q "enter $h" "$rec"
	done
	local prev=H2 next=H3 i ms deltas=()
	for i in 1 2 3 4 5; do
		"$LOCKRUN" -s s3 -- sh -c "$(until_cmd "W$i")" 3>&- &
		pids+=($!)
		lr_wait_eq 1 waiters s3
		sleep 0.5 # settled into its wait
		touch "$BATS_TEST_TMPDIR/go.$prev"
		lr_wait_for grep -q "enter W$i" "$rec"
		ms=$(($(rec_ms enter "W$i") - $(rec_ms leave "$prev")))
		((ms >= 0)) || fail "W$i entered before $prev left"
		deltas+=("$ms")
		prev=$next
		next=W$i
	done
	echo "# release to start, ms: ${deltas[*]}" >&3
	# Never more than 3 inside, and the oldest holder was there throughout.
	run awk '$1 == "enter" { n++ } $1 == "leave" { n-- } n > 3 { bad = 1 } END { exit bad }' "$rec"
	assert_success
	assert_equal "$(rec_count "$rec" leave H1)" 0
	# Generous bounds (a loaded machine): the waiter is woken by the
	# release itself, not by a poll that comes up to a second later.
	local d
	for d in "${deltas[@]}"; do
		((d < 3000)) || fail "a hand-off took $d ms: ${deltas[*]}"
	done
	(($(median "${deltas[@]}") < 500)) || fail "median hand-off over 500 ms: ${deltas[*]}"
	for h in H1 W1 W2 W3 W4 W5; do
		touch "$BATS_TEST_TMPDIR/go.$h"
	done
	wait "${pids[@]}"
	assert_equal "$(holds s3)" 0
}
