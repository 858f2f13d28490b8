#!/usr/bin/env bats
#
# --once-per (at most one successful run per key and window of the
# database server's clock), --once-offset, --done-exit-code and
# --min-hold; and the SQL API's once item. Judged from the children's own
# records, exit statuses and the rows of lr_grants and lr_once. Windows
# are placed by the server's clock: every test reads it to choose its
# moment, never the host's.

load helpers/common
load helpers/records

bats_require_minimum_version 1.5.0

setup() {
	setup_records
	sql "DELETE FROM lr_once"
	pids=()
}

teardown() {
	kill_pids
}

# srv_ms: the server's clock, UTC, in ms since the epoch.
srv_ms() {
	sql "SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000"
}

# window_start SECONDS [OFFSET_S]: sleep until 200 ms after the next start
# of a window of SECONDS by the server's clock, so that what follows has
# almost the whole window.
window_start() {
	local p=$(($1 * 1000)) off=$((${2:-0} * 1000)) now left
	now=$(srv_ms)
	left=$((p - (now - off) % p))
	sleep "$(awk -v l="$left" 'BEGIN { printf "%.3f", (l + 200) / 1000 }')"
}

# once KEY PERIOD [OPTIONS...] -- COMMAND...: lockrun with --once-per.
once() {
	local key=$1 per=$2
	shift 2
	"$LOCKRUN" --id "$key" --once-per "$per" "$@"
}

# grants KEY REASON: the lock-log rows of KEY that ended so.
grants() {
	sql "SELECT COUNT(*) FROM lr_grants WHERE idem_key = '$1' AND end_reason = '$2'"
}

@test "lockruns of one key and window started together run the command once, and all exit 0" {
	local p rc
	window_start 8
	for _ in 1 2 3 4 5; do
		once k1 8 -- sh -c "$(rec_cmd "$rec" job -- 0.5)" 3>&- &
		pids+=($!)
	done
	for p in "${pids[@]}"; do
		rc=0
		wait "$p" || rc=$?
		assert_equal "$rc" 0
	done
	assert_equal "$(rec_count "$rec" enter job)" 1
	assert_equal "$(grants k1 exited)" 1
	assert_equal "$(grants k1 skipped)" 4
	# A skip is in the log with its window and items, but never held them.
	assert_equal "$(sql "SELECT COUNT(DISTINCT g.once_window), MIN(g.once_period_ms),
		SUM(i.fence IS NULL), COUNT(i.grant_id) FROM lr_grants g
		JOIN lr_grant_items i ON i.grant_id = g.id
		WHERE g.idem_key = 'k1' AND g.end_reason = 'skipped'")" "$(printf '1\t8000\t4\t4')"
	assert_equal "$(holds)" 0
	assert_equal "$(waiters)" 0
}

@test "staggered starts within the window run it once; the others say why at -v and exit with --done-exit-code" {
	window_start 8
	run once k2 8 -- sh -c "$(rec_cmd "$rec" job)"
	assert_success
	sleep 1
	run -0 once k2 8 -- sh -c "$(rec_cmd "$rec" job)"
	assert_output ""
	sleep 1
	run once k2 8 -v -- sh -c "$(rec_cmd "$rec" job)"
	assert_success
	assert_output --regexp "lockrun: not run: the window from [0-9-]+ [0-9:]+ UTC already has a successful run of --id 'k2' \(grant [0-9]+"
	sleep 1
	run once k2 8 --done-exit-code 3 -q -- sh -c "$(rec_cmd "$rec" job)"
	assert_equal "$status" 3
	# The site's default, from [lock] done_exit_code.
	{ cat "$LOCKRUN_CONFIG"; printf '[lock]\ndone_exit_code = 4\n'; } >"$BATS_TEST_TMPDIR/c.conf"
	run once k2 8 -c "$BATS_TEST_TMPDIR/c.conf" -- sh -c "$(rec_cmd "$rec" job)"
	assert_equal "$status" 4
	assert_equal "$(rec_count "$rec" enter job)" 1
	assert_equal "$(grants k2 skipped)" 4
}

