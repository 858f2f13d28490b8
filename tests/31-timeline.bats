#!/usr/bin/env bats
#
# lockrunctl timeline: the lock log of a window as a picture. Runs of a
# mutex (one that ends well, one that waited for it and exits 3, one
# killed by a signal) and of a semaphore of 2 (three holders, one of them
# waiting) are drawn as an SVG, which is parsed (tests/tools/svgcheck.py)
# and opened in headless Chromium, whose screenshot must show the bars'
# colours; and as text. Resource names start with tl-.

load helpers/common

bats_require_minimum_version 1.5.0

# three_runs MUTEX SECS: A holds MUTEX 1.5 s; B waits for it, runs SECS
# and exits 3; then C is killed by a signal.
three_runs() {
	"$LOCKRUN" -x "$1" -- sleep 1.5 3>&- &
	local a=$!
	sleep 0.3
	"$LOCKRUN" -w 10 -x "$1" -- sh -c "sleep $2; exit 3" 3>&- || true
	wait "$a"
	"$LOCKRUN" -x "$1" -- sh -c 'kill -9 $$' 3>&- || true
}

setup_file() {
	reset_db
	"$LOCKRUNCTL" -c "$LR_ADMIN_CONFIG" -q set tl-s 2
	three_runs tl-m 0.5
	# The semaphore: two hold at once, a third waits for one of them.
	"$LOCKRUN" -s tl-s:1 -- sleep 1 3>&- &
	local p1=$!
	"$LOCKRUN" -s tl-s:1 -- sleep 1.5 3>&- &
	local p2=$!
	sleep 0.3
	"$LOCKRUN" -w 10 -s tl-s:1 -- sleep 0.2 3>&-
	wait "$p1" "$p2"
}

c() {
	"$LOCKRUNCTL" -c "$LR_ADMIN_CONFIG" "$@"
}

# fact NAME: a line of svgcheck.py's report on $facts.
fact() { awk -v k="$1" '$1 == k { $1 = ""; sub(/^ /, ""); print }' <<<"$facts"; }

@test "the SVG: a bar per grant, coloured by how it ended, waits drawn, one lane per holder slot, no script" {
	local svg=$BATS_TEST_TMPDIR/t.svg
	run c timeline tl-m tl-s --since 10m -o "$svg"
	assert_success
	assert_output "$svg: 6 grants"
	facts=$(python3 "$LR_SRC/tests/tools/svgcheck.py" svg "$svg")
	echo "$facts"
	assert_equal "$(fact grants)" 6
	assert_equal "$(fact class_ok)" 4
	assert_equal "$(fact class_failed)" 1
	assert_equal "$(fact class_killed)" 1
	assert_equal "$(fact waits)" 2
	assert_equal "$(fact lanes_tl-m)" 1
	assert_equal "$(fact lanes_tl-s)" 2
	assert_equal "$(fact scripts)" 0
	assert_equal "$(fact external)" 0
	# Every grant of the log is there, by its number.
	assert_equal "$(fact ids)" "$(sql "SELECT GROUP_CONCAT(DISTINCT g.id ORDER BY g.id SEPARATOR ' ')
		FROM lr_grants g JOIN lr_grant_items i ON i.grant_id = g.id WHERE i.resource IN ('tl-m', 'tl-s')")"
	# The hover text has the details: host, pid, command, how it ended.
	run grep -c "exited 3" "$svg"
	assert_output 1
	grep -q "sh -c sleep 0.5; exit 3" "$svg"
}

@test "headless Chromium renders it: the screenshot shows the bars of runs that ended well, failed and were killed" {
	local svg=$BATS_TEST_TMPDIR/t.svg shot=$BATS_TEST_TMPDIR/shot.png
	c -q timeline tl-m tl-s --since 10m -o "$svg"
	run timeout 90 chromium --headless --no-sandbox --disable-gpu --hide-scrollbars \
		--screenshot="$shot" --window-size=1200,300 "file://$svg"
	assert_success
	facts=$(python3 "$LR_SRC/tests/tools/svgcheck.py" png "$shot" 3a9a48 e8912d d63c3c)
	echo "$facts"
	assert_equal "$(fact size)" 1200x300
	(($(fact not_white) > 5000))
	(($(fact colour_3a9a48) > 100))
	(($(fact colour_e8912d) > 20))
	(($(fact colour_d63c3c) > 5))
}

