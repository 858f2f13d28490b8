#!/usr/bin/env bats
#
# Mutexes, read-write locks, named locks, mixed requests, the FIFO queue,
# and status. Exclusion and order are judged from the children's records.

load helpers/common
load helpers/records

setup() {
	setup_records
}

# note FILE WORD: a child's command that appends WORD under the file lock.
note() {
	printf 'flock %q sh -c %q' "$1.lk" "echo $2 >>$1"
}

@test "a mutex is created on first use and excludes" {
	local i
	for i in $(seq 10); do
		"$LOCKRUN" -x mtx -- sh -c "$(rec_cmd "$rec" mtx -- 0.05)" 3>&- &
	done
	wait
	assert_equal "$(rec_count "$rec" enter mtx)" 10
	assert_equal "$(rec_max "$rec" mtx)" 1
	assert_equal "$(sql "SELECT CONCAT(kind, ' ', capacity) FROM lr_resources WHERE name = 'mtx'")" "mutex 1"
}

@test "24 mixed readers and writers: readers overlap, writers are alone" {
	local i
	for i in $(seq 24); do
		if ((i % 3 == 0)); then
			"$LOCKRUN" --write rw -- sh -c "$(rec_cmd "$rec" W -- 0.1)" 3>&- &
		else
			"$LOCKRUN" --read rw -- sh -c "$(rec_cmd "$rec" R -- 0.2)" 3>&- &
		fi
	done
	wait
	assert_equal "$(rec_count "$rec" enter R)" 16
	assert_equal "$(rec_count "$rec" enter W)" 8
	run awk '$1 == "enter" { n[$2]++ } $1 == "leave" { n[$2]-- }
		$1 == "enter" && (n["W"] > 1 || (n["W"] > 0 && n["R"] > 0)) { print "line " NR ": R=" n["R"] " W=" n["W"]; bad = 1 }
		n["R"] > maxr { maxr = n["R"] }
		END { print "max readers " maxr; exit bad || maxr < 2 }' "$rec"
	assert_success
	assert_equal "$(holds)" 0
}

@test "a stream of readers does not keep a waiting writer out" {
	local go=$BATS_TEST_TMPDIR/go
	# The first reader stays until the writer waits and readers came
	# behind it, however slow the machine.
	"$LOCKRUN" --read doc -- sh -c "$(rec_cmd "$rec" R0 -- until "$go")" 3>&- &
	lr_wait_eq 1 holds doc
	"$LOCKRUN" --write doc -- sh -c "$(rec_cmd "$rec" W -- 0.3)" 3>&- &
	lr_wait_eq 1 waiters doc
	# Readers keep arriving for 3 s, each staying 0.5 s: without a queue
	# they would overlap one another and starve the writer throughout.
	local i
	for i in $(seq 15); do
		"$LOCKRUN" --read doc -- sh -c "$(rec_cmd "$rec" L -- 0.5)" 3>&- &
		sleep 0.2
		((i != 5)) || touch "$go"
	done
	wait
	# The writer went in right after the first reader left, before any
	# reader that came after it.
	run awk '/^enter/ { print $2 }' "$rec"
	assert_equal "${lines[0]}" R0
	assert_equal "${lines[1]}" W
	run grep -n "leave R0\|enter W\|leave W\|enter L" "$rec"
	assert_line --index 0 --regexp "leave R0"
	assert_line --index 1 --regexp "enter W"
	assert_line --index 2 --regexp "leave W"
}

@test "waiters started in a known order are served in that order" {
	# The holder stays until all six wait, however slow the machine.
	local gate=$BATS_TEST_TMPDIR/gate
	"$LOCKRUN" -x fifo -- sh -c "while [ ! -e $gate ]; do sleep 0.05; done" 3>&- &
	lr_wait_eq 1 holds fifo
	local i
	for i in 1 2 3 4 5 6; do
		"$LOCKRUN" -x fifo -- sh -c "$(note "$rec" "$i")" 3>&- &
		lr_wait_eq "$i" waiters fifo
	done
	touch "$gate"
	wait
	assert_equal "$(tr '\n' ' ' <"$rec")" "1 2 3 4 5 6 "
	assert_equal "$(waiters)" 0
}