@test "the next window runs it again" {
	window_start 4
	run -0 once k3 4 -- sh -c "$(rec_cmd "$rec" job)"
	run -0 once k3 4 -- sh -c "$(rec_cmd "$rec" job)"
	assert_equal "$(rec_count "$rec" enter job)" 1
	window_start 4
	run -0 once k3 4 -- sh -c "$(rec_cmd "$rec" job)"
	assert_equal "$(rec_count "$rec" enter job)" 2
	# Two runs, in windows 4 s apart.
	assert_equal "$(sql "SELECT TIMESTAMPDIFF(MICROSECOND, MIN(once_window), MAX(once_window))
		FROM lr_grants WHERE idem_key = 'k3' AND end_reason = 'exited'")" 4000000
}

@test "a failed, killed or lost run leaves the window open: the next attempt in it runs" {
	local a rc
	window_start 8
	run once k4 8 -- sh -c "$(rec_cmd "$rec" job); exit 1"
	assert_failure 1
	run once k4 8 -- sh -c "$(rec_cmd "$rec" job); kill -KILL \$\$"
	assert_equal "$status" 137
	# An operator takes the hold away: the next renewal finds it lost.
	once k4 8 --ttl 3 --kill-after 0.5 -- sh -c "$(loop_cmd L)" 3>&- &
	a=$!
	pids+=("$a")
	lr_wait_for grep -q "enter L" "$rec"
	sql "DELETE FROM lr_holds WHERE resource = 'id:k4'"
	rc=0
	wait "$a" || rc=$?
	assert_equal "$rc" 76
	run -0 once k4 8 -- sh -c "$(rec_cmd "$rec" job)"
	run -0 once k4 8 -- sh -c "$(rec_cmd "$rec" job)"
	assert_equal "$(rec_count "$rec" enter job)" 3
	assert_equal "$(sql "SELECT GROUP_CONCAT(CONCAT(end_reason, ':', COALESCE(exit_status, term_signal, ''))
		ORDER BY id) FROM lr_grants WHERE idem_key = 'k4'")" "exited:1,signaled:9,lost:0,exited:0,skipped:"
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_once WHERE idem_key = 'k4'")" 1
}

# holder_and_waiter KEY NAME TAIL: a --once-per 10 run of KEY that stays
# until go.NAME exists and then runs TAIL ($a), and a second one that
# waits for it, recording W.KEY if it runs ($b).
holder_and_waiter() {
	once "$1" 10 -- sh -c "$(until_cmd "$2"); $3" 3>&- &
	a=$!
	pids+=("$a")
	lr_wait_eq 1 holds "id:$1"
	once "$1" 10 -- sh -c "$(rec_cmd "$rec" "W.$1")" 3>&- &
	b=$!
	pids+=("$b")
	lr_wait_eq 1 waiters "id:$1"
}

@test "a run that finds the key held waits for that run: done if it succeeded, runs if it failed; -n does not wait" {
	local a b rc
	window_start 10
	holder_and_waiter k5 A "exit 0"
	run once k5 10 -n -- sh -c "$(rec_cmd "$rec" C)"
	assert_failure 75
	assert_output --regexp "^lockrun: not acquired: another run with --id 'k5' is still going; 'k5' held by [^ ]+ \(lockrun@[^)]+\), held [0-9]+s$"
	touch "$BATS_TEST_TMPDIR/go.A"
	wait "$a"
	rc=0
	wait "$b" || rc=$?
	assert_equal "$rc" 0
	assert_equal "$(rec_count "$rec" enter W.k5)" 0
	# It failed: the waiter runs it, in the same window.
	holder_and_waiter k5b D "exit 1"
	touch "$BATS_TEST_TMPDIR/go.D"
	rc=0
	wait "$a" || rc=$?
	assert_equal "$rc" 1
	wait "$b"
	assert_equal "$(rec_count "$rec" enter W.k5b)" 1
	assert_equal "$(sql "SELECT COUNT(DISTINCT once_window) FROM lr_grants WHERE idem_key = 'k5b'")" 1
}

