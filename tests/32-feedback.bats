#!/usr/bin/env bats
#
# What lockrun tells the people who wait or lose: a refusal names the
# holder (host:pid, account, how long held); -v into a log (not a
# terminal) writes a line when the holder or the place in the queue
# changes, at least once a minute while it lasts, and why a paused
# resource makes it wait; a holder released by force says by whom and
# why. Judged from stderr and exit statuses.
# Resource names start with fb-.

load helpers/common
load helpers/records

bats_require_minimum_version 1.5.0

setup() {
	setup_records
	pids=()
	gate=$BATS_TEST_TMPDIR/gate
}

teardown() {
	kill_pids
}

# hold NAME: a holder of mutex NAME until $gate exists; h is its pid.
hold() {
	"$LOCKRUN" -x "$1" -- sh -c "$(rec_cmd "$rec" H); while [ ! -e '$gate' ]; do sleep 0.05; done" 3>&- &
	h=$!
	pids+=("$h")
	lr_wait_eq 1 holds "$1"
}

@test "-n and a --wait that runs out name the holder: host:pid, account, how long held" {
	hold fb-n
	sleep 1.2
	run -75 "$LOCKRUN" -n -x fb-n -- true
	assert_output --regexp "^lockrun: not acquired: 'fb-n' is busy; 'fb-n' held by $(hostname):$h \(lockrun@[^)]+\), held [1-9][0-9]*s$"
	run -75 "$LOCKRUN" -w 0.5 -x fb-n -- true
	assert_output --regexp "^lockrun: not acquired: 'fb-n' is busy; 'fb-n' held by $(hostname):$h \(lockrun@[^)]+\), held [1-9][0-9]*s$"
	touch "$gate"
}

@test "-v into a log: a line when the holder changes; the reason of a pause" {
	hold fb-v
	# Two waiters with places of their own (no host queue): the second
	# starts behind H's grant and the first waiter, and ends up behind
	# the first waiter's grant.
	"$LOCKRUN" --no-local-queue -w 30 -x fb-v -- sh -c "$(rec_cmd "$rec" W1 -- 0.5)" 3>&- &
	pids+=($!)
	lr_wait_eq 1 sql "SELECT COUNT(*) FROM lr_waiters WHERE resource = 'fb-v'"
	"$LOCKRUN" --no-local-queue -v -w 30 -x fb-v -- true 2>"$BATS_TEST_TMPDIR/w2.err" 3>&- &
	local w2=$!
	pids+=("$w2")
	lr_wait_eq 2 sql "SELECT COUNT(*) FROM lr_waiters WHERE resource = 'fb-v'"
	sleep 1
	touch "$gate"
	wait "$w2"
	run cat "$BATS_TEST_TMPDIR/w2.err"
	echo "$output"
	assert_line --regexp "^lockrun: waiting: 'fb-v' is busy; 'fb-v' held by $(hostname):$h \(lockrun@[^)]+\), held [0-9]+s$"
	assert_line --regexp "^lockrun: waiting for 'fb-v': 1/1 used, held by $(hostname):[0-9]+ \(lockrun@[^)]+\), 0 ahead in the queue$"
	[[ $output != *"1/1 used, held by $(hostname):$h "*"0 ahead"* ]] ||
		fail "the line after the hand-off still names the first holder"
	# A paused resource: the waiter's line says so, with the reason.
	"$LOCKRUNCTL" -c "$LR_ADMIN_CONFIG" -q pause fb-v --reason "swapping disks"
	run -75 "$LOCKRUN" --no-local-queue -v -w 1.5 -x fb-v -- true
	assert_line --regexp "^lockrun: waiting: 'fb-v' is paused since [0-9-]+ [0-9:]+ UTC: swapping disks$"
	"$LOCKRUNCTL" -c "$LR_ADMIN_CONFIG" -q resume fb-v
}

@test "a holder released by force says by whom and why, and exits 76" {
	"$LOCKRUN" --ttl 3 --kill-after 0.5 --on-lost=kill -x fb-f -- sleep 30 2>"$BATS_TEST_TMPDIR/f.err" 3>&- &
	local f=$!
	pids+=("$f")
	lr_wait_eq 1 holds fb-f
	local g
	g=$(sql "SELECT g.id FROM lr_grants g JOIN lr_holds h ON h.grant_id = g.id WHERE h.resource = 'fb-f'")
	"$LOCKRUNCTL" -c "$LR_ADMIN_CONFIG" -q release "$g" --reason "stuck on NFS"
	local st=0
	wait "$f" || st=$?
	assert_equal "$st" 76
	run cat "$BATS_TEST_TMPDIR/f.err"
	assert_output --partial "the lease of grant $g was lost: released by force by "
	assert_output --regexp "\($(id -un)@[^)]+\): stuck on NFS"
}

# most_said: how often the most repeated "waiting" line of the log on
# stdin was written.
most_said() {
	grep "^lockrun: waiting" | sort | uniq -c | sort -rn | awk 'NR == 1 { print $1 }'
}

@test "-v into a log: a wait that does not change is still said at least once a minute" {
	hold fb-min
	# Boottime (which paces the repeats) runs 60 times as fast for this
	# waiter: a minute passes each second.
	LD_PRELOAD=$LR_TOOLS/lrclock.so LR_CLOCK_BOOT_SCALE=60 \
		"$LOCKRUN" --no-local-queue -v -w 6 -x fb-min -- true 2>"$BATS_TEST_TMPDIR/fast.err" 3>&- &
	pids+=($!)
	lr_wait_eq 1 sql "SELECT COUNT(*) FROM lr_waiters WHERE resource = 'fb-min'"
	# Beside it, one on the true clock says it once in the same time.
	run -75 "$LOCKRUN" --no-local-queue -v -w 5 -x fb-min -- true
	local slow fast
	slow=$(most_said <<<"$output")
	wait "${pids[-1]}" || true
	fast=$(most_said <"$BATS_TEST_TMPDIR/fast.err")
	cat "$BATS_TEST_TMPDIR/fast.err"
	assert_equal "$slow" 1
	((fast >= 3)) || fail "said $fast times in 5 minutes of its clock"
	touch "$gate"
}

@test "--log-format=json: every line one JSON object with time, program, pid, level and message" {
	run -127 "$LOCKRUN" --log-format=json -v -x fb-json -- "$BATS_TEST_TMPDIR/no"$'\e]0;x\a'"such"
	echo "$output"
	# Each line parses alone; info and error lines both come; the escape
	# in the command's name is kept, as JSON escapes, not raw.
	python3 -c '
import json, sys
levels = set()
for line in sys.stdin.read().splitlines():
    o = json.loads(line)
    assert sorted(o) == ["level", "message", "pid", "program", "time"], o
    assert o["program"] == "lockrun" and isinstance(o["pid"], int), o
    assert o["time"].endswith("Z") and len(o["time"]) == 27, o
    levels.add(o["level"])
    if o["level"] == "error":
        assert "\x1b]0;x\x07such" in o["message"], o
assert {"info", "error"} <= levels, levels
' <<<"$output"
	[[ $output != *$'\e'* ]] || fail "a raw escape reached stderr"
	run -64 "$LOCKRUN" --log-format=xml -x fb-json -- true
	assert_output "lockrun: --log-format: 'xml' is not 'text' or 'json' (see 'lockrun --help')"
}
