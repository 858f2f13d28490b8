#!/usr/bin/env bats
#
# lockrun as the main process of a systemd service, without systemd: what
# systemd hands a service (JOURNAL_STREAM, NOTIFY_SOCKET) is made here by
# hand, and "systemctl stop" is the SIGTERM it sends.

load helpers/common

bats_require_minimum_version 1.5.0

setup() {
	reset_db
	out=$BATS_TEST_TMPDIR/out
}

# dev_ino FILE: FILE's "DEV:INODE", as systemd writes JOURNAL_STREAM.
dev_ino() { stat -L -c '%d:%i' "$1"; }

# jrun STATUS FILE CMD...: run CMD with stderr appended to FILE and
# JOURNAL_STREAM naming FILE, as if FILE were the journal; fail unless CMD
# exits with STATUS.
jrun() {
	local want=$1 file=$2 rc=0
	shift 2
	JOURNAL_STREAM=$(dev_ino "$file") "$@" 2>>"$file" || rc=$?
	[[ $rc == "$want" ]] || fail "$* exited with $rc, not $want: $(cat "$file")"
}

# Every line lockrun wrote to FILE starts with a syslog priority "<N>".
# (The command's own lines are left as they are.)
all_prefixed() {
	local line
	while IFS= read -r line; do
		[[ $line == *lockrun:* && $line != '<'[0-7]'>lockrun: '* ]] &&
			fail "line without a priority prefix: $line"
	done <"$1"
	return 0
}

@test "stderr that is the journal stream: each line carries its syslog priority" {
	local err=$BATS_TEST_TMPDIR/err conf=$BATS_TEST_TMPDIR/pw.conf
	: >"$err"
	# info (6) and debug (7) lines, and the command's line untouched
	jrun 0 "$err" "$LOCKRUN" -vv -x jr -- sh -c 'echo from-command >&2'
	grep -q '^<6>lockrun: acquired grant ' "$err" || fail "no <6> info line: $(cat "$err")"
	grep -q '^<7>lockrun: debug: ' "$err" || fail "no <7> debug line: $(cat "$err")"
	grep -qx 'from-command' "$err" || fail "the command's line changed: $(cat "$err")"
	# an error (3): an unknown semaphore
	jrun 64 "$err" "$LOCKRUN" -s no-such-sem -- true
	grep -q "^<3>lockrun: .*no-such-sem" "$err" || fail "no <3> error line: $(cat "$err")"
	# a warning (4): a password in a file others may read
	sed "s|^password_file = .*|password = $(cat "$LR_DB/lockrun.pw")|" "$LOCKRUN_CONFIG" >"$conf"
	chmod 644 "$conf"
	jrun 0 "$err" "$LOCKRUN" -c "$conf" -x jr -- true
	grep -q '^<4>lockrun: warning: .*readable by others' "$err" ||
		fail "no <4> warning line: $(cat "$err")"
	all_prefixed "$err"
	# lockrunctl's lines too
	jrun 64 "$err" "$LOCKRUNCTL" no-such-command
	grep -q '^<3>lockrunctl: ' "$err" || fail "no <3> lockrunctl line: $(cat "$err")"
}

@test "stderr that is not the stream JOURNAL_STREAM names: no prefixes" {
	local err=$BATS_TEST_TMPDIR/err other=$BATS_TEST_TMPDIR/other
	: >"$other"
	# stderr redirected away from the journal, by the service's command line
	# or a parent in between: the variable is inherited but no longer true
	JOURNAL_STREAM=$(dev_ino "$other") "$LOCKRUN" -v -x jr -- true 2>"$err"
	grep -q '^lockrun: acquired grant ' "$err" || fail "unexpected: $(cat "$err")"
	run ! grep -q '^<' "$err"
	for junk in '' ':' '12' "$(dev_ino "$err")x" "x$(dev_ino "$err")" "$(dev_ino "$err"):1"; do
		JOURNAL_STREAM=$junk "$LOCKRUN" -v -x jr -- true 2>"$err"
		grep -q '^lockrun: acquired grant ' "$err" || fail "JOURNAL_STREAM='$junk': $(cat "$err")"
	done
}

@test "journald's stream is a socket: prefixed lines go through it" {
	# As systemd does it: fd 2 is a connected stream socket, and
	# JOURNAL_STREAM is that socket's device and inode.
	run python3 - "$LOCKRUN" <<-'EOF'
		import os, socket, subprocess, sys
		ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
		st = os.fstat(theirs.fileno())
		env = dict(os.environ, JOURNAL_STREAM="%d:%d" % (st.st_dev, st.st_ino))
		p = subprocess.Popen([sys.argv[1], "-v", "-x", "jr-sock", "--", "true"],
		                     stdin=subprocess.DEVNULL, stderr=theirs, env=env)
		theirs.close()
		p.wait()
		data = b""
		while True:
		    b = ours.recv(65536)
		    if not b:
		        break
		    data += b
		sys.stdout.write(data.decode())
		sys.exit(p.returncode)
	EOF
	assert_success
	assert_line --regexp '^<6>lockrun: acquired grant [0-9]+$'
	assert_line --regexp '^<6>lockrun: released grant [0-9]+$'
}

