#!/usr/bin/env bats
#
# Bytes nobody checked: command lines that are not UTF-8 or carry terminal
# escapes always run and are recorded so they read back exactly; whatever
# the tables hold, `lockrunctl status --json` is valid JSON and the text
# status holds no control character.

load helpers/common

bats_require_minimum_version 1.5.0

setup() {
	reset_db
	# The child: writes each of its arguments as hex, one a line, so the
	# test sees the exact bytes it was given.
	args=$BATS_TEST_TMPDIR/args
	got=$BATS_TEST_TMPDIR/got
	printf '%s\n' '#!/bin/sh' \
		'for a; do printf %s "$a" | od -An -tx1 | tr -d " \n"; echo; done >"${0%/*}/got"' \
		>"$args"
	# A holder that stays until the test opens the gate (touch "$go"),
	# however slow the machine is.
	go=$BATS_TEST_TMPDIR/go
	printf '%s\n' '#!/bin/sh' 'while [ ! -e "${0%/*}/go" ]; do sleep 0.05; done' \
		>"$BATS_TEST_TMPDIR/gate"
	chmod +x "$args" "$BATS_TEST_TMPDIR/gate"
}

teardown() {
	touch "$go" # no holder outlives its test
}

# hexof STRING: STRING's bytes as lowercase hex, no spaces.
hexof() {
	printf '%s' "$1" | od -An -tx1 | tr -d ' \n'
}

# stored_hex TABLE: the command column of TABLE's only row, as hex.
stored_hex() {
	sql "SELECT LOWER(HEX(command)) FROM $1"
}

# Arguments with an invalid byte, a newline, ESC, a C1 control, a
# backslash, valid UTF-8 beside them, and SQL's quote and statement end
# (on MySQL the CALLs go as text, on a connection that may send two
# statements in one query); and their record.
hostile_args=($'caf\xe9' $'line1\nline2' $'\e[31mred' $'\xc2\x9b2J' 'back\slash' $'caf\xc3\xa9' "o'k'); DO 1; -- ")
hostile_record='caf\xe9 line1\x0aline2 \x1b[31mred \xc2\x9b2J back\\slash caf'$'\xc3\xa9'" o'k'); DO 1; -- "

@test "a command line that is not UTF-8 runs with its exact bytes and is recorded escaped" {
	run "$LOCKRUN" -x m -- "$args" "${hostile_args[@]}"
	assert_success
	local a want=""
	for a in "${hostile_args[@]}"; do want+=$(hexof "$a")$'\n'; done
	assert_equal "$(cat "$got")"$'\n' "$want"
	assert_equal "$(stored_hex lr_grants)" "$(hexof "$args $hostile_record")"
	assert_equal "$(sql "SELECT end_reason, exit_status FROM lr_grants")" "exited	0"
}

@test "a queued command line that is not UTF-8 is recorded escaped, then runs" {
	"$LOCKRUN" -x q -- "$BATS_TEST_TMPDIR/gate" 3>&- &
	lr_wait_eq 1 holds q
	"$LOCKRUN" -x q -- "$args" "${hostile_args[@]}" 3>&- &
	local waiter=$!
	lr_wait_eq 1 waiters q
	assert_equal "$(stored_hex lr_waiters)" "$(hexof "$args $hostile_record")"
	touch "$go"
	wait "$waiter"
	[[ -s $got ]] || fail "the queued command never ran"
	wait
}

@test "a command line longer than the column is cut at an escape, marked, and runs whole" {
	local long
	long=$(printf '\\xff%.0s' $(seq 600))
	long=$(printf "$long")
	run "$LOCKRUN" -x m -- "$args" "$long"
	assert_success
	assert_equal "$(cat "$got")" "$(hexof "$long")"
	# Whole escapes up to 1020 characters, then the mark: at most 1024.
	assert_equal "$(sql "SELECT CHAR_LENGTH(command) BETWEEN 1021 AND 1024,
		command = CONCAT('$args ', REPEAT(CONCAT(CHAR(92), 'xff'),
			FLOOR((1020 - CHAR_LENGTH('$args ')) / 4)), CHAR(92), '...')
		FROM lr_grants")" "1	1"
}

