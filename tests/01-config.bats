#!/usr/bin/env bats
#
# Configuration: lookup order, errors that name file:line (exit 78), the
# password warnings, and that the password goes nowhere else.

load helpers/common

bats_require_minimum_version 1.5.0

setup() {
	reset_db
	"$LOCKRUNCTL" -c "$LR_ADMIN_CONFIG" -q set cfgsem 1
	conf=$BATS_TEST_TMPDIR/lockrun.conf
}

@test "an unknown key is a configuration error naming file:line (78)" {
	printf '[database]\nuser = x\nprot = 3306\n' >"$conf"
	run "$LOCKRUN" -c "$conf" -s cfgsem -- true
	assert_failure 78
	assert_output "lockrun: $conf:3: unknown key 'prot' in [database]"
}

@test "an unknown section is a configuration error naming file:line" {
	printf '[database]\n[locking]\nttl = 5\n' >"$conf"
	run "$LOCKRUNCTL" -c "$conf" status
	assert_failure 78
	assert_output "lockrunctl: $conf:3: unknown section [locking]"
}

@test "a malformed value is a configuration error naming the key" {
	printf '[lock]\nttl = 30\nwait = soon\n' >"$conf"
	run "$LOCKRUN" -c "$conf" -s cfgsem -- true
	assert_failure 78
	assert_output --partial "$conf:3: wait: 'soon'"
}

@test "a missing -c file is a configuration error" {
	run "$LOCKRUN" -c "$BATS_TEST_TMPDIR/nope.conf" -s cfgsem -- true
	assert_failure 78
	assert_output "lockrun: $BATS_TEST_TMPDIR/nope.conf: No such file or directory"
}

@test "-c wins over \$LOCKRUN_CONFIG" {
	printf '[database]\nbogus = 1\n' >"$conf"
	LOCKRUN_CONFIG=$conf run "$LOCKRUN" -c "$LR_DB/lockrun.conf" -s cfgsem -- true
	assert_success
	run "$LOCKRUN" -c "$conf" -s cfgsem -- true
	assert_failure 78
}

@test "\$LOCKRUN_CONFIG is used when there is no -c" {
	printf '[database]\nbogus = 1\n' >"$conf"
	LOCKRUN_CONFIG=$conf run "$LOCKRUN" -s cfgsem -- true
	assert_failure 78
	assert_output --partial "$conf:2: unknown key 'bogus'"
}

@test "[lock] sets site defaults that flags override" {
	cp "$LR_DB/lockrun.conf" "$conf"
	printf '[lock]\nconflict_exit_code = 42\n' >>"$conf"
	"$LOCKRUNCTL" -c "$LR_ADMIN_CONFIG" -q set cfgsem 1
	"$LOCKRUN" -c "$conf" -s cfgsem -- sleep 3 3>&- &
	lr_wait_eq 1 sql 'SELECT COUNT(*) FROM lr_holds'
	run "$LOCKRUN" -c "$conf" -n -s cfgsem -- true
	assert_failure 42
	run "$LOCKRUN" -c "$conf" -n -E 7 -s cfgsem -- true
	assert_failure 7
	wait
}

@test "a config file holding a password that others may read or write gets a warning" {
	printf '[database]\nhost = 127.0.0.1\nport = %s\nuser = lockrun\npassword = %s\n' \
		"$LR_PORT" "$(cat "$LR_DB/lockrun.pw")" >"$conf"
	lr_server_key_conf "$LR_DB" >>"$conf"
	local mode
	for mode in 644 604 602; do
		chmod "$mode" "$conf"
		run --separate-stderr "$LOCKRUN" -c "$conf" -s cfgsem -- true
		assert_success
		[[ $stderr == "lockrun: warning: $conf holds a password and is "*" by others; chmod o-rwx it (0600, or 0640 with a group of its readers)" ]] ||
			fail "mode $mode: $stderr"
	done
	chmod 600 "$conf"
	run "$LOCKRUN" -c "$conf" -s cfgsem -- true
	assert_success
	assert_output ""
}

@test "a config file holding a password, 0640 with a group (as the packages install it): no warning" {
	printf '[database]\nhost = 127.0.0.1\nport = %s\nuser = lockrun\npassword = %s\n' \
		"$LR_PORT" "$(cat "$LR_DB/lockrun.pw")" >"$conf"
	lr_server_key_conf "$LR_DB" >>"$conf"
	chown root:daemon "$conf"
	chmod 640 "$conf"
	run "$LOCKRUN" -c "$conf" -s cfgsem -- true
	assert_success
	assert_output ""
	# group-readable and -writable: still the owner's and the group's only
	chmod 660 "$conf"
	run "$LOCKRUN" -c "$conf" -s cfgsem -- true
	assert_success
	assert_output ""
}