# notify_listener SOCKET FILE: in the background, a stand-in for systemd's
# notification socket, which writes the first datagram to FILE; waits until
# it listens.
notify_listener() {
	python3 - "$1" "$2" 3>&- <<-'EOF' &
		import socket, sys
		s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
		s.bind(sys.argv[1])
		s.settimeout(30)
		msg = s.recv(4096)
		with open(sys.argv[2] + ".tmp", "wb") as f:
		    f.write(msg)
		import os
		os.rename(sys.argv[2] + ".tmp", sys.argv[2])
		# systemd-notify goes on with BARRIER=1 and a pipe's write end, and
		# waits until that is closed: close it, as the service manager does,
		# and keep the socket until then (or 2 s of silence).
		import array
		s.settimeout(2)
		try:
		    while True:
		        data, anc, _, _ = s.recvmsg(4096, socket.CMSG_SPACE(64))
		        for level, kind, fds in anc:
		            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
		                a = array.array("i")
		                a.frombytes(fds[:len(fds) - len(fds) % a.itemsize])
		                for fd in a:
		                    os.close(fd)
		        if data.startswith(b"BARRIER=1"):
		            break
		except socket.timeout:
		    pass
	EOF
	listener=$!
	lr_wait_for test -S "$1"
}

# What sd_notify(3) does: one datagram to $NOTIFY_SOCKET; the message is
# the first argument.
sd_notify='import os, socket, sys; socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendto(sys.argv[1].encode(), os.environ["NOTIFY_SOCKET"])'

@test "NOTIFY_SOCKET reaches the command: Type=notify services work under lockrun" {
	local sock=$BATS_TEST_TMPDIR/notify msg=$BATS_TEST_TMPDIR/msg
	notify_listener "$sock" "$msg"
	NOTIFY_SOCKET=$sock run "$LOCKRUN" -x notify -- sh -c \
		'echo "$NOTIFY_SOCKET"; python3 -c "$1" "READY=1
STATUS=backing up"' sh "$sd_notify"
	assert_success
	assert_output "$sock"
	lr_wait_for test -e "$msg"
	wait "$listener"
	assert_equal "$(cat "$msg")" "READY=1
STATUS=backing up"
	assert_equal "$(holds)" 0
}

@test "systemd-notify under lockrun reaches the notification socket" {
	command -v systemd-notify >/dev/null || skip "systemd-notify is not installed"
	local sock=$BATS_TEST_TMPDIR/notify msg=$BATS_TEST_TMPDIR/msg
	notify_listener "$sock" "$msg"
	NOTIFY_SOCKET=$sock run "$LOCKRUN" -x notify -- systemd-notify --ready --status=locked
	assert_success
	lr_wait_for test -e "$msg"
	wait "$listener"
	run cat "$msg"
	assert_line READY=1
	assert_line STATUS=locked
}

# stop_cmd: a command that, on SIGTERM, records it, cleans up for a second
# (its lock still held), then dies of the SIGTERM as a command without a
# handler would.
stop_cmd() {
	printf '%s' "trap 'echo term >$out; sleep 1; echo cleaned >>$out; trap - TERM; kill -TERM \$\$' TERM;
		echo \$\$ >$out.pid; while :; do sleep 0.05; done"
}

@test "systemctl stop with KillMode=mixed (SIGTERM to lockrun): 143 after the command, lock released" {
	"$LOCKRUN" -x stop-mixed -- sh -c "$(stop_cmd)" 3>&- &
	local pid=$! rc=0
	lr_wait_for test -s "$out.pid"
	kill -TERM "$pid"
	lr_wait_for test -s "$out"
	# The command cleans up: lockrun waits for it, still holding the lock.
	assert_equal "$(holds stop-mixed)" 1
	kill -0 "$pid" || fail "lockrun exited before its command"
	wait "$pid" || rc=$?
	assert_equal "$rc" 143
	assert_equal "$(cat "$out")" "term
cleaned"
	assert_equal "$(holds)" 0
	assert_equal "$(sql "SELECT end_reason, term_signal FROM lr_grants")" "$(printf 'signaled\t15')"
}

@test "systemctl stop with KillMode=control-group (SIGTERM to both): 143, lock released" {
	"$LOCKRUN" -x stop-cg -- sh -c 'echo $$ >'"$out.pid"'; exec sleep 60' 3>&- &
	local pid=$! rc=0
	lr_wait_for test -s "$out.pid"
	kill -TERM "$pid" "$(cat "$out.pid")"
	wait "$pid" || rc=$?
	assert_equal "$rc" 143
	assert_equal "$(holds)" 0
	assert_equal "$(sql "SELECT end_reason, term_signal FROM lr_grants")" "$(printf 'signaled\t15')"
}