@test "the window is the server's clock at the grant, floored to the period and shifted by --once-offset" {
	local win
	run -0 "$LOCKRUN" --id k6 --once-per 7 --once-offset 3 -- sh -c 'echo "$LOCKRUN_WINDOW"'
	win=$output
	assert_equal "$(sql "SELECT once_window = TIMESTAMP('1970-01-01 00:00:00') + INTERVAL
			((TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', acquired_at) DIV 1000 - 3000)
			 DIV 7000 * 7000 + 3000) * 1000 MICROSECOND,
		once_period_ms, DATE_FORMAT(once_window, '%Y-%m-%dT%H:%i:%sZ')
		FROM lr_grants WHERE idem_key = 'k6'")" "$(printf '1\t7000\t%s' "$win")"
	# Whole days from the epoch, at UTC midnight: no time zone enters.
	run -0 "$LOCKRUN" --id k6d --once-per 1d -- sh -c 'echo "$LOCKRUN_WINDOW"'
	assert_output "$(sql "SELECT DATE_FORMAT(UTC_DATE(), '%Y-%m-%dT00:00:00Z')")"
}

@test "a window that starts inside a second has the fraction in LOCKRUN_WINDOW" {
	run -0 "$LOCKRUN" --id k6f --once-per 1 --once-offset 0.25 -- sh -c 'echo "$LOCKRUN_WINDOW"'
	assert_output --regexp '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.25Z$'
	assert_equal "$(sql "SELECT CONCAT(DATE_FORMAT(once_window, '%Y-%m-%dT%H:%i:%s.'),
		TRIM(TRAILING '0' FROM LPAD(MICROSECOND(once_window), 6, '0')), 'Z')
		FROM lr_grants WHERE idem_key = 'k6f'")" "$output"
	run -0 "$LOCKRUN" --id k6g --once-per 1.5 -- sh -c 'echo "$LOCKRUN_WINDOW"'
	assert_output --regexp '^[0-9T:-]{19}(\.5)?Z$'
}

@test "bad --once-per, --once-offset, --min-hold and --done-exit-code values are usage errors that write nothing" {
	local args
	while IFS= read -r args; do
		# shellcheck disable=SC2086 # word splitting wanted
		run "$LOCKRUN" $args -- true
		assert_equal "$status" 64
		assert_equal "${#lines[@]}" 1
		assert_output --regexp "^lockrun: --(once-per|once-offset|min-hold|done-exit-code)( needs|:| must)"
	done <<'EOF'
--id k --once-per 0
--id k --once-per -5
--id k --once-per 5x
--id k --once-per abc
--id k --once-per 367d
--id k --once-per 0.5
--once-per 5m -x m
--id k --once-per 5m --once-offset 5m
--id k --once-per 5m --once-offset 1h
--id k --once-offset 1m
--id k --once-per 5m --once-offset -1
--id k --min-hold 2d
--id k --min-hold soon
--id k --once-per 5m --done-exit-code 256
EOF
	assert_equal "$(sql "SELECT (SELECT COUNT(*) FROM lr_grants) + (SELECT COUNT(*) FROM lr_resources)")" 0
	# The limits themselves are fine.
	run -0 "$LOCKRUN" --id k7 --once-per 366d --once-offset 0 --min-hold 0 --done-exit-code 255 -- true
	run -0 "$LOCKRUN" --id k7b --once-per 1 --once-offset 0.999 --min-hold 0.1s -- true
}

@test "--min-hold keeps the locks after a short command and exits with the command's status" {
	local a rc
	"$LOCKRUN" -x mh --id kmh --min-hold 3 -- sh -c "touch $BATS_TEST_TMPDIR/ran; exit 3" 3>&- &
	a=$!
	pids+=("$a")
	lr_wait_for test -e "$BATS_TEST_TMPDIR/ran"
	sleep 1
	assert_equal "$(holds mh)" 1
	run "$LOCKRUN" -n -x mh -- true
	assert_failure 75
	rc=0
	wait "$a" || rc=$?
	assert_equal "$rc" 3
	assert_equal "$(holds mh)" 0
	assert_equal "$(sql "SELECT CONCAT(end_reason, ':', exit_status, ':',
		TIMESTAMPDIFF(MICROSECOND, acquired_at, ended_at) >= 3000000)
		FROM lr_grants WHERE idem_key = 'kmh'")" "exited:3:1"
}

@test "a stop during --min-hold releases at once and exits with the command's status" {
	local a rc t0
	"$LOCKRUN" -x mh2 --min-hold 30 -- sh -c "touch $BATS_TEST_TMPDIR/ran" 3>&- &
	a=$!
	pids+=("$a")
	lr_wait_for test -e "$BATS_TEST_TMPDIR/ran"
	sleep 0.5
	assert_equal "$(holds mh2)" 1
	t0=${EPOCHREALTIME/[.,]/}
	kill -TERM "$a"
	rc=0
	wait "$a" || rc=$?
	assert_equal "$rc" 0
	(((${EPOCHREALTIME/[.,]/} - t0) < 3000000)) || fail "took more than 3 s to stop"
	assert_equal "$(holds mh2)" 0
	assert_equal "$(sql "SELECT end_reason FROM lr_grants")" exited
}

# --- the SQL API -----------------------------------------------------------

# app SQL: SQL as the runtime account over TCP, like an application (see
# tests/14-sql-api.bats); tab-separated, a header line per result.
app() {
	MYSQL_PWD=$(<"$LR_DB/lockrun.pw") mariadb --no-defaults --skip-ssl-verify-server-cert -h 127.0.0.1 \
		-P "$LR_PORT" -u lockrun -D lockrun -B -e "$1"
}

# field NAME RESULT: column NAME of the first row of RESULT.
field() {
	awk -F '\t' -v n="$1" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == n) c = i; next }
		c && NR == 2 { print $c }' <<<"$2"
}

