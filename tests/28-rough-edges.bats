#!/usr/bin/env bats
#
# Rough edges a new operator found (issue 24), judged from outside:
#  - an error message never passes a control character on raw;
#  - every duration takes the same units, on the command line and in the
#    configuration file, and a range error gives the range in the unit written;
#  - --help lists --timeout;
#  - a usage error names the real culprit, not its neighbour.

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
	usage_error "lockrunctl: invalid capacity '\\x1b[2J': use a whole number 1-1000000" \
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

# --- one DURATION syntax ----------------------------------------------------

@test "--wait, --timeout, --ttl and --kill-after take units like --min-hold" {
	run "$LOCKRUN" --ttl 2m --kill-after 5s -w 1.5m -x re-units -- true
	assert_success
	assert_equal "$(sql "SELECT ttl_ms FROM lr_grants")" 120000
	# --timeout 0.5s, a fraction with a unit, against a held lock: 75 soon
	"$LOCKRUN" -x re-held -- sleep 30 3>&- &
	pids+=($!)
	lr_wait_eq 1 holds re-held
	local t0=$EPOCHREALTIME
	run "$LOCKRUN" --timeout 0.5s -x re-held -- true
	assert_failure 75
	local ms=$(((${EPOCHREALTIME/[.,]/} - ${t0/[.,]/}) / 1000))
	((ms >= 400 && ms < 10000)) || fail "gave up after $ms ms"
	# plain seconds and fractions as before
	run "$LOCKRUN" --ttl 30 --kill-after 0.5 -w .5 -x re-units -- true
	assert_success
}

@test "the config file's ttl, wait, kill_after and timeouts take units" {
	cp "$LOCKRUN_CONFIG" "$conf"
	printf '[lock]\nttl = 1.5m\nwait = 0.3s\nkill_after = 2s\n' >>"$conf"
	sed -i 's/^\[database\]$/[database]\nconnect_timeout = 1m\nread_timeout = 0.5m/' "$conf"
	run "$LOCKRUN" -c "$conf" -x re-conf -- true
	assert_success
	assert_equal "$(sql "SELECT ttl_ms FROM lr_grants")" 90000
	# wait = 0.3s: a held lock is given up on, not waited for forever
	"$LOCKRUN" -x re-conf -- sleep 30 3>&- &
	pids+=($!)
	lr_wait_eq 1 holds re-conf
	run timeout 20 "$LOCKRUN" -c "$conf" -x re-conf -- true
	assert_failure 75
}

@test "a duration out of range: 64, the range in the unit written" {
	usage_error "lockrun: --ttl: '2d' is out of range (1s to 1d) (see 'lockrun --help')" \
		"$LOCKRUN" --ttl 2d -x re -- true
	usage_error "lockrun: --ttl: '90000' is out of range (1s to 86400s) (see 'lockrun --help')" \
		"$LOCKRUN" --ttl 90000 -x re -- true
	usage_error "lockrun: --ttl: '0.5' is out of range (1s to 86400s) (see 'lockrun --help')" \
		"$LOCKRUN" --ttl 0.5 -x re -- true
	usage_error "lockrun: --wait: '400d' is out of range (0d to 365d) (see 'lockrun --help')" \
		"$LOCKRUN" -w 400d -x re -- true
	usage_error "lockrun: --timeout: '9000h' is out of range (0h to 8760h) (see 'lockrun --help')" \
		"$LOCKRUN" --timeout 9000h -x re -- true
	usage_error "lockrun: --kill-after: '2h' is out of range (0h to 1h) (see 'lockrun --help')" \
		"$LOCKRUN" --kill-after 2h -x re -- true
	usage_error "lockrun: --min-hold: '25h' is out of range (0h to 24h) (see 'lockrun --help')" \
		"$LOCKRUN" --min-hold 25h -x re -- true
	usage_error "lockrun: --once-per: '367d' is out of range (1s to 366d) (see 'lockrun --help')" \
		"$LOCKRUN" --id re --once-per 367d -- true
	usage_error "lockrun: --ttl: '5x' is not a duration (e.g. 90, 30s, 1.5m, 2h, 1d) (see 'lockrun --help')" \
		"$LOCKRUN" --ttl 5x -x re -- true
	usage_error "lockrun: --wait: '1e3' is not a duration (e.g. 90, 30s, 1.5m, 2h, 1d) (see 'lockrun --help')" \
		"$LOCKRUN" -w 1e3 -x re -- true
	usage_error "lockrun: --ttl: '\\x1b[2J' is not a duration (e.g. 90, 30s, 1.5m, 2h, 1d) (see 'lockrun --help')" \
		"$LOCKRUN" --ttl $'\e[2J' -x re -- true
	usage_error "lockrunctl: max-ttl: '2d' is out of range (1s to 1d)" \
		"$LOCKRUNCTL" -c "$LR_ADMIN_CONFIG" max-ttl 2d
	usage_error "lockrunctl: --since: '5x' is not a duration (e.g. 90, 30s, 1.5m, 2h, 1d)" \
		"$LOCKRUNCTL" -c "$LR_ADMIN_CONFIG" history --since 5x
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_grants")" 0
}

