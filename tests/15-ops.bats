#!/usr/bin/env bats
#
# lockrunctl's operator commands: history, sweep, release, check, status
# (per holder and waiter, and the Prometheus format), list, delete and
# doctor. Judged from outside: exit codes, what they print, and the rows
# they leave.

load helpers/common
load helpers/records

bats_require_minimum_version 1.5.0

setup() {
	reset_db
	pids=()
}

teardown() {
	kill_pids
	# A test that changed max_ttl_ms behind lockrunctl's back.
	[[ -z ${restore_max:-} ]] ||
		sql "UPDATE lr_settings SET value = 300000, grant_ms = NULL, grant_until = NULL
			WHERE name = 'max_ttl_ms'"
	if [[ -n ${ro_inst:-} ]]; then
		lr_server_stop "$ro_inst" || true
	fi
}

# c ARGS...: lockrunctl as the administrator (not quiet).
c() {
	"$LOCKRUNCTL" -c "$LR_ADMIN_CONFIG" "$@"
}

# grant_of RESOURCE: the grant number of RESOURCE's (first) holder.
grant_of() {
	sql "SELECT MIN(grant_id) FROM lr_holds WHERE resource = '$1'"
}

# A fingerprint of every row lockrunctl could write.
rows_fingerprint() {
	sql "SELECT * FROM lr_resources ORDER BY name; SELECT * FROM lr_grants ORDER BY id;
		SELECT * FROM lr_holds ORDER BY resource, grant_id; SELECT * FROM lr_waiters ORDER BY resource, ticket;
		SELECT * FROM lr_capacity_audit ORDER BY id; SELECT * FROM lr_fence_floor ORDER BY name;
		SELECT * FROM lr_grant_items ORDER BY grant_id, resource" | md5sum
}

# insert_grant ID ACQUIRED ENDED REASON: a log row written as lockrun
# would (ENDED may be NULL; times are SQL expressions).
insert_grant() {
	sql "INSERT INTO lr_grants (id, request_id, host, pid, os_user, db_user, command, ttl_ms,
		requested_at, acquired_at, ended_at, end_reason, exit_status)
		VALUES ($1, LPAD(HEX($1), 32, '0'), 'h1', 100 + $1, 'u1', 'd1', 'job $1', 30000,
		$2, $2, $3, $4, IF($4 = 'exited', 0, NULL))"
}