# A live holder and a waiter whose every text field is hostile, written
# straight into the tables as hex, the way a foreign or older client might.
# Surrogates (ED A0 80) are the invalid UTF-8 that MariaDB's utf8mb4 still
# accepts; MySQL's refuses them (1366), so no such row exists there.
insert_hostile_rows() {
	if lr_server_is_mysql; then
		skip "MySQL stores no invalid UTF-8 in utf8mb4 columns (1366)"
	fi
	name=$'evil\e[2J"x'
	host=$'web"01\\\n\e[2J\a'
	user=$'ro\x7fot\t\xc2\x9b'
	command=$'rm "/" \\ \e]0;pwned\a \xed\xa0\x80 caf\xc3\xa9 \xe2\x80\xae end\r\n'
	request=$'r"\\\e[0m\n\x01}'
	# The waiter's: wide characters, two columns each on a terminal.
	wcommand=$(printf '\xe6\xbc\xa2%.0s' $(seq 30))$'\e[0m'
	sql "INSERT INTO lr_resources (name, kind, capacity, fence, ticket)
		VALUES (X'$(hexof "$name")', 'mutex', 1, 1, 1);
	INSERT INTO lr_grants (request_id, host, pid, os_user, db_user, command, ttl_ms, acquired_at)
		VALUES (REPEAT('a', 32), X'$(hexof "$host")', 4242, X'$(hexof "$user")', 'x',
		X'$(hexof "$command")', 60000, NOW(6));
	INSERT INTO lr_holds (resource, grant_id, permits, fence, expires_at)
		VALUES (X'$(hexof "$name")', LAST_INSERT_ID(), 1, 1, NOW(6) + INTERVAL 1 HOUR);
	INSERT INTO lr_waiters (resource, ticket, request_id, permits, host, pid, os_user, command,
		since, expires_at) VALUES (X'$(hexof "$name")', 1, X'$(hexof "$request")', 1,
		X'$(hexof "$host")', 4343, X'$(hexof "$user")', X'$(hexof "$wcommand")', NOW(6),
		NOW(6) + INTERVAL 1 HOUR)"
	# Stored as written, so the test is about the output, not the input.
	assert_equal "$(sql "SELECT LOWER(HEX(command)) FROM lr_grants")" "$(hexof "$command")"
}

@test "status --json is valid JSON and gives back every hostile field" {
	insert_hostile_rows
	"$LOCKRUNCTL" -c "$LR_ADMIN_CONFIG" status --json >"$BATS_TEST_TMPDIR/out"
	run python3 - "$BATS_TEST_TMPDIR/out" "$(hexof "$name")" "$(hexof "$host")" \
		"$(hexof "$user")" "$(hexof "$command")" "$(hexof "$request")" \
		"$(hexof "$wcommand")" <<-'EOF'
		import json, sys
		raw = open(sys.argv[1], "rb").read()
		doc = json.loads(raw.decode("utf-8"))  # strict: invalid UTF-8 fails here
		# Invalid sequences come back as U+FFFD, one per maximal subpart,
		# exactly as Python's own decoder replaces them.
		name, host, user, command, request, wcommand = (
		    bytes.fromhex(h).decode("utf-8", "replace") for h in sys.argv[2:8])
		assert b"\x1b" not in raw and b"\n" not in raw[:-1], raw
		r, = doc["resources"]
		assert r["name"] == name, r["name"]
		h, = r["holders"]
		w, = r["waiters"]
		for row in (h, w):
		    assert row["host"] == host, row["host"]
		    assert row["user"] == user, row["user"]
		assert h["command"] == command, h["command"]
		assert w["command"] == wcommand, w["command"]
		assert command.count("\ufffd") == 3
		assert w["request"] == request, w["request"]
		assert (h["pid"], w["pid"]) == (4242, 4343)
		print("ok")
	EOF
	assert_success
	assert_output ok
}

@test "text status shows control characters escaped and keeps 80 columns" {
	insert_hostile_rows
	"$LOCKRUNCTL" -c "$LR_ADMIN_CONFIG" status >"$BATS_TEST_TMPDIR/out"
	run python3 - "$BATS_TEST_TMPDIR/out" <<-'EOF'
		import sys, unicodedata
		text = open(sys.argv[1], "rb").read().decode("utf-8")  # strict
		hidden = [c for c in text if (ord(c) < 0x20 and c != "\n")
		          or 0x7f <= ord(c) <= 0x9f or c in "\u2028\u2029\u061c\u200e\u200f"
		          or 0x202a <= ord(c) <= 0x202e or 0x2066 <= ord(c) <= 0x2069]
		assert not hidden, hidden
		lines = text.splitlines()
		assert len(lines) == 5, lines
		for l in lines[1:]:
		    cols = sum(1 + (unicodedata.east_asian_width(c) in "WF") for c in l)
		    assert cols <= 80, (cols, l)
		print(*lines, sep="\n")
	EOF
	assert_success
	assert_line --index 0 --regexp '^evil\\x1b\[2J"x +mutex +held$'
	assert_line --index 1 --regexp '^  holder web"01\\\\x0a\\x1b\[:4242 ro\\x7fot, held [0-9.]+s, token 1, lease [0-9hms]+ left$'
	assert_line --index 2 --regexp '^    since .*  rm "/" \\ \\x1b\]0;pwned\\x07 \\xed\\xa0\\x80 caf'$'\xc3\xa9'' $'
	assert_line --index 3 --regexp '^  waiter 1: web"01\\\\x0a\\x1b\[:4343 ro\\x7fot, waiting [0-9.]+s, 1 permit$'
	assert_line --index 4 --regexp '^    since .*  ('$'\xe6\xbc\xa2'"){24}$"
}