@test "a password_file that others may read gets a warning; 0640 with a group does not" {
	cp "$LR_DB/lockrun.pw" "$BATS_TEST_TMPDIR/pw"
	chown root:daemon "$BATS_TEST_TMPDIR/pw"
	sed "s|^password_file.*|password_file = $BATS_TEST_TMPDIR/pw|" "$LR_DB/lockrun.conf" >"$conf"
	chmod 640 "$BATS_TEST_TMPDIR/pw"
	run "$LOCKRUN" -c "$conf" -s cfgsem -- true
	assert_success
	assert_output ""
	chmod 644 "$BATS_TEST_TMPDIR/pw"
	run "$LOCKRUN" -c "$conf" -s cfgsem -- true
	assert_success
	assert_output "lockrun: warning: $BATS_TEST_TMPDIR/pw holds a password and is readable by others; chmod o-rwx it (0600, or 0640 with a group of its readers)"
	# lockrunctl reads it the same way
	run "$LOCKRUNCTL" -c "$conf" list --names
	assert_line --partial "warning: $BATS_TEST_TMPDIR/pw holds a password and is readable by others"
}

@test "the password is neither in the child's environment nor on any command line" {
	local pw
	pw=$(cat "$LR_DB/lockrun.pw")
	run "$LOCKRUN" -s cfgsem -- sh -c 'env; tr "\0" " " </proc/$PPID/cmdline'
	assert_success
	assert_output --partial "LOCKRUN_FENCE="
	refute_output --partial "$pw"
}

@test "with only a socket configured, the OS user logs in by unix_socket authentication" {
	printf '[database]\nsocket = %s\n' "$LR_SOCKET" >"$conf"
	run "$LOCKRUNCTL" -c "$conf" status cfgsem
	assert_success
	assert_output --partial "cfgsem"
}

@test "with no configuration at all, the local server's default socket is tried" {
	[[ ! -e /etc/lockrun.conf ]] || skip "/etc/lockrun.conf exists on this machine"
	env -u LOCKRUN_CONFIG "$LOCKRUNCTL" status >"$BATS_TEST_TMPDIR/out" 2>&1 && status=0 || status=$?
	[[ -S /run/mysqld/mysqld.sock ]] && skip "a system server is running here"
	assert_equal "$status" 69
	run cat "$BATS_TEST_TMPDIR/out"
	assert_output --partial "cannot connect to the local server's socket"
}

@test "option_file and option_group: the account comes from a my.cnf-style file" {
	printf '[lockrun_client]\nuser = lockrun\npassword = %s\n' "$(cat "$LR_DB/lockrun.pw")" >"$BATS_TEST_TMPDIR/my.cnf"
	chmod 600 "$BATS_TEST_TMPDIR/my.cnf"
	printf '[database]\nhost = 127.0.0.1\nport = %s\noption_file = %s\noption_group = lockrun_client\n' \
		"$LR_PORT" "$BATS_TEST_TMPDIR/my.cnf" >"$conf"
	lr_server_key_conf "$LR_DB" >>"$conf"
	run "$LOCKRUN" -c "$conf" -s cfgsem -- true
	assert_success
	# The lock log records the invoker as USER() does: account@client host.
	assert_equal "$(sql "SELECT db_user FROM lr_grants ORDER BY id DESC LIMIT 1")" "lockrun@127.0.0.1"
	# And a wrong password in it is the server's refusal, not a silent default.
	sed -i 's/^password = .*/password = wrong/' "$BATS_TEST_TMPDIR/my.cnf"
	run "$LOCKRUN" -c "$conf" -s cfgsem -- true
	assert_failure 69
	assert_output --partial "Access denied for user 'lockrun'"
}

@test "an indented key, a quoted value and a '# comment' after a value are configuration errors (78)" {
	printf '[database]\nuser = lockrun\n  password = secret\n' >"$conf"
	run -78 "$LOCKRUN" -c "$conf" -s cfgsem -- true
	assert_output "lockrun: $conf:3: 'password = secret' continues the value of user on the line above, as the line is indented; remove the indentation"
	printf '[database]\nuser = lockrun\npassword = secret # the old one\n' >"$conf"
	run -78 "$LOCKRUNCTL" -c "$conf" status
	assert_output "lockrunctl: $conf:3: password: '#' starts no comment after a value, ';' does (or put the comment on a line of its own)"
	printf '[database]\nuser = lockrun\npassword = "secret"\n' >"$conf"
	run -78 "$LOCKRUN" -c "$conf" -s cfgsem -- true
	assert_output "lockrun: $conf:3: password: the quotes would be part of the value; write it without them (a password that has them belongs in password_file)"
	printf "[database]\nuser = 'lockrun'\n" >"$conf"
	run -78 "$LOCKRUN" -c "$conf" -s cfgsem -- true
	assert_output "lockrun: $conf:2: user: the quotes would be part of the value; write it without them"
	# What stays allowed: '#' inside a value, a ' ;' comment, a key given twice.
	cp "$LR_DB/lockrun.conf" "$conf"
	printf '[lock]\nttl = 20 ; site default\nttl = 30\n' >>"$conf"
	run "$LOCKRUN" -c "$conf" -s cfgsem -- true
	assert_success
	printf 'pa#ss"word"\n' >"$BATS_TEST_TMPDIR/pw"
	chmod 600 "$BATS_TEST_TMPDIR/pw"
	printf '[database]\npassword_file = %s\n' "$BATS_TEST_TMPDIR/pw" >"$conf"
	run "$LOCKRUN" -c "$conf" -s cfgsem -- true
	refute_output --partial "$conf:"
}