@test "bad input is a one-line usage error (64) naming the culprit, and writes nothing" {
	ctl set ops-u 2
	run "$LOCKRUN" -x ops-u2 -- true
	assert_success
	local before
	before=$(rows_fingerprint)
	local -a cases=(
		"--since|history --since 5x"
		"--since|history --since -1d"
		"--retention|sweep --retention 7w"
		"--retention|sweep --retention 1.5.d"
		"--limit|history --limit 0"
		"--limit|history --limit ten"
		"bad/name|history bad/name"
		"bad/name|delete bad/name"
		"'abc'|check abc"
		"'0'|check 0"
		"'-3'|release -3 --reason x"
		"'ops-u'|check 1 ops-u"
		"'ops-u='|check 1 ops-u="
		"'=4'|check 1 =4"
		"'ops-u=x'|check 1 ops-u=x"
		"'b@d=1'|check 1 b@d=1"
		"--reason|release 1"
		"--reason|release 1 --reason="
		"'pie'|status --format pie"
		"'--since'|list --since 1d"
		"'--names'|status --names"
		"'--reason'|sweep --reason x"
		"'delete'|delete"
		"'release'|release 1 2 --reason x"
	)
	local case culprit
	for case in "${cases[@]}"; do
		culprit=${case%%|*}
		# shellcheck disable=SC2086 # word splitting wanted
		run --separate-stderr "$LOCKRUNCTL" -c "$LR_ADMIN_CONFIG" ${case#*|}
		[[ $status -eq 64 ]] || fail "'${case#*|}' exited $status, not 64: $stderr"
		[[ ${#stderr_lines[@]} -eq 1 ]] || fail "'${case#*|}' wrote ${#stderr_lines[@]} lines: $stderr"
		[[ $stderr == *"$culprit"* ]] || fail "'${case#*|}' does not name $culprit: $stderr"
		[[ -z $output ]] || fail "'${case#*|}' printed: $output"
	done
	# A reason longer than the 255 characters the log keeps.
	run --separate-stderr "$LOCKRUNCTL" -c "$LR_ADMIN_CONFIG" release 1 \
		--reason "$(printf 'é%.0s' {1..256})"
	assert_equal "$status" 64
	[[ $stderr == *255* ]] || fail "$stderr"
	assert_equal "$(rows_fingerprint)" "$before"
}

@test "--help documents every command and every exit code" {
	run "$LOCKRUNCTL" --help
	assert_success
	local w
	for w in init set status list delete history sweep release check doctor prometheus \
		"--since" "--limit" "--retention" "--reason" "--names" DURATION; do
		assert_output --partial "$w"
	done
	for w in " 0 " " 1 " 64 69 70 71 75 78; do
		assert_output --partial "$w"
	done
}

@test "list shows every resource; --names only the names, keys as id:KEY; --json parses" {
	ctl set ops-l 3
	run "$LOCKRUN" -x ops-lm --id nightly -- true
	assert_success
	run c list --names
	assert_success
	assert_output "$(printf 'id:nightly\nops-l\nops-lm')"
	run c list
	assert_success
	assert_line --index 0 --regexp '^NAME +KIND +CAPACITY +USED +TOKEN$'
	assert_line --index 2 --regexp '^ops-l +semaphore +3 +0 +0$'
	assert_line --index 3 --regexp '^ops-lm +mutex +1 +0 +1$'
	run c list --json
	assert_success
	run python3 -c 'import json, sys
for r in json.loads(sys.argv[1])["resources"]: print(r["name"], r["kind"], r["capacity"], r["fence"])' "$output"
	assert_output "$(printf 'id:nightly key 1 1\nops-l semaphore 3 0\nops-lm mutex 1 1')"
}

@test "delete is refused while held (75) or waited on (75), and a missing name is 1" {
	ctl set ops-d 1
	local gate=$BATS_TEST_TMPDIR/gate
	"$LOCKRUN" -s ops-d -- sh -c "while [ ! -e $gate ]; do sleep 0.05; done" 3>&- &
	pids+=($!)
	lr_wait_eq 1 holds ops-d
	"$LOCKRUN" -s ops-d -- true 3>&- &
	local waiter=$!
	pids+=($waiter)
	lr_wait_eq 1 waiters ops-d
	run --separate-stderr c delete ops-d
	assert_equal "$status" 75
	[[ $stderr == *"'ops-d' is in use (1 holder, 1 waiter)"* ]] || fail "$stderr"
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_resources WHERE name = 'ops-d'")" 1
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_fence_floor")" 0
	# Only waited on: still refused. The waiter is stopped first, or its
	# next poll would recount the permit the DELETE freed and take it.
	kill -STOP "$waiter"
	sql "DELETE FROM lr_holds WHERE resource = 'ops-d'"
	run c delete ops-d
	kill -CONT "$waiter"
	assert_equal "$status" 75
	touch "$gate"
	wait
	run --separate-stderr c delete ops-nope
	assert_equal "$status" 1
	[[ $stderr == *"no resource named 'ops-nope'"* ]] || fail "$stderr"
}

@test "delete keeps the fence as a floor: a later resource of that name never reissues a token" {
	local i
	for i in 1 2 3; do
		run "$LOCKRUN" -x ops-f -- true
		assert_success
	done
	ctl set ops-fs 2
	for i in 1 2; do
		run "$LOCKRUN" -s ops-fs -- true
		assert_success
	done
	run c delete ops-f
	assert_success
	assert_output --partial "above token 3"
	run c delete ops-fs
	assert_success
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_resources")" 0
	assert_equal "$(sql "SELECT name, fence FROM lr_fence_floor ORDER BY name")" "$(printf 'ops-f\t3\nops-fs\t2')"
	# The semaphore's deletion is audited like a capacity change.
	assert_equal "$(sql "SELECT old_capacity, COALESCE(new_capacity, 'NULL') FROM lr_capacity_audit
		WHERE resource = 'ops-fs' ORDER BY id DESC LIMIT 1")" "$(printf '2\tNULL')"
	# A mutex created anew by lockrun, and a semaphore by set, go on above.
	run "$LOCKRUN" -x ops-f -- sh -c 'echo $LOCKRUN_FENCE'
	assert_success
	assert_output 4
	ctl set ops-fs 2
	run "$LOCKRUN" -s ops-fs -- sh -c 'echo $LOCKRUN_FENCE'
	assert_success
	assert_output 3
}

@test "status: per holder held-for, lease left and token; per waiter position and waited-for" {
	ctl set ops-s 1
	local gate=$BATS_TEST_TMPDIR/gate
	"$LOCKRUN" -s ops-s -- sh -c "while [ ! -e $gate ]; do sleep 0.05; done" 3>&- &
	pids+=($!)
	local holder=$!
	lr_wait_eq 1 holds ops-s
	"$LOCKRUN" -s ops-s -- true 3>&- &
	pids+=($!)
	local w1=$!
	lr_wait_eq 1 waiters ops-s
	"$LOCKRUN" -s ops-s -- true 3>&- &
	pids+=($!)
	local w2=$!
	lr_wait_eq 2 waiters ops-s
	sleep 1.2
	run c status ops-s
	assert_success
	assert_line --index 1 --regexp "^  holder .*:$holder .*, held [1-9][0-9]*s, token 1, lease [0-9]+s left$"
	assert_line --index 3 --regexp "^  waiter 1: .*:$w1 .*, waiting [0-9.]+s, 1 permit$"
	assert_line --index 5 --regexp "^  waiter 2: .*:$w2 .*, waiting [0-9.]+s, 1 permit$"
	run c status --json ops-s
	assert_success
	run python3 -c '
import json, sys
r, = json.loads(sys.argv[1])["resources"]
h, = r["holders"]
assert h["held_s"] >= 1.2 and 0 < h["remaining_s"] <= 30 and not h["expired"], h
print([(w["position"], w["pid"], w["waited_s"] > 0) for w in r["waiters"]])' "$output"
	assert_success
	assert_output "[(1, $w1, True), (2, $w2, True)]"
	touch "$gate"
	wait
}

@test "status marks a holder whose lease expired but that nobody swept yet" {
	sql "INSERT INTO lr_resources (name, kind, capacity, fence, used) VALUES ('ops-x', 'mutex', 1, 7, 0)"
	insert_grant 41 "NOW(6) - INTERVAL 2 MINUTE" NULL NULL
	sql "INSERT INTO lr_holds (resource, grant_id, permits, fence, expires_at)
		VALUES ('ops-x', 41, 1, 7, NOW(6) - INTERVAL 90 SECOND)"
	run c status ops-x
	assert_success
	assert_line --index 0 --regexp '^ops-x +mutex +free, 1 expired$'
	assert_line --index 1 --regexp '^  holder h1:141 u1, held 2m[0-9]*s?, token 7, EXPIRED 1m3[0-9]s ago, not swept$'
	run c status --json ops-x
	run python3 -c 'import json, sys
r, = json.loads(sys.argv[1])["resources"]
h, = r["holders"]
print(r["expired_holds"], h["expired"], h["sweepable"], h["remaining_s"] < -89)' "$output"
	assert_output "1 True True True"
}

# prom_strict FILE: the text exposition format, checked line by line:
# HELP and TYPE before each family's samples, metric and label names,
# quoted and escaped label values, float values, no family twice.
prom_strict() {
	python3 - "$1" <<-'EOF'
		import re, sys
		name = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
		label = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"'
		sample = re.compile(r"^(%s)(\{(%s)(,%s)*\})? (\S+)$" % (name, label, label))
		typed, helped, seen_samples, done = {}, set(), set(), set()
		current = None
		text = open(sys.argv[1], encoding="utf-8").read()
		assert text.endswith("\n"), "no final newline"
		for n, line in enumerate(text.split("\n")[:-1], 1):
		    m = re.match(r"^# (HELP|TYPE) (%s) (.+)$" % name, line)
		    if m:
		        kind, metric, rest = m.groups()
		        if kind == "HELP":
		            assert metric not in helped, (n, "HELP twice", line)
		            helped.add(metric)
		        else:
		            assert rest in ("gauge", "counter"), (n, line)
		            assert metric not in typed, (n, "TYPE twice", line)
		            typed[metric] = rest
		        if current != metric and current is not None:
		            done.add(current)
		        assert metric not in done, (n, "family split", line)
		        current = metric
		        continue
		    assert not line.startswith("#") and line.strip() == line and line, (n, repr(line))
		    m = sample.match(line)
		    assert m, (n, "bad sample", line)
		    metric, value = m.group(1), m.group(5)
		    assert metric == current and metric in typed and metric in helped, (n, line)
		    float(value)
		    assert re.match(r"^-?[0-9]+(\.[0-9]+)?$", value), (n, value)
		    assert line.rsplit(" ", 1)[0] not in seen_samples, (n, "duplicate series", line)
		    seen_samples.add(line.rsplit(" ", 1)[0])
		print(len(typed), "families", len(seen_samples), "series")
	EOF
}

@test "status --format=prometheus: strict exposition format with every figure" {
	ctl set ops-p 2
	local gate=$BATS_TEST_TMPDIR/gate
	"$LOCKRUN" -s ops-p:2 -- sh -c "while [ ! -e $gate ]; do sleep 0.05; done" 3>&- &
	pids+=($!)
	lr_wait_eq 2 holds ops-p
	"$LOCKRUN" -s ops-p -- true 3>&- &
	pids+=($!)
	lr_wait_eq 1 waiters ops-p
	run "$LOCKRUN" -x ops-pm -- sh -c 'exit 3'
	assert_failure 3
	run "$LOCKRUN" -x ops-pm -- true
	assert_success
	sleep 1
	c status --format=prometheus >"$BATS_TEST_TMPDIR/prom"
	run prom_strict "$BATS_TEST_TMPDIR/prom"
	assert_success
	if command -v promtool >/dev/null; then
		run promtool check metrics <"$BATS_TEST_TMPDIR/prom"
		assert_success
	fi
	run grep -v '^#' "$BATS_TEST_TMPDIR/prom"
	assert_line 'lockrun_resource_capacity{resource="ops-p",kind="semaphore"} 2'
	assert_line 'lockrun_resource_used{resource="ops-p",kind="semaphore"} 2'
	assert_line 'lockrun_resource_holders{resource="ops-p",kind="semaphore"} 1'
	assert_line 'lockrun_resource_waiters{resource="ops-p",kind="semaphore"} 1'
	assert_line --regexp '^lockrun_resource_oldest_wait_seconds\{resource="ops-p",kind="semaphore"\} [1-9][0-9]*\.[0-9]{3}$'
	assert_line 'lockrun_resource_expired_holds{resource="ops-p",kind="semaphore"} 0'
	assert_line 'lockrun_grants_ended_last_hour{resource="ops-pm",kind="mutex",reason="exited"} 2'
	assert_line 'lockrun_grants_ended_last_hour{resource="ops-pm",kind="mutex",reason="force_released"} 0'
	assert_line --regexp '^lockrun_status_time_seconds [0-9]+\.[0-9]+$'
	touch "$gate"
	wait
	# The sample alert rules parse, if promtool is here to say so.
	if command -v promtool >/dev/null; then
		run promtool check rules "$LR_SRC/contrib/prometheus-alerts.yml"
		assert_success
	fi
}

@test "check: 0 for a live grant (with its tokens), 1 for other tokens, after release, or no grant" {
	local gate=$BATS_TEST_TMPDIR/gate
	"$LOCKRUN" -x ops-c1 -x ops-c2 -- sh -c "while [ ! -e $gate ]; do sleep 0.05; done" 3>&- &
	pids+=($!)
	lr_wait_eq 2 holds
	local g
	g=$(grant_of ops-c1)
	run c check "$g"
	assert_success
	assert_output --regexp "^grant $g: live, lease [0-9]+s left; ops-c1 token 1, ops-c2 token 1$"
	run c check "$g" ops-c1=1 ops-c2=1
	assert_success
	run c check "$g" ops-c1=2
	assert_failure 1
	assert_output "grant $g: not live: 'ops-c1' has token 1, not 2"
	run c check "$g" ops-c3=1
	assert_failure 1
	run c -q check "$g"
	assert_success
	assert_output ""
	run c --json check "$g"
	run python3 -c 'import json, sys; d = json.loads(sys.argv[1]); print(d["live"], [h["token"] for h in d["holds"]])' "$output"
	assert_output "True [1, 1]"
	run c release "$g" --reason "test"
	assert_success
	run c check "$g"
	assert_failure 1
	assert_output --regexp "^grant $g: not live: ended \(force_released\) at "
	run c check 999999
	assert_failure 1
	assert_output "grant 999999: not live: no such grant"
	touch "$gate"
	wait
}

@test "release: the zombie's command is stopped within a renewal interval plus kill-after, lockrun exits 76, the next token is above" {
	local out=$BATS_TEST_TMPDIR/zombie
	# ttl 6: a renewal every 2 s; the command ignores SIGTERM, so it
	# takes the SIGKILL kill-after (1 s) later.
	"$LOCKRUN" --ttl 6 --kill-after 1 -x ops-r -- \
		sh -c 'echo $LOCKRUN_FENCE $$ >'"$out"'.tmp; mv '"$out"'.tmp '"$out"'; trap "" TERM; while :; do sleep 0.05; done' \
		3>&- 2>"$BATS_TEST_TMPDIR/err" &
	local lr=$!
	pids+=($lr)
	lr_wait_for test -s "$out"
	local token child g
	read -r token child <"$out"
	g=$(grant_of ops-r)
	local t0=${EPOCHREALTIME/[.,]/}
	run c release "$g" --reason "stuck since the network split"
	assert_success
	assert_output "grant $g released by force; fences now ops-r $((token + 1))"
	# The zombie's token is stale now, and the next holder's is above it,
	# while the zombie may still run.
	assert_equal "$(sql "SELECT fence FROM lr_resources WHERE name = 'ops-r'")" $((token + 1))
	run "$LOCKRUN" -x ops-r -- sh -c 'echo $LOCKRUN_FENCE'
	assert_success
	assert_output $((token + 2))
	local rc=0
	wait "$lr" || rc=$?
	local t1=${EPOCHREALTIME/[.,]/}
	assert_equal "$rc" 76
	! kill -0 "$child" 2>/dev/null || fail "the command $child still runs"
	# One renewal interval (2 s) plus kill-after (1 s), plus slack for a
	# loaded machine.
	(((t1 - t0) < 7000000)) || fail "took $(((t1 - t0) / 1000)) ms"
	grep -q "lock lost" "$BATS_TEST_TMPDIR/err" || fail "$(cat "$BATS_TEST_TMPDIR/err")"
	assert_equal "$(sql "SELECT end_reason, released_by IS NOT NULL, released_os_user, released_host = '$(hostname)', release_note
		FROM lr_grants WHERE id = $g")" "$(printf 'force_released\t1\t%s\t1\tstuck since the network split' "$(id -un)")"
	# How the zombie's command really ended is kept beside the reason.
	assert_equal "$(sql "SELECT CONCAT_WS(' ', exit_status, term_signal) FROM lr_grants WHERE id = $g")" 9
	assert_equal "$(sql "SELECT used FROM lr_resources WHERE name = 'ops-r'")" 0
}

@test "release of a grant that ended is refused (1) and changes nothing" {
	run "$LOCKRUN" -x ops-e -- true
	assert_success
	local g before
	g=$(sql "SELECT MAX(id) FROM lr_grants")
	before=$(rows_fingerprint)
	run --separate-stderr c release "$g" --reason late
	assert_equal "$status" 1
	assert_equal "$stderr" "lockrunctl: grant $g has ended already (exited)"
	run --separate-stderr c release 424242 --reason nothing
	assert_equal "$status" 1
	assert_equal "$stderr" "lockrunctl: no grant 424242"
	assert_equal "$(rows_fingerprint)" "$before"
}

@test "sweep ends expired grants at their expiry, drops dead waiters, ends open grants that hold nothing" {
	# Holds written by hand, with the count the routines would keep.
	sql "INSERT INTO lr_resources (name, kind, capacity, used, fence) VALUES ('ops-w', 'semaphore', 3, 3, 9)"
	insert_grant 51 "NOW(6) - INTERVAL 3 MINUTE" NULL NULL
	insert_grant 52 "NOW(6) - INTERVAL 3 MINUTE" NULL NULL
	insert_grant 53 "NOW(6) - INTERVAL 10 MINUTE" NULL NULL
	# Expired two minutes ago (a date older than the retention would have
	# the log row deleted by the same sweep).
	local exp
	exp=$(sql "SELECT NOW(6) - INTERVAL 2 MINUTE")
	sql "INSERT INTO lr_holds (resource, grant_id, permits, fence, expires_at) VALUES
		('ops-w', 51, 1, 8, '$exp'),
		('ops-w', 52, 2, 9, NOW(6) + INTERVAL 1 MINUTE);
		INSERT INTO lr_waiters (resource, ticket, request_id, permits, host, pid, os_user, command, since, expires_at)
		VALUES ('ops-w', 1, REPEAT('d', 32), 1, 'h', 1, 'u', 'c', NOW(6) - INTERVAL 1 MINUTE, NOW(6) - INTERVAL 30 SECOND),
		('ops-w', 2, REPEAT('e', 32), 1, 'h', 1, 'u', 'c', NOW(6), NOW(6) + INTERVAL 10 SECOND)"
	assert_equal "$(sql "SELECT used FROM lr_resources WHERE name = 'ops-w'")" 3
	run c sweep
	assert_success
	assert_line --index 0 "ended 1 expired grant (1 hold and 1 dead queue place removed) and 1 open grant holding nothing"
	assert_equal "$(sql "SELECT id, COALESCE(end_reason, '-'), COALESCE(ended_at, '-') FROM lr_grants ORDER BY id")" \
		"$(printf '51\texpired\t%s\n52\t-\t-\n53\texpired\t%s' "$exp" \
			"$(sql "SELECT acquired_at + INTERVAL 30 SECOND FROM lr_grants WHERE id = 53")")"
	assert_equal "$(sql "SELECT grant_id FROM lr_holds")" 52
	assert_equal "$(sql "SELECT used FROM lr_resources WHERE name = 'ops-w'")" 2
	assert_equal "$(sql "SELECT ticket FROM lr_waiters")" 2
	# Idempotent: a second sweep finds nothing.
	run c --json sweep
	assert_success
	run python3 -c 'import json, sys; d = json.loads(sys.argv[1]); print(d["expired_grants"], d["orphan_grants"], d["grants_deleted"])' "$output"
	assert_output "0 0 0"
}

# old_runs FROM TO AGE: finished log rows FROM..TO (ids), ended AGE ago,
# each with two grant items.
old_runs() {
	sql "INSERT INTO lr_grants (id, request_id, host, pid, os_user, db_user, command, ttl_ms,
		requested_at, acquired_at, ended_at, end_reason, exit_status)
		SELECT seq, LPAD(HEX(seq), 32, '0'), 'h', 1, 'u', 'd', 'c', 30000,
		NOW(6) - INTERVAL $3 - INTERVAL 1 MINUTE, NOW(6) - INTERVAL $3 - INTERVAL 1 MINUTE,
		NOW(6) - INTERVAL $3, 'exited', 0 FROM $(seq_rows $1 $2) q;
		INSERT INTO lr_grant_items (grant_id, resource, kind, permits, fence)
		SELECT seq, 'ops-a', 'mutex', 1, seq FROM $(seq_rows $1 $2) q;
		INSERT INTO lr_grant_items (grant_id, resource, kind, permits, fence)
		SELECT seq, 'ops-b', 'semaphore', 2, seq FROM $(seq_rows $1 $2) q"
}

@test "sweep deletes log rows past the retention in batches of 1000, keeps live and recent ones, and the 30-day audit" {
	old_runs 1 2500 "8 DAY"
	old_runs 3001 3010 "6 DAY"
	# A live grant that started long ago stays whatever its age.
	run "$LOCKRUN" -x ops-live -- true
	local live
	live=$(sql "SELECT MAX(id) FROM lr_grants")
	sql "UPDATE lr_grants SET acquired_at = NOW(6) - INTERVAL 30 DAY, ended_at = NULL, end_reason = NULL
		WHERE id = $live"
	# A hold written by hand, with the count the routines would keep.
	sql "INSERT INTO lr_holds (resource, grant_id, permits, fence, expires_at)
		VALUES ('ops-live', $live, 1, 1, NOW(6) + INTERVAL 1 MINUTE);
		UPDATE lr_resources SET used = 1 WHERE name = 'ops-live'"
	ctl set ops-aud 1
	ctl set ops-aud 2
	ctl set ops-aud 3
	sql "UPDATE lr_capacity_audit SET changed_at = NOW(6) - INTERVAL 31 DAY WHERE new_capacity < 3"
	run c --json sweep
	assert_success
	run python3 -c 'import json, sys; d = json.loads(sys.argv[1])
print(d["grants_deleted"], d["grant_items_deleted"], d["audit_deleted"], d["retention_s"], d["transactions"] >= 4)' "$output"
	assert_output "2500 5000 2 604800 True"
	assert_equal "$(sql "SELECT COUNT(*), MIN(id), MAX(id) FROM lr_grants WHERE id <> $live")" "$(printf '10\t3001\t3010')"
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_grants WHERE id = $live AND ended_at IS NULL")" 1
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_grant_items WHERE grant_id <> $live")" 20
	assert_equal "$(sql "SELECT new_capacity FROM lr_capacity_audit")" 3
	# A shorter retention takes the recent ones too, not the live one.
	run c sweep --retention 5d
	assert_success
	assert_line --index 1 "deleted 10 log entries that ended more than 5d ago, 0 audit rows older than 30 days and 0 --once-per completions past use"
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_grants")" 1
}

@test "two sweeps at once both succeed and delete each old row once" {
	old_runs 1 4000 "8 DAY"
	c --json sweep >"$BATS_TEST_TMPDIR/s1" 2>&1 3>&- &
	local s1=$!
	c --json sweep >"$BATS_TEST_TMPDIR/s2" 2>&1 3>&- &
	local s2=$!
	wait "$s1" || fail "first sweep failed: $(cat "$BATS_TEST_TMPDIR/s1")"
	wait "$s2" || fail "second sweep failed: $(cat "$BATS_TEST_TMPDIR/s2")"
	run python3 -c 'import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:])
print(a["grants_deleted"] + b["grants_deleted"], a["grant_items_deleted"] + b["grant_items_deleted"])' \
		"$BATS_TEST_TMPDIR/s1" "$BATS_TEST_TMPDIR/s2"
	assert_output "4000 8000"
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_grants")" 0
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_grant_items")" 0
}

@test "history shows a finished run with its exit status, wait, hold time and resources" {
	ctl set ops-h 3
	run "$LOCKRUN" -s ops-h:2 -x ops-hm -- sh -c 'sleep 0.3; exit 3'
	assert_failure 3
	run "$LOCKRUN" -x ops-other -- true
	run c history ops-h
	assert_success
	assert_line --index 0 --regexp '^grant [0-9]+  [0-9T:-]{19}Z  waited [0-9.]+s  held [0-9.]+s  exited 3$'
	assert_line --index 1 --regexp "^  $(id -un)@[^ ]+:[0-9]+  sh -c sleep 0.3; exit 3$"
	assert_line --index 2 --regexp '^  ops-h x2 token 1, ops-hm token 1$'
	assert_equal "${#lines[@]}" 3
	run c history --json --limit 1
	assert_success
	run python3 -c 'import json, sys
r, = json.loads(sys.argv[1])["runs"]
print(r["end_reason"], r["exit_status"], [(x["resource"], x["permits"], x["token"]) for x in r["resources"]])' "$output"
	assert_output "exited 0 [('ops-other', 1, 1)]"
	# --since leaves out what ended before.
	sql "UPDATE lr_grants SET ended_at = ended_at - INTERVAL 2 HOUR, acquired_at = acquired_at - INTERVAL 2 HOUR
		WHERE command LIKE 'sh -c sleep%'"
	run c history --since 1h ops-h
	assert_success
	assert_output "no runs of 'ops-h'"
	run c history --since 3h ops-h
	assert_line --index 0 --partial "exited 3"
}

@test "doctor passes on the suite's server, as the administrator and as lockrun's account" {
	run c doctor
	assert_success
	assert_output --partial "no problems"
	assert_line --regexp '^ok +read_only '
	assert_line --regexp '^ok +procedures +all 13 present and callable, API version 3$'
	run "$LOCKRUNCTL" -c "$LOCKRUN_CONFIG" --json doctor
	assert_success
	run python3 -c 'import json, sys
d = json.loads(sys.argv[1])
s = {c["check"]: c["status"] for c in d["checks"]}
print(d["problems"], s["privileges"], s["procedures"], s["schema"])' "$output"
	assert_output "0 ok ok info"
	# Routines another version applied: worth a warning, not a failure.
	local digest
	digest=$(sql "SELECT digest FROM lr_routines WHERE name = 'procedures'")
	sql "UPDATE lr_routines SET digest = REPEAT('0', 64)"
	run c doctor
	sql "UPDATE lr_routines SET digest = '$digest'"
	assert_success
	assert_line --regexp '^WARN +routines +the stored routines \(applied [0-9T:-]+Z\) are not'
	# (On MySQL doctor also warns that the process list shows leases.)
	if lr_server_is_mysql; then
		assert_line "no problems, 2 warnings"
	else
		assert_line "no problems, 1 warning"
	fi
}

@test "doctor warns when this host's clock is off the server's, and says leases do not use it" {
	local -a shim=(env LD_PRELOAD="$LR_TOOLS/lrclock.so")
	# clock: the check's status and detail, one line.
	clock() {
		python3 -c 'import json, sys
d = json.loads(sys.argv[1])
print(*[c["status"] + " " + c["detail"] for c in d["checks"] if c["check"] == "clock"])' "$1"
	}
	run "${shim[@]}" LR_CLOCK_SHIFT=-30 "$LOCKRUNCTL" -c "$LOCKRUN_CONFIG" doctor
	assert_success
	assert_line --regexp '^WARN +clock +the server.s clock is (29\.9[5-9][0-9]|30\.0[0-4][0-9]) s ahead of this host.s \(\+/-$'
	assert_line --regexp '^no problems, [1-9][0-9]* warnings?$'
	run "${shim[@]}" LR_CLOCK_SHIFT=-30 "$LOCKRUNCTL" -c "$LOCKRUN_CONFIG" --json doctor
	assert_success
	run clock "$output"
	assert_output --regexp '^warning the server.s clock is (29\.9[5-9][0-9]|30\.0[0-4][0-9]) s ahead of this host.s \(\+/- [0-9.]+ s; warned past 2 s\); leases use only the server.s$'
	run "${shim[@]}" LR_CLOCK_SHIFT=5 "$LOCKRUNCTL" -c "$LOCKRUN_CONFIG" --json doctor
	run clock "$output"
	assert_output --regexp '^warning the server.s clock is [45]\.[0-9]+ s behind this host.s '
	# The true clock: within the 2 s that are warned about.
	run "$LOCKRUNCTL" -c "$LOCKRUN_CONFIG" --json doctor
	run clock "$output"
	assert_output --regexp '^ok the server.s clock is [01]\.[0-9]+ s '
}

@test "doctor flags a read-only server, and a wait_timeout shorter than the lease (exit 1)" {
	ro_inst=$LR_TMP/ro.$BATS_TEST_NUMBER
	mkdir -p "$ro_inst"
	lr_server_init "$ro_inst"
	lr_server_start "$ro_inst" "$(lr_free_port)" --wait-timeout=8
	lr_provision "$ro_inst"
	# Installed first: init refuses a read-only server (38-read-only.bats).
	"$LOCKRUNCTL" -c "$ro_inst/admin.conf" init
	lr_admin_sql "$ro_inst" "SET GLOBAL read_only = ON"
	cp "$ro_inst/lockrun.conf" "$BATS_TEST_TMPDIR/ro.conf"
	printf '[lock]\nttl = 30\n' >>"$BATS_TEST_TMPDIR/ro.conf"
	run "$LOCKRUNCTL" -c "$BATS_TEST_TMPDIR/ro.conf" doctor
	assert_failure 1
	assert_line --regexp '^FAIL +read_only +read_only is ON: a replica or a read-only server;'
	assert_line --regexp '^FAIL +wait_timeout +wait_timeout is 8 s, no longer than'
	assert_line --regexp '^2 problems, [0-9]+ warnings?: lockrun would fail or be unsafe here$'
	# And lockrun indeed cannot lock there.
	run "$LOCKRUN" -c "$ro_inst/lockrun.conf" -x ro -- true
	assert_failure 69
}

@test "sweep deletes --once-per completions a day and three windows past their window, and keeps the others" {
	# Windows of 1 h that ended 2 days ago (gone), 20 h ago (kept: a day
	# back), and of 1 d that ended 2 days ago (kept: three windows back).
	sql "INSERT INTO lr_once (idem_key, granted_at, grant_id, window_start, period_ms, window_end, done_at) VALUES
		('old', UTC_TIMESTAMP(6) - INTERVAL 49 HOUR, 1, UTC_TIMESTAMP(6) - INTERVAL 49 HOUR, 3600000,
		 UTC_TIMESTAMP(6) - INTERVAL 48 HOUR, UTC_TIMESTAMP(6) - INTERVAL 48 HOUR),
		('day', UTC_TIMESTAMP(6) - INTERVAL 21 HOUR, 2, UTC_TIMESTAMP(6) - INTERVAL 21 HOUR, 3600000,
		 UTC_TIMESTAMP(6) - INTERVAL 20 HOUR, UTC_TIMESTAMP(6) - INTERVAL 20 HOUR),
		('long', UTC_TIMESTAMP(6) - INTERVAL 3 DAY, 3, UTC_TIMESTAMP(6) - INTERVAL 3 DAY, 86400000,
		 UTC_TIMESTAMP(6) - INTERVAL 2 DAY, UTC_TIMESTAMP(6) - INTERVAL 2 DAY)"
	run c sweep --json
	assert_success
	assert_output --partial '"once_deleted":1,'
	assert_equal "$(sql "SELECT idem_key FROM lr_once ORDER BY idem_key")" "$(printf 'day\nlong')"
}

@test "max-ttl: shows and sets the longest lease; a longer --ttl is a usage error (64) naming it; never below a live lease" {
	run c max-ttl
	assert_success
	assert_output --regexp '^max-ttl [0-9]'
	run c max-ttl 1m
	assert_success
	assert_output --partial "max-ttl 1m (was "
	run --separate-stderr "$LOCKRUN" --ttl 90 -x ops-ttl -- true
	assert_equal "$status" 64
	[[ $stderr == "lockrun: 127.0.0.1:$LR_PORT: lockrun: ttl_ms must be 1000-60000 (this database's max_ttl_ms, which \`lockrunctl max-ttl\` sets) (1644)" ]] ||
		fail "$stderr"
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_holds WHERE resource = 'ops-ttl'")" 0
	# A live lease of 50 s: max-ttl may not go below it.
	"$LOCKRUN" --ttl 50 -x ops-ttl -- sleep 3 3>&- &
	pids+=($!)
	lr_wait_eq 1 holds ops-ttl
	run --separate-stderr c max-ttl 30s
	assert_equal "$status" 64
	[[ $stderr == *"holds a lease of 50000 ms: its renewals would fail"* ]] || fail "$stderr"
	run c --json max-ttl
	assert_output '{"max_ttl_ms":60000,"was_ms":60000}'
	run c max-ttl 2d
	assert_failure 64
	wait "${pids[@]}"
	c -q max-ttl 5m
}

@test "max-ttl is not lowered under an acquire that waits on its resource row: the acquire's lease counts" {
	restore_max=1
	run -0 "$LOCKRUN" -x ops-race -- true
	# The row held elsewhere for 1.5 s: the acquire (ttl 60 s) waits on it
	# inside its transaction, having read max_ttl_ms in shared mode.
	sql "START TRANSACTION; SELECT name FROM lr_resources WHERE name = 'ops-race' FOR UPDATE;
		DO SLEEP(1.5); COMMIT" >/dev/null 3>&- &
	pids+=($!)
	sleep 0.3
	"$LOCKRUN" --ttl 60 -x ops-race -- sleep 2 3>&- &
	pids+=($!)
	sleep 0.5
	# So the lowering waits for it, and then sees its lease.
	run -64 --separate-stderr c max-ttl 5s
	[[ $stderr == *"holds a lease of 60000 ms"* ]] || fail "$stderr"
	assert_equal "$(sql "SELECT value FROM lr_settings WHERE name = 'max_ttl_ms'")" 300000
	wait "${pids[@]}"
}

@test "max-ttl is not lowered below a hold renewed for longer than its grant asked" {
	restore_max=1
	"$LOCKRUN" --ttl 10 --kill-after 1 -x ops-hold -- sleep 3 3>&- &
	pids+=($!)
	lr_wait_eq 1 holds ops-hold
	# Through the SQL API a lease may be renewed for longer than granted.
	sql "CALL lockrun_renew((SELECT g.request_id FROM lr_grants g JOIN lr_holds h ON h.grant_id = g.id
		WHERE h.resource = 'ops-hold'), 50000)" >/dev/null
	run -64 --separate-stderr c max-ttl 20s
	[[ $stderr == *"holds a lease until "*" UTC, longer than that from now"* ]] || fail "$stderr"
	wait "${pids[@]}"
}

@test "a renewal the database refuses for its ttl ends the lease at once (76), not after retries" {
	restore_max=1
	"$LOCKRUN" --ttl 8 --kill-after 1 -x ops-renew -- sleep 30 2>"$BATS_TEST_TMPDIR/err" 3>&- &
	local p=$! t0 rc=0
	pids+=($p)
	lr_wait_eq 1 holds ops-renew
	# As after a fail-over to a server whose max_ttl_ms is lower.
	sql "UPDATE lr_settings SET value = 3000 WHERE name = 'max_ttl_ms'"
	t0=$EPOCHREALTIME
	wait "$p" || rc=$?
	assert_equal "$rc" 76
	# The next renewal (every 2.7 s) ends it; retries would last until the
	# lease ran out, 8 s after the last renewal.
	(($(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { print (b - a < 4.5) }'))) ||
		fail "lockrun ended $(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { print b - a }') s after"
	run cat "$BATS_TEST_TMPDIR/err"
	assert_output --partial "the database refuses to renew it: "
	assert_output --partial "ttl_ms must be 1000-3000"
}

@test "doctor says when no sweep ran for two days: a stale one, or none with an older lock log" {
	sql "DELETE FROM lr_settings WHERE name = 'last_sweep'"
	run c doctor
	assert_line --regexp "^ok +sweep +no 'lockrunctl sweep' has run yet; the lock log is younger"
	run c -q sweep
	assert_success
	run c doctor
	assert_line --regexp "^ok +sweep +'lockrunctl sweep' last ran at [0-9-]+T[0-9:]+Z$"
	sql "UPDATE lr_settings SET changed_at = changed_at - INTERVAL 3 DAY WHERE name = 'last_sweep'"
	run c --json doctor
	assert_success # a warning, not a problem
	run python3 -c 'import json, sys
print(*[c["status"] + " " + c["detail"] for c in json.loads(sys.argv[1])["checks"] if c["check"] == "sweep"])' "$output"
	assert_output --regexp "^warning the last 'lockrunctl sweep' ran at [0-9-]+T[0-9:]+Z, more than 2 days ago: enable lockrun-sweep.timer \(or the cron file\) on one host, with the operator's account in /etc/lockrun/operator.conf$"
	# Never swept, and a run three days old in the lock log.
	sql "DELETE FROM lr_settings WHERE name = 'last_sweep'"
	"$LOCKRUN" -x ops-sweep -- true
	sql "UPDATE lr_grants SET acquired_at = acquired_at - INTERVAL 3 DAY,
		ended_at = ended_at - INTERVAL 3 DAY"
	run c doctor
	sql "DELETE FROM lr_settings WHERE name = 'last_sweep'"
	assert_success
	assert_line --regexp "^WARN +sweep +no 'lockrunctl sweep' has run, and the lock log goes back$"
}