newid() { openssl rand -hex 16; }

@test "SQL API: a once item is a key with a window; an exited 0 release closes the window, other ends do not" {
	local per=3600000 off item req lease out
	# A window that began a second ago on the server: an hour to spare.
	off=$((($(srv_ms) - 1000) % per))
	item=once:s1:$per:$off
	req=$(newid) lease=$(newid)
	out=$(app "CALL lockrun_acquire('$item', '$req', '$lease', 30000, 0, 'h', 1, 'u', 'c')")
	assert_equal "$(field outcome "$out")" granted
	assert_equal "$(field resource "$out")" id:s1
	[[ $(field once_window "$out") == 20* ]] || fail "no once_window in: $out"
	app "CALL lockrun_release('$lease', 'exited', 1, NULL)" >/dev/null
	lease=$(newid)
	out=$(app "CALL lockrun_acquire('$item', '$req', '$lease', 30000, 0, 'h', 1, 'u', 'c')")
	assert_equal "$(field outcome "$out")" granted
	app "CALL lockrun_release('$lease', 'exited', 0, NULL)" >/dev/null
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_once WHERE idem_key = 's1'")" 1
	lease=$(newid)
	out=$(app "CALL lockrun_acquire('$item', '$req', '$lease', 30000, 1, 'h', 1, 'u', 'c')")
	assert_equal "$(field outcome "$out")" done
	assert_equal "$(field grant_id "$out")" NULL
	assert_equal "$(field state "$out")" done
	[[ $(field done_by "$out") =~ ^[0-9]+$ ]] || fail "no done_by in: $out"
	assert_equal "$(sql "SELECT end_reason FROM lr_grants WHERE request_id = '$lease'")" skipped
	assert_equal "$(waiters)" 0
	# Settled after a lost answer, done stays done.
	out=$(app "CALL lockrun_settle('$item', '$req', '$lease')")
	assert_equal "$(field outcome "$out")" done
	assert_equal "$(field once_window "$out")" "$(sql "SELECT once_window FROM lr_grants WHERE request_id = '$lease'")"
	# Only 'exited' with status 0 closes a window.
	for end in "'lost', NULL, 9" "'signaled', NULL, 15" "'aborted', NULL, NULL" "'spawn_failed', NULL, NULL"; do
		lease=$(newid)
		out=$(app "CALL lockrun_acquire('once:s2:$per:$off', '$req', '$lease', 30000, 0, 'h', 1, 'u', 'c')")
		assert_equal "$(field outcome "$out")" granted
		app "CALL lockrun_release('$lease', $end)" >/dev/null
	done
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_once WHERE idem_key = 's2'")" 0
	# The same key without a window is still just a key.
	lease=$(newid)
	out=$(app "CALL lockrun_acquire('key:s1', '$req', '$lease', 30000, 0, 'h', 1, 'u', 'c')")
	assert_equal "$(field outcome "$out")" granted
	assert_equal "$(field once_window "$out")" NULL
}

