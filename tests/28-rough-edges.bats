#!/usr/bin/env bats
#
# Rough edges a new operator found (issue 24), judged from outside:
#  - an error message never passes a control character on raw;

load helpers/common

bats_require_minimum_version 1.5.0

setup() {
	reset_db
	conf=$BATS_TEST_TMPDIR/lockrun.conf
	pids=()
}

teardown() {
	kill_pids
	wait 2>/dev/null || true
	ctl max-ttl 5m
}

# raw_controls STRING: how many bytes of STRING a terminal could obey: C0
# controls (a line end too), DEL, and the UTF-8 form of C1 controls.
raw_controls() {
	local c0 c1
	c0=$(printf '%s' "$1" | LC_ALL=C tr -d '\040-\176\200-\377' | wc -c)
	c1=$(printf '%s' "$1" | LC_ALL=C grep -c $'\xc2[\x80-\x9f]' || true)
	echo $((c0 + c1))
}

# usage_error WANT ARGS...: runs ARGS, expects status 64, nothing on
# stdout and exactly the line WANT on stderr.
usage_error() {
	local want=$1
	shift
	run --separate-stderr "$@"
	assert_equal "$status" 64
	assert_equal "$output" ""
	assert_equal "$stderr" "$want"
}

# --- no raw control characters in messages -----------------------------------

@test "lockrun: a name with a terminal escape is quoted escaped, on one line" {
	usage_error "lockrun: invalid name 'a\\x1b]0;pwned\\x07': use 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit (see 'lockrun --help')" \
		"$LOCKRUN" -x $'a\e]0;pwned\a' -- true
	local bad
	for bad in $'l1\nlockrun: forged' $'caf\xe9' $'\xc2\x9b2J' $'rtl\xe2\x80\xaeevil' $'x\r'; do
		run --separate-stderr "$LOCKRUN" -x "$bad" -- true
		assert_equal "$status" 64
		assert_equal "$(raw_controls "$stderr")" 0
		assert_equal "${#lines[@]}" 0
		[[ $stderr != *$'\n'* ]] || fail "more than one line: $stderr"
	done
	run --separate-stderr "$LOCKRUN" -x $'l1\nlockrun: forged' -- true
	assert_equal "$stderr" "lockrun: invalid name 'l1\\x0alockrun: forged': use 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit (see 'lockrun --help')"
}

@test "lockrun: option values, unknown options and config values are quoted escaped" {
	usage_error "lockrun: --conflict-exit-code: '\\x1b[2J' is not an exit status (0-255) (see 'lockrun --help')" \
		"$LOCKRUN" -E $'\e[2J' -x re -- true
	usage_error "lockrun: --on-lost: '\\x1b]0;x\\x07' is not 'kill' or 'ignore' (see 'lockrun --help')" \
		"$LOCKRUN" --on-lost $'\e]0;x\a' -x re -- true
	usage_error "lockrun: unknown option '--\\x1b[31m' (see 'lockrun --help')" \
		"$LOCKRUN" $'--\e[31m' -x re -- true
	usage_error "lockrun: unknown option '-\\x1b' (see 'lockrun --help')" \
		"$LOCKRUN" $'-\e' -x re -- true
	cp "$LOCKRUN_CONFIG" "$conf"
	printf '[lock]\non_lost = \e]0;pwned\a\n' >>"$conf"
	run --separate-stderr "$LOCKRUN" -c "$conf" -x re -- true
	assert_equal "$status" 78
	[[ $stderr == "lockrun: $conf:"*": on_lost: '\\x1b]0;pwned\\x07' is not 'kill' or 'ignore'" ]] ||
		fail "$stderr"
	printf '[lock]\n\e[2Jkey = 1\n' >"$conf"
	run --separate-stderr "$LOCKRUN" -c "$conf" -x re -- true
	assert_equal "$status" 78
	assert_equal "$stderr" "lockrun: $conf:2: unknown key '\\x1b[2Jkey' in [lock]"
	run --separate-stderr "$LOCKRUN" -c "$BATS_TEST_TMPDIR/"$'\e]0;x\a' -x re -- true
	assert_equal "$status" 78
	assert_equal "$stderr" "lockrun: $BATS_TEST_TMPDIR/\\x1b]0;x\\x07: No such file or directory"
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_grants")" 0
}

@test "lockrunctl: names, values, commands and options are quoted escaped" {
	usage_error "lockrunctl: invalid name 'a\\x1b]0;pwned\\x07': use 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit" \
		"$LOCKRUNCTL" -c "$LR_ADMIN_CONFIG" status $'a\e]0;pwned\a'
	usage_error "lockrunctl: invalid capacity '\\x1b[2J': use a whole number 0-1000000" \
		"$LOCKRUNCTL" -c "$LR_ADMIN_CONFIG" set re $'\e[2J'
	usage_error "lockrunctl: --format: unknown format '\\xc2\\x9b2J': use text, json or prometheus" \
		"$LOCKRUNCTL" -c "$LR_ADMIN_CONFIG" status --format $'\xc2\x9b2J'
	usage_error "lockrunctl: unknown command 'st\\x0aatus' (see 'lockrunctl --help')" \
		"$LOCKRUNCTL" -c "$LR_ADMIN_CONFIG" $'st\natus'
	usage_error "lockrunctl: unknown option '--\\x1b[31m' (see 'lockrunctl --help')" \
		"$LOCKRUNCTL" -c "$LR_ADMIN_CONFIG" $'--\e[31m' status
	usage_error "lockrunctl: invalid grant number '\\x1b[A': use the whole number lockrun gave as LOCKRUN_GRANT" \
		"$LOCKRUNCTL" -c "$LR_ADMIN_CONFIG" check $'\e[A'
	run --separate-stderr "$LOCKRUNCTL" -c "$BATS_TEST_TMPDIR/"$'\e]0;x\a' status
	assert_equal "$status" 78
	assert_equal "$stderr" "lockrunctl: $BATS_TEST_TMPDIR/\\x1b]0;x\\x07: No such file or directory"
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_resources")" 0
}