@test "a duration out of range in the config file: 78, naming file:line and the range" {
	cp "$LOCKRUN_CONFIG" "$conf"
	printf '[lock]\nttl = 2d\n' >>"$conf"
	local line
	line=$(grep -n '^ttl = 2d' "$conf" | cut -d: -f1)
	run --separate-stderr "$LOCKRUN" -c "$conf" -x re -- true
	assert_equal "$status" 78
	assert_equal "$stderr" "lockrun: $conf:$line: ttl: '2d' is out of range (1s to 1d)"
	cp "$LOCKRUN_CONFIG" "$conf"
	sed -i 's/^\[database\]$/[database]\nread_timeout = 2h/' "$conf"
	line=$(grep -n '^read_timeout' "$conf" | cut -d: -f1)
	run --separate-stderr "$LOCKRUN" -c "$conf" -x re -- true
	assert_equal "$status" 78
	assert_equal "$stderr" "lockrun: $conf:$line: read_timeout: '2h' is out of range (1s to 1h)"
}

@test "a --ttl in units above the database's max-ttl is still 64, naming max_ttl_ms" {
	ctl max-ttl 1m
	run --separate-stderr "$LOCKRUN" --ttl 2m -x re-max -- true
	assert_equal "$status" 64
	[[ $stderr == *"ttl_ms must be 1000-60000 (this database's max_ttl_ms"* ]] || fail "$stderr"
	run "$LOCKRUN" --ttl 1m -x re-max -- true
	assert_success
}

# --- --help ------------------------------------------------------------------

@test "lockrun --help lists --timeout, and --wait, --ttl and --kill-after as DURATION" {
	run "$LOCKRUN" --help
	assert_success
	assert_line --regexp '^  -w, --wait DURATION +give up after waiting DURATION'
	assert_line --regexp '^      --timeout DURATION +the same as --wait$'
	assert_line --regexp '^      --ttl DURATION '
	assert_line --regexp '^      --kill-after DURATION '
	refute_output --partial SECONDS
}
# --- the culprit, not its neighbour ------------------------------------------

@test "lockrun: an unknown option in a cluster is named, not the value before it" {
	usage_error "lockrun: unknown option '-l' in '-la' (see 'lockrun --help')" \
		"$LOCKRUN" -x foo -la true
	usage_error "lockrun: unknown option '-a' in '-na' (see 'lockrun --help')" \
		"$LOCKRUN" -x foo -na true
	usage_error "lockrun: option '-w' needs a value (see 'lockrun --help')" \
		"$LOCKRUN" -x foo -nw
	usage_error "lockrun: option '--ttl' needs a value (see 'lockrun --help')" \
		"$LOCKRUN" -x foo --ttl
	usage_error "lockrun: option '--nonblock' takes no value (see 'lockrun --help')" \
		"$LOCKRUN" -x foo --nonblock=1 true
	usage_error "lockrun: unknown option '--frob' (see 'lockrun --help')" \
		"$LOCKRUN" -x foo --frob=1 true
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_resources")" 0
}

@test "lockrunctl set NAME -1: the capacity is named invalid, with its range" {
	usage_error "lockrunctl: invalid capacity '-1': use a whole number 1-1000000" \
		"$LOCKRUNCTL" -c "$LR_ADMIN_CONFIG" set foo -1
	usage_error "lockrunctl: invalid capacity '-12': use a whole number 1-1000000" \
		"$LOCKRUNCTL" -c "$LR_ADMIN_CONFIG" -q set foo -12
	usage_error "lockrunctl: invalid grant number '-5': use the whole number lockrun gave as LOCKRUN_GRANT" \
		"$LOCKRUNCTL" -c "$LR_ADMIN_CONFIG" check -5
	usage_error "lockrunctl: max-ttl: '-5m' is not a duration (e.g. 90, 30s, 1.5m, 2h, 1d)" \
		"$LOCKRUNCTL" -c "$LR_ADMIN_CONFIG" max-ttl -5m
	usage_error "lockrunctl: unknown option '-z' (see 'lockrunctl --help')" \
		"$LOCKRUNCTL" -c "$LR_ADMIN_CONFIG" set foo 3 -z
	usage_error "lockrunctl: unknown option '-x' in '-qx' (see 'lockrunctl --help')" \
		"$LOCKRUNCTL" -c "$LR_ADMIN_CONFIG" set foo 3 -qx
	usage_error "lockrunctl: option '--json' takes no value (see 'lockrunctl --help')" \
		"$LOCKRUNCTL" -c "$LR_ADMIN_CONFIG" status --json=yes
	usage_error "lockrunctl: option '--since' needs a value (see 'lockrunctl --help')" \
		"$LOCKRUNCTL" -c "$LR_ADMIN_CONFIG" history --since
	assert_equal "$(sql "SELECT COUNT(*) FROM lr_resources")" 0
	# options still go anywhere, and after --, a dash is an argument
	run "$LOCKRUNCTL" -c "$LR_ADMIN_CONFIG" set foo 3 -q
	assert_success
	assert_output ""
	run "$LOCKRUNCTL" set -c "$LR_ADMIN_CONFIG" foo 4
	assert_success
	assert_output "foo: capacity 4 (was 3)"
	usage_error "lockrunctl: invalid capacity '-q': use a whole number 1-1000000" \
		"$LOCKRUNCTL" -c "$LR_ADMIN_CONFIG" -- set foo -q
	assert_equal "$(sql "SELECT capacity FROM lr_resources WHERE name = 'foo'")" 4
}