@test "a live run's hostile command line: escaped in the text status, exact in JSON" {
	PATH=$BATS_TEST_TMPDIR:$PATH "$LOCKRUN" -x live -- gate "${hostile_args[@]}" 3>&- &
	lr_wait_eq 1 holds live
	run "$LOCKRUNCTL" -c "$LR_ADMIN_CONFIG" status live
	assert_success
	assert_line --index 2 --regexp '^    since .*  gate caf\\xe9 line1\\x0aline2 \\x1b\[31mred \\xc2\\x9b$'
	"$LOCKRUNCTL" -c "$LR_ADMIN_CONFIG" status --json live >"$BATS_TEST_TMPDIR/out"
	run python3 -c '
import json, sys
r, = json.load(open(sys.argv[1], encoding="utf-8"))["resources"]
print(r["holders"][0]["command"])' "$BATS_TEST_TMPDIR/out"
	assert_success
	assert_output "gate $hostile_record"
	touch "$go"
	wait
}

# with_hostname BYTES CMD...: run CMD in a UTS namespace whose host name is
# BYTES (the kernel takes any bytes; hostname(1) would refuse these).
with_hostname() {
	unshare --uts python3 -c 'import os, socket, sys
socket.sethostname(os.fsencode(sys.argv[1]))
os.execv(sys.argv[2], sys.argv[2:])' "$@"
}

@test "lockrunctl set on a host whose name is not UTF-8: done, and audited escaped" {
	unshare --uts true 2>/dev/null || skip "no UTS namespaces here"
	run with_hostname $'h\xe9\e[2J' "$LOCKRUNCTL" -c "$LR_ADMIN_CONFIG" set hs 2
	assert_success
	assert_equal "$(sql "SELECT capacity FROM lr_resources WHERE name = 'hs'")" 2
	assert_equal "$(sql "SELECT LOWER(HEX(host)) FROM lr_capacity_audit")" "$(hexof 'h\xe9\x1b[2J')"
}

@test "lockrun on a host whose name is not UTF-8: runs, and its grant records the name escaped" {
	unshare --uts true 2>/dev/null || skip "no UTS namespaces here"
	run with_hostname $'h\xe9\e[2J' "$LOCKRUN" -x hn -- true
	assert_success
	assert_equal "$(sql "SELECT LOWER(HEX(host)) FROM lr_grants")" "$(hexof 'h\xe9\x1b[2J')"
}

@test "lockrun -v names a hostile holder escaped, never with raw control bytes" {
	local host=$'web\e[2J\a'
	sql "INSERT INTO lr_resources (name, kind, capacity, fence) VALUES ('hm', 'mutex', 1, 1);
	INSERT INTO lr_grants (request_id, host, pid, os_user, db_user, command, ttl_ms, acquired_at)
		VALUES (REPEAT('b', 32), X'$(hexof "$host")', 4242, 'u',
		X'$(hexof "ops")1b5d303b70776e656407', 'job', 60000, NOW(6));
	INSERT INTO lr_holds (resource, grant_id, permits, fence, expires_at)
		VALUES ('hm', LAST_INSERT_ID(), 1, 1, NOW(6) + INTERVAL 1 HOUR)"
	run --separate-stderr "$LOCKRUN" -v -w 0.5 -x hm -- true
	assert_failure 75
	# The holder is host:pid (account), both whatever another client
	# stored.
	[[ $stderr == *"'hm' held by web\\x1b[2J\\x07:4242 (ops\\x1b]0;pwned\\x07)"* ]] ||
		fail "unexpected: $stderr"
	if printf '%s' "$stderr" | LC_ALL=C grep -q $'[\x01-\x09\x0b-\x1f\x7f]'; then
		fail "raw control bytes on stderr"
	fi
}
