#!/usr/bin/env bats
#
# lockrun as a container's only process: PID 1 of a PID namespace of its
# own (unshare), as in a container without an init. It reaps the orphans
# that are reparented to it, as tini does, and still exits with its
# command's status; outside PID 1 it reaps its command only.
#
# The commands judge from inside what lockrun cannot tell them (their
# parent, the states in /proc) and write it to a record file; the tests
# judge from outside: the record, exit statuses and the lock log.

load helpers/common

bats_require_minimum_version 1.5.0

setup() {
	reset_db
	rec=$BATS_TEST_TMPDIR/rec
}

# as_init CMD...: run CMD as PID 1 of a new PID namespace, with a /proc
# of its own. A lockrun that hangs (it lost its command's status, say) is
# killed after 60 s with all of the namespace, and the status is 124.
as_init() {
	timeout -k 5 60 unshare -p -f --kill-child --mount-proc "$@"
}

# The sh functions the commands below use. state PID: the state letter
# of process PID (Z for a zombie), empty once it is gone. zombies: how
# many zombies there are (with --mount-proc, in the namespace only).
# Builtins only: a command of ours would be one more child to wait for.
# shellcheck disable=SC2016 # expanded by the command's shell
procfns='state() { line=; [ -e "/proc/$1" ] && read -r line 2>/dev/null <"/proc/$1/stat"; s=${line##*) }; echo "${s%% *}"; }
zombies() { n=0; for f in /proc/[0-9]*/stat; do line=; read -r line 2>/dev/null <"$f" || continue; s=${line##*) }; case $s in Z*) n=$((n + 1)) ;; esac; done; echo "$n"; }
'

# A command, run as `sh -c CMD sh RECORD`, that orphans a `sleep 0.3` (its
# parent exits at once), waits up to 5 s for it to be reaped, and records
# its own parent, what became of the orphan (gone, or its state) and the
# zombies left.
# shellcheck disable=SC2016
orphan_cmd="$procfns"'
echo "parent $PPID" >"$1"
sh -c '\''sleep 0.3 & echo $! >"$1"'\'' sh "$1.orphan"
o=$(cat "$1.orphan")
i=0
while [ -n "$(state "$o")" ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
st=$(state "$o")
echo "orphan ${st:-gone}" >>"$1"
echo "zombies $(zombies)" >>"$1"
'

@test "as PID 1: an orphan that exits is reaped, no zombie is left, status 0 passed on" {
	local rc=0
	as_init "$LOCKRUN" -x pid1-orphan -- sh -c "$orphan_cmd" sh "$rec" || rc=$?
	assert_equal "$(cat "$rec")" "parent 1
orphan gone
zombies 0"
	assert_equal "$rc" 0
	assert_equal "$(holds)" 0
	assert_equal "$(sql "SELECT end_reason, exit_status FROM lr_grants")" "$(printf 'exited\t0')"
}

# A command, run as `sh -c CMD sh RECORD PID`, that waits up to 5 s for
# process PID (not its child) to be reaped or become a zombie, records
# what it saw, and exits 7.
# shellcheck disable=SC2016
other_cmd="$procfns"'
i=0
while [ "$(state "$2")" != Z ] && [ -n "$(state "$2")" ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
st=$(state "$2")
echo "other ${st:-gone}" >"$1"
exit 7
'

# other_child [as_init]: lockrun execs from a shell that has a child of
# its own, `sleep 0.3`, which lockrun inherits: a child of lockrun that is
# not its command.
# shellcheck disable=SC2016
other_child() {
	"$@" sh -c 'sleep 0.3 & exec "$1" -x other -- sh -c "$2" sh "$3" $!' \
		sh "$LOCKRUN" "$other_cmd" "$rec"
}

@test "as PID 1: another child of lockrun's is reaped too, the command's status 7 passed on" {
	run -7 other_child as_init
	assert_equal "$(cat "$rec")" "other gone"
	assert_equal "$(sql "SELECT end_reason, exit_status FROM lr_grants")" "$(printf 'exited\t7')"
}

@test "not PID 1: lockrun reaps its command only; another child of its stays a zombie" {
	run -7 other_child
	assert_equal "$(cat "$rec")" "other Z"
	assert_equal "$(sql "SELECT end_reason, exit_status FROM lr_grants")" "$(printf 'exited\t7')"
}

@test "as PID 1: status 7 passed on exactly while orphans exit around the command's end" {
	# 20 orphans that end about when the command does: each SIGCHLD may
	# find the command's exit among theirs, and it must never be taken as
	# an orphan's.
	local i
	for i in 1 2 3; do
		run -7 as_init "$LOCKRUN" -x "pid1-race-$i" -- sh -c \
			'for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
				sh -c "sleep 0.2 &"
			done
			sleep 0.2
			exit 7'
	done
	assert_equal "$(sql "SELECT GROUP_CONCAT(CONCAT(end_reason, ' ', exit_status)) FROM lr_grants")" \
		"exited 7,exited 7,exited 7"
	assert_equal "$(holds)" 0
}

@test "as PID 1: a command killed by SIGKILL gives 137 (128 + 9)" {
	run -137 as_init "$LOCKRUN" -x pid1-kill -- sh -c 'kill -KILL $$'
	assert_equal "$(holds)" 0
	assert_equal "$(sql "SELECT CONCAT(end_reason, ' ', term_signal) FROM lr_grants")" "signaled 9"
}

gone() { ! kill -0 "$1" 2>/dev/null; }

@test "as PID 1: SIGTERM to lockrun (a pod's deletion) reaches the command; 143, lock released" {
	# shellcheck disable=SC2016
	unshare -p -f --kill-child --mount-proc "$LOCKRUN" -x pid1-term -- \
		sh -c 'echo $PPID >"$1"; exec sleep 60' sh "$rec" 3>&- &
	local outer=$! init rc=0
	lr_wait_for test -s "$rec"
	assert_equal "$(cat "$rec")" 1
	# unshare's child, lockrun, is PID 1 inside.
	init=$(<"/proc/$outer/task/$outer/children")
	init=${init%% *}
	[[ -n $init ]] || fail "unshare has no child"
	kill -TERM "$init"
	if ! lr_wait_for -t 10 gone "$outer"; then
		kill -KILL "$init"
		fail "lockrun did not exit after SIGTERM"
	fi
	wait "$outer" || rc=$?
	assert_equal "$rc" 143
	assert_equal "$(holds)" 0
	assert_equal "$(sql "SELECT end_reason, term_signal FROM lr_grants")" "$(printf 'signaled\t15')"
}