@test "a request for 3 permits is not starved by a stream of 1-permit requests" {
	ctl set wide 3
	# Keep two or three 1-permit jobs inside at all times for 4 s.
	(for i in $(seq 20); do
		"$LOCKRUN" -s wide:1 -- sh -c "$(rec_cmd "$rec" wide:1 -- 0.4)" &
		sleep 0.2
	done
	wait) 3>&- &
	local stream=$!
	sleep 0.6
	local t0=$EPOCHREALTIME
	run "$LOCKRUN" -s wide:3 -- sh -c "$(rec_cmd "$rec" wide:3 -- 0.1)"
	assert_success
	local ms=$(((${EPOCHREALTIME/[.,]/} - ${t0/[.,]/}) / 1000))
	wait "$stream"
	# It waited only for the jobs already inside (0.4 s each), not for
	# the end of the stream (about 3.5 s later).
	((ms < 2000)) || fail "the 3-permit request waited $ms ms"
	assert_equal "$(rec_max "$rec" wide)" 3
}

@test "a waiter whose lockrun died stops blocking the queue when its place expires" {
	"$LOCKRUN" -x dead -- sleep 1 3>&- &
	lr_wait_eq 1 holds dead
	"$LOCKRUN" --ttl 3 --kill-after 0.5 -x dead -- echo never 3>&- &
	local ghost=$!
	lr_wait_eq 1 waiters dead
	kill -KILL "$ghost"
	local t0=$EPOCHREALTIME
	run "$LOCKRUN" -w 30 -x dead -- echo second
	assert_success
	assert_output second
	local ms=$(((${EPOCHREALTIME/[.,]/} - ${t0/[.,]/}) / 1000))
	# The dead waiter's place lasts 10 s (whatever its ttl) after it last
	# renewed it, and is swept 5 s (the grace) after that.
	((ms < 15000 + 2500)) || fail "waited $ms ms behind a dead waiter"
	wait
}

@test "--named: exclusion across processes, no tables needed" {
	local i
	for i in $(seq 8); do
		"$LOCKRUN" --named nm1 -- sh -c "$(rec_cmd "$rec" nm1 -- 0.05)" 3>&- &
	done
	wait
	assert_equal "$(rec_count "$rec" enter nm1)" 8
	assert_equal "$(rec_max "$rec" nm1)" 1
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_grants")" 0
	# A database without lockrun's schema serves named locks all the same.
	sql "CREATE DATABASE IF NOT EXISTS lr_noschema"
	printf '[database]\nsocket = %s\nuser = root\ndatabase = lr_noschema\n' "$LR_SOCKET" >"$BATS_TEST_TMPDIR/c"
	run "$LOCKRUN" -c "$BATS_TEST_TMPDIR/c" --named nm1 -- echo ok
	assert_success
	assert_output ok
	sql "DROP DATABASE lr_noschema"
}

@test "--named: killing the holder's connection stops the command with the lock-lost code" {
	local mark=$BATS_TEST_TMPDIR/mark
	# The default ttl (30 s, a check every 10 s): noticing the loss must not
	# wait for the next check, since the server frees the lock at once.
	"$LOCKRUN" --named nk -- sh -c "trap 'echo TERM >$mark; exit 0' TERM; while :; do sleep 0.05; done" 3>&- &
	local pid=$!
	lr_wait_eq 1 sql "SELECT IS_USED_LOCK('nk') IS NOT NULL"
	sleep 0.2
	local t0=$EPOCHREALTIME
	sql "KILL $(sql "SELECT IS_USED_LOCK('nk')")"
	local rc=0
	wait "$pid" || rc=$?
	local ms=$(((${EPOCHREALTIME/[.,]/} - ${t0/[.,]/}) / 1000))
	assert_equal "$rc" 76
	assert_equal "$(cat "$mark")" TERM
	((ms < 1500)) || fail "noticed after $ms ms"
}

