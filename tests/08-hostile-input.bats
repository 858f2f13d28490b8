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
	chmod +x "$args"
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
# backslash, and valid UTF-8 beside them; and their record.
hostile_args=($'caf\xe9' $'line1\nline2' $'\e[31mred' $'\xc2\x9b2J' 'back\slash' $'caf\xc3\xa9')
hostile_record='caf\xe9 line1\x0aline2 \x1b[31mred \xc2\x9b2J back\\slash caf'$'\xc3\xa9'

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
	"$LOCKRUN" -x q -- sleep 1.5 3>&- &
	lr_wait_eq 1 holds q
	"$LOCKRUN" -x q -- "$args" "${hostile_args[@]}" 3>&- &
	local waiter=$!
	lr_wait_eq 1 waiters q
	assert_equal "$(stored_hex lr_waiters)" "$(hexof "$args $hostile_record")"
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