@test "SQL API: a bad once item is refused with 1644 before anything is written" {
	local req lease it
	req=$(newid) lease=$(newid)
	for it in once:k once:k:999 once:k:5000:5000 once:k:abc once:k:5000:x \
		once:a:5000,once:b:5000 once:k:31622400001 once:k:5000:1:2; do
		run app "CALL lockrun_acquire('$it', '$req', '$lease', 30000, 0, 'h', 1, 'u', 'c')"
		assert_failure
		assert_output --regexp "ERROR 1644 .*lockrun: (invalid once item '|give at most one once item)"
	done
	assert_equal "$(sql "SELECT (SELECT COUNT(*) FROM lr_grants) + (SELECT COUNT(*) FROM lr_resources)")" 0
}

@test "a success whose grant was released by force before its release: lockrun says the window stays open, and the next run in it runs" {
	local gid
	# ttl 30: no renewal (every 10 s) notices the force release before
	# the command ends; only the release learns of it.
	once fr 1d --ttl 30 -- sh -c "echo \"\$LOCKRUN_GRANT\" >'$BATS_TEST_TMPDIR/g';
		while [ ! -e '$BATS_TEST_TMPDIR/go' ]; do sleep 0.05; done" \
		3>&- 2>"$BATS_TEST_TMPDIR/err" &
	pids+=($!)
	lr_wait_for test -s "$BATS_TEST_TMPDIR/g"
	gid=$(<"$BATS_TEST_TMPDIR/g")
	ctl release "$gid" --reason "a test"
	touch "$BATS_TEST_TMPDIR/go"
	local rc=0
	wait "${pids[0]}" || rc=$?
	pids=()
	assert_equal "$rc" 0
	run cat "$BATS_TEST_TMPDIR/err"
	assert_output "lockrun: warning: could not release grant $gid (it had ended before its release: released by force by root@localhost ($(id -un)@$(hostname)): a test): the lock log does not record how the command ended, and its window stays open: the success was not recorded"
	# The command's end is kept beside the force release, and the window
	# is open: the next run in it runs.
	assert_equal "$(sql "SELECT CONCAT(end_reason, ':', exit_status) FROM lr_grants WHERE id = $gid")" "force_released:0"
	run -0 once fr 1d -- sh -c "echo ran >'$BATS_TEST_TMPDIR/second'"
	assert_equal "$(cat "$BATS_TEST_TMPDIR/second")" ran
}