@test "--named waits for the holder, then runs" {
	"$LOCKRUN" --named nw -- sleep 1 3>&- &
	lr_wait_eq 1 sql "SELECT IS_USED_LOCK('nw') IS NOT NULL"
	run "$LOCKRUN" -n --named nw -- true
	assert_failure 75
	assert_output "lockrun: not acquired: named lock 'nw' is held by another session"
	run "$LOCKRUN" -w 5 --named nw -- echo got
	assert_success
	assert_output got
}

@test "a mixed request is all or nothing" {
	ctl set slots 2
	"$LOCKRUN" -x mm -- sleep 1.5 3>&- &
	lr_wait_eq 1 holds mm
	run "$LOCKRUN" -n -s slots:1 -x mm -- true
	assert_failure 75
	assert_equal "$(holds slots)" 0
	# Waiting, it holds none of the parts meanwhile.
	"$LOCKRUN" -w 10 --read cfg -s slots:1 -x mm -- sh -c "$(note "$rec" got)" 3>&- &
	local waiter=$!
	sleep 0.5
	assert_equal "$(holds slots)" 0
	assert_equal "$(holds cfg)" 0
	wait "$waiter"
	assert_equal "$(cat "$rec")" got
	# And with a named lock in the mix.
	"$LOCKRUN" --named nmix -- sleep 1 3>&- &
	lr_wait_eq 1 sql "SELECT IS_USED_LOCK('nmix') IS NOT NULL"
	run "$LOCKRUN" -n --named nmix -s slots:1 -- true
	assert_failure 75
	assert_equal "$(holds slots)" 0
	wait
}

@test "one name as two kinds is refused" {
	ctl set sx 1
	run "$LOCKRUN" -x sx -- true
	assert_failure 64
	assert_output "lockrun: 'sx' is a semaphore, not a mutex"
	run "$LOCKRUN" --read sx -- true
	assert_failure 64
	assert_output "lockrun: 'sx' is a semaphore, not a rwlock"
	run "$LOCKRUN" --read dup --write dup -- true
	assert_failure 64
	assert_output "lockrun: 'dup' is named more than once"
	run "$LOCKRUN" -n -x dup2 --named dup2 -- true
	assert_failure 64
	assert_output "lockrun: 'dup2' is named more than once"
	assert_equal "$(holds)" 0
}