@test "as text: a lane per holder slot, marks by how each run ended, the window's ends" {
	run c timeline tl-m tl-s --since 10m
	assert_success
	echo "$output"
	assert_line --index 0 --regexp '^ +[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9:]{8} +[0-9:]{8} UTC$'
	assert_line --index 1 --regexp '^ tl-m +\|[ .#fk]{60}\|$'
	assert_line --index 2 --regexp '^ tl-s +\|[ .#]{60}\|$'
	assert_line --index 3 --regexp '^ {21} \|[ .#]{60}\|$'
	assert_line --index 4 --partial "marks: = running, # exited 0, f exited non-zero, k killed"
	# Runs of their own in a window of 15 s (a quarter of a second a
	# column): one that ends well, one that waited for it and exits 3, one
	# killed by a signal, in that order.
	three_runs tl-t 1
	run c timeline tl-t --since 15s
	assert_success
	echo "$output"
	assert_line --index 1 --regexp '^ tl-t +\| *#{4,}f{2,}k+ *\|$'
	run c timeline tl-t --since 10m --until 9m
	assert_success
	assert_output "no grants in this window"
}

@test "bad input: a bad name or window is 64, an unwritable file 73, nothing written" {
	run -64 c timeline 'tl bad'
	assert_output --partial "invalid name 'tl bad'"
	run -64 c timeline --since 1h --until 2h
	assert_output "lockrunctl: --until must be less long ago than --since"
	run -73 c timeline tl-m -o /nonexistent/dir/t.svg
	assert_output --partial "cannot write /nonexistent/dir/t.svg"
	run -64 c timeline --json
	assert_output --partial "option '--json' does not apply to 'timeline'"
}

@test "more than 20000 grants in the window: the first 20000 by resource name are drawn, and the cut is said" {
	# 20000 grants of tl-cut-a, 10 ms apart, then 5 of tl-cut-b: written
	# by hand (runs would take minutes), within the last 5 minutes.
	sql "INSERT INTO lr_grants (request_id, host, pid, os_user, db_user, command, ttl_ms,
			requested_at, acquired_at, ended_at, end_reason, exit_status)
		SELECT LEFT(SHA2(CONCAT('tl-cut', seq), 256), 32), 'cut', seq, 'u', 'u@h', 'true', 30000,
			UTC_TIMESTAMP(6) - INTERVAL (250000 - seq * 10) * 1000 MICROSECOND,
			UTC_TIMESTAMP(6) - INTERVAL (250000 - seq * 10) * 1000 MICROSECOND,
			UTC_TIMESTAMP(6) - INTERVAL (250000 - seq * 10 - 5) * 1000 MICROSECOND,
			'exited', 0
		  FROM $(seq_rows 1 20005) q;
		INSERT INTO lr_grant_items (grant_id, resource, kind, permits, fence)
		SELECT id, IF(pid <= 20000, 'tl-cut-a', 'tl-cut-b'), 'mutex', 1, pid
		  FROM lr_grants WHERE host = 'cut'"
	run c timeline tl-cut-b tl-cut-a --since 10m
	assert_success
	echo "$output"
	assert_line --index 1 --regexp '^ tl-cut-a +\|[ #]{60}\|$'
	refute_line --partial tl-cut-b
	assert_line "cut at 20000 grants, the first by resource name: name fewer resources"
	run c timeline tl-cut-b tl-cut-a --since 10m -o "$BATS_TEST_TMPDIR/cut.svg"
	assert_success
	run grep -c '<rect class="hold"' "$BATS_TEST_TMPDIR/cut.svg"
	assert_output 20000
	run grep -o 'lockrun timeline: [^<]*' "$BATS_TEST_TMPDIR/cut.svg"
	assert_output --regexp ', 20000 grants \(cut: the first by resource name; name fewer resources\)$'
	# Named alone, tl-cut-b is drawn whole.
	run c timeline tl-cut-b --since 10m
	assert_success
	assert_line --index 1 --regexp '^ tl-cut-b +\|[ #]{60}\|$'
	refute_line --partial "cut at"
	sql "DELETE i, g FROM lr_grant_items i JOIN lr_grants g ON g.id = i.grant_id WHERE g.host = 'cut'"
}