@test "status --json shows what is held and waiting, in queue order" {
	ctl set shown 2
	local gate=$BATS_TEST_TMPDIR/gate
	"$LOCKRUN" -s shown:2 -- sh -c "while [ ! -e $gate ]; do sleep 0.05; done" 3>&- &
	local holder=$!
	lr_wait_eq 2 holds shown
	"$LOCKRUN" -s shown:1 -- true 3>&- &
	local w1=$!
	lr_wait_eq 1 waiters shown
	"$LOCKRUN" -s shown:2 -- true 3>&- &
	local w2=$!
	lr_wait_eq 2 waiters shown
	run "$LOCKRUNCTL" -c "$LR_ADMIN_CONFIG" status --json shown
	assert_success
	run python3 -c '
import json, sys
r = json.loads(sys.argv[1])["resources"]
assert len(r) == 1, r
r = r[0]
print(r["name"], r["kind"], r["capacity"], r["used"])
print("holders", *[(h["pid"], h["permits"], h["token"]) for h in r["holders"]])
print("waiters", *[(w["pid"], w["permits"]) for w in r["waiters"]])' "$output"
	assert_success
	assert_line --index 0 "shown semaphore 2 2"
	assert_line --index 1 "holders ($holder, 2, 1)"
	assert_line --index 2 "waiters ($w1, 1) ($w2, 2)"
	run "$LOCKRUNCTL" -c "$LR_ADMIN_CONFIG" status shown
	assert_line --index 0 --regexp "^shown +semaphore 2/2 used$"
	assert_line --index 1 --regexp "^  holder .*:$holder .*, token 1, lease [0-9]+s left$"
	assert_line --index 3 --regexp "^  waiter 1: .*:$w1 .*, 1 permit$"
	assert_line --index 5 --regexp "^  waiter 2: .*:$w2 .*, 2 permits$"
	local line
	for line in "${lines[@]}"; do ((${#line} <= 80)) || fail "wider than 80 columns: $line"; done
	touch "$gate"
	wait
	run "$LOCKRUNCTL" -c "$LR_ADMIN_CONFIG" status nosuch
	assert_failure 1
}

@test "--id behind a queued run with the same key exits as soon as that run is granted" {
	"$LOCKRUN" -x idq -- sleep 1 3>&- &
	lr_wait_eq 1 holds idq
	"$LOCKRUN" --id k1 -x idq -- sleep 3 3>&- &
	local first=$!
	lr_wait_eq 1 waiters idq
	local t0=$EPOCHREALTIME
	run "$LOCKRUN" --id k1 -x idq -- echo second
	assert_failure 75
	assert_output --regexp "^lockrun: not acquired: another run with --id 'k1' is still going(; 'idq' held by [^ ]+ \(lockrun@[^)]+\), held [0-9]+s)?$"
	# Out when the first run got the key (after about 1 s), not when it ended.
	local ms=$(((${EPOCHREALTIME/[.,]/} - ${t0/[.,]/}) / 1000))
	((ms < 2500)) || fail "took $ms ms"
	kill -0 "$first"
	wait
}

@test "a waiter whose count no longer fits a lowered capacity is told at once" {
	ctl set shrink 3
	"$LOCKRUN" -s shrink:3 -- sleep 3 3>&- &
	lr_wait_eq 3 holds shrink
	"$LOCKRUN" -s shrink:3 -- true 3>"$BATS_TEST_TMPDIR/out" 2>&1 &
	local waiter=$!
	lr_wait_eq 1 waiters shrink
	ctl set shrink 2
	local t0=$EPOCHREALTIME rc=0
	wait "$waiter" || rc=$?
	local ms=$(((${EPOCHREALTIME/[.,]/} - ${t0/[.,]/}) / 1000))
	assert_equal "$rc" 64
	((ms < 1500)) || fail "took $ms ms"
	assert_equal "$(waiters)" 0
	wait
}

@test "named locks have no token and no lease row" {
	run "$LOCKRUN" --named nenv -- sh -c 'echo "${LOCKRUN_FENCE-unset}|$LOCKRUN_FENCES|${LOCKRUN_LEASE-unset}|${LOCKRUN_GRANT-unset}"'
	assert_success
	assert_output "unset||unset|unset"
	run "$LOCKRUN" -n --named nenv -x menv -- sh -c 'echo "$LOCKRUN_FENCE|$LOCKRUN_FENCES"'
	assert_success
	assert_output "1|menv=1"
}

@test "named locks starting with lockrun. are reserved" {
	run "$LOCKRUN" --named lockrun.schema -- true
	assert_failure 64
	assert_output --partial "names starting with 'lockrun.' are reserved"
}

@test "a write lock queued behind several readers is granted when the last reader leaves" {
	local r pids=()
	for r in R1 R2 R3; do
		"$LOCKRUN" --read wbr -- sh -c "$(until_cmd "$r")" 3>&- &
		pids+=($!)
		lr_wait_for grep -q "enter $r" "$rec"
	done
	"$LOCKRUN" --write wbr -- sh -c "$(until_cmd W)" 3>&- &
	pids+=($!)
	lr_wait_eq 1 waiters wbr
	sleep 0.5
	# The oldest reader and a newer one leave: the writer still waits.
	touch "$BATS_TEST_TMPDIR/go.R1" "$BATS_TEST_TMPDIR/go.R3"
	lr_wait_eq 1 holds wbr
	sleep 0.5
	assert_equal "$(rec_count "$rec" enter W)" 0
	touch "$BATS_TEST_TMPDIR/go.R2"
	lr_wait_for grep -q "enter W" "$rec"
	local ms=$(($(rec_ms enter W) - $(rec_ms leave R2)))
	echo "# last reader out to writer in: $ms ms" >&3
	((ms >= 0)) || fail "the writer entered before the last reader left"
	((ms < 2000)) || fail "the writer entered $ms ms after the last reader left"
	touch "$BATS_TEST_TMPDIR/go.W"
	wait "${pids[@]}"
	assert_equal "$(holds wbr)" 0
	assert_equal "$(waiters wbr)" 0
}
