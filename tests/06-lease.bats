#!/usr/bin/env bats
#
# The lease deadline is kept whatever else stalls: a stderr nobody reads,
# the loop's own clock standing still (a suspend), a slow start of the
# command. And requests that could hold back a free resource's queue are
# refused. Judged from the children's own records, the lock log, exit
# statuses and stderr.

load helpers/common
load helpers/records
load helpers/proxy

bats_require_minimum_version 1.5.0

setup() {
	setup_records
	pids=()
}

teardown() {
	# Whatever a failed test left behind: lockrun first (its command dies
	# with it), then the proxy.
	rm -f "$BATS_TEST_TMPDIR/freeze"
	kill_pids
	[[ -z ${proxy_pid:-} ]] || kill "$proxy_pid" 2>/dev/null || true
	[[ -z ${general_log:-} ]] || sql "SET GLOBAL general_log = OFF"
}

# log_on: record every statement the server receives (mysql.general_log).
log_on() {
	general_log=1
	sql "SET GLOBAL log_output = 'TABLE'; SET GLOBAL general_log = OFF;
		TRUNCATE mysql.general_log; SET GLOBAL general_log = ON"
}

# lockrun_log: what lockrun's account sent after its handshake, one line per
# command: its type, and for statements what comes before the first '('
# (CALL and the name).
lockrun_log() {
	sql "SET GLOBAL general_log = OFF"
	sql "SELECT command_type, IF(command_type IN ('Query', 'Prepare', 'Execute'),
			SUBSTRING_INDEX(CONVERT(argument USING utf8mb4), '(', 1), '')
		FROM mysql.general_log
		WHERE user_host LIKE 'lockrun[lockrun]%' AND command_type <> 'Connect'
		ORDER BY event_time, thread_id"
}

# What lockrun_log shows of the session's SET (quiet_stmt), and of the
# first and a later run of CALL NAME on a connection. MariaDB: each CALL
# prepared, the prepare sent with the first execute. MySQL: CALLs go as
# text (a prepared one would show its arguments all the same), the first
# in one query with the SET, which the log shows as two.
set_line() {
	if lr_server_is_mysql; then
		printf 'Query\t%s;\n' "$(quiet_stmt)"
	else
		printf 'Query\t%s\n' "$(quiet_stmt)"
	fi
}
first_call() {
	if lr_server_is_mysql; then
		printf 'Query\tCALL %s\n' "$1"
	else
		printf 'Prepare\tCALL %s\nExecute\tCALL %s\n' "$1" "$1"
	fi
}
next_call() {
	if lr_server_is_mysql; then
		printf 'Query\tCALL %s\n' "$1"
	else
		printf 'Execute\tCALL %s\n' "$1"
	fi
}



# gone PID: true once process PID has exited.
gone() {
	! kill -0 "$1" 2>/dev/null
}

@test "a stderr nobody reads: the command is stopped before another holder's starts, and lockrun exits 76" {
	proxy
	local err=$BATS_TEST_TMPDIR/err fd
	mkfifo "$err"
	# Held open for reading and writing, never read, and filled up: from
	# now on every blocking write to it hangs.
	exec {fd}<>"$err"
	timeout 1 cat /dev/zero >&"$fd" || true
	# lockrun's stderr is the stalled pipe. The command's is not: the
	# shell's own "Terminated" would hang in it and keep its trap from
	# recording the stop (it is SIGKILLed in time all the same). But
	# first it notes the flags of the stderr it inherited.
	"$LOCKRUN" -c "$pconf" --ttl 3 --kill-after 0.5 -x stalled -- \
		sh -c "awk '/^flags:/ { print \$2 }' /proc/\$\$/fdinfo/2 >$rec.flags; exec 2>/dev/null; $(loop_cmd A)" 3>&- 2>"$err" &
	local a=$!
	pids+=("$a")
	lr_wait_for grep -q "enter A" "$rec"
	# lockrun's own writes never block, yet the command's stderr must
	# still block: O_NONBLOCK on the shared file would break its writes.
	local flags
	flags=$(cat "$rec.flags")
	(((8#$flags & 8#4000) == 0)) || fail "the command's stderr is O_NONBLOCK (flags $flags)"
	# lockrun has something to say now: "cannot renew the lease".
	pctl blackhole on
	run "$LOCKRUN" -w 15 -x stalled -- sh -c "$(rec_cmd "$rec" B)"
	assert_success
	run awk '{ print $1, $2 }' "$rec"
	assert_output "$(printf 'enter A\nleave A\nenter B\nleave B')"
	# The stderr is still never read: lockrun must not hang on it at exit.
	pctl reset
	lr_wait_for -t 15 gone "$a"
	local rc=0
	wait "$a" || rc=$?
	assert_equal "$rc" 76
	exec {fd}>&-
}

@test "log lines that do not fit are dropped, counted, and the count is reported once stderr drains" {
	local err=$BATS_TEST_TMPDIR/err fd out=$BATS_TEST_TMPDIR/out
	mkfifo "$err"
	exec {fd}<>"$err"
	# The command fills the pipe and blocks in it; with -v lockrun has a
	# line to write at every renewal (ttl 3: every second).
	"$LOCKRUN" -v --ttl 3 --kill-after 0.5 -x drops -- \
		sh -c "head -c 70000 /dev/zero >&2; $(loop_cmd A)" 3>&- 2>"$err" &
	local a=$!
	pids+=("$a")
	lr_wait_eq 1 holds drops
	sleep 2.5
	# Drain: the command goes on, and so do renewals and their lines.
	timeout 1 cat <&"$fd" | tr -d '\0' >"$out" || true
	lr_wait_for grep -q "enter A" "$rec"
	sleep 1.5
	timeout 1 cat <&"$fd" | tr -d '\0' >>"$out" || true
	kill -TERM "$a"
	wait "$a" || true
	exec {fd}>&-
	run cat "$out"
	assert_output --regexp "lockrun: warning: [0-9]+ log lines? dropped \(stderr was not writable\)"
	assert_output --partial "renewed grant"
}

@test "the deadline fires on time while the loop's own clock stands still (a suspend)" {
	proxy
	local freeze=$BATS_TEST_TMPDIR/freeze
	LD_PRELOAD=$LR_TOOLS/lrclock.so LR_CLOCK_FREEZE=$freeze \
		"$LOCKRUN" -c "$pconf" --ttl 3 --kill-after 0.5 -x suspended -- sh -c "$(loop_cmd A)" 3>&- 2>/dev/null &
	local a=$!
	pids+=("$a")
	lr_wait_for grep -q "enter A" "$rec"
	# From now on libuv's timers never come due; the lease runs out at
	# the server all the same.
	touch "$freeze"
	pctl blackhole on
	run "$LOCKRUN" -w 15 -x suspended -- sh -c "$(rec_cmd "$rec" B)"
	assert_success
	run awk '{ print $1, $2 }' "$rec"
	assert_output "$(printf 'enter A\nleave A\nenter B\nleave B')"
	# "Resume": lockrun finishes its release and exits.
	rm -f "$freeze"
	pctl reset
	lr_wait_for -t 20 gone "$a"
	local rc=0
	wait "$a" || rc=$?
	assert_equal "$rc" 76
}

@test "the shim really stops the loop's clock: without the cut, renewals stop and the deadline ends the run" {
	local freeze=$BATS_TEST_TMPDIR/freeze log=$BATS_TEST_TMPDIR/log
	LD_PRELOAD=$LR_TOOLS/lrclock.so LR_CLOCK_FREEZE=$freeze \
		"$LOCKRUN" -v --ttl 3 --kill-after 0.5 -x frozenloop -- sh -c "$(loop_cmd A)" 3>&- 2>"$log" &
	local a=$!
	pids+=("$a")
	lr_wait_for grep -q "enter A" "$rec"
	touch "$freeze"
	# No beat comes due, so nothing is renewed: the boottime deadline
	# stops the command within the lease.
	lr_wait_for -t 5 grep -q "leave A" "$rec"
	rm -f "$freeze"
	lr_wait_for -t 20 gone "$a"
	local rc=0
	wait "$a" || rc=$?
	assert_equal "$rc" 76
	run cat "$log"
	assert_output --partial "lock lost (not renewed in time)"
}

@test "a command whose start took past the deadline is stopped at once: exit 76, lost in the lock log" {
	# Every fork takes 3.5 s: the lease (ttl 3) is over by the time the
	# command runs. It would note "work" after a short sleep; it must get
	# SIGTERM first.
	run env LD_PRELOAD="$LR_TOOLS/lrclock.so" LR_CLOCK_FORK_DELAY=3500 \
		"$LOCKRUN" --ttl 3 --kill-after 0.5 -x latestart -- \
		sh -c "trap 'echo term >>$rec; exit 0' TERM; sleep 0.5; echo work >>$rec"
	assert_failure 76
	assert_output --partial "lock lost"
	# SIGTERM may come before the shell has even set its trap.
	run cat "$rec"
	refute_output --partial work
	assert_equal "$(sql "SELECT end_reason FROM lr_grants")" lost
	assert_equal "$(holds latestart)" 0
}

# no_rows: nothing was written to the lock tables.
no_rows() {
	assert_equal "$(sql "SELECT (SELECT COUNT(*) FROM lr_grants) + (SELECT COUNT(*) FROM lr_waiters) + (SELECT COUNT(*) FROM lr_resources) + (SELECT COUNT(*) FROM lr_holds)")" 0
}

@test "--named with a table lock that could queue is refused before connecting (exit 64); a request that cannot wait is not" {
	ctl set sem9 2
	reset_db
	# A database that is not there: the refusal comes first.
	local conf=$BATS_TEST_TMPDIR/nowhere.conf
	sed "s/^port = .*/port = $(lr_free_port)/" "$LR_DB/lockrun.conf" >"$conf"
	chmod 600 "$conf"
	local opt
	for opt in "-x m9" "-s sem9:1" "--read r9" "--write w9"; do
		# shellcheck disable=SC2086 # word splitting wanted
		run -64 "$LOCKRUN" -c "$conf" --named n9 $opt -- touch "$rec.ran"
		assert_output "lockrun: --named n9 cannot be combined with ${opt%%:*} in a request that waits: use -n or --wait 0, or take the named lock in a lockrun of its own"
		# shellcheck disable=SC2086
		run -64 "$LOCKRUN" -w 5 $opt --named n9 -- touch "$rec.ran"
		assert_output --partial "--named n9 cannot be combined with ${opt%%:*}"
	done
	# Against the real database too: nothing is written anywhere.
	run -64 "$LOCKRUN" --named n9 -x m9 -- touch "$rec.ran"
	assert [ ! -e "$rec.ran" ]
	no_rows
	# A wait of 0 from the configuration file counts as well.
	local wconf=$BATS_TEST_TMPDIR/wait.conf
	cp "$LOCKRUN_CONFIG" "$wconf"
	printf '[lock]\nwait = 0\n' >>"$wconf"
	chmod 600 "$wconf"
	run "$LOCKRUN" -c "$wconf" --named n9 -x m9 -- echo ran
	assert_success
	assert_output ran
	# So does one from the command line; and --id never queues.
	run "$LOCKRUN" -n --named n9 -x m9 -- echo ran
	assert_success
	assert_output ran
	run "$LOCKRUN" --wait 0 --named n9 --write w9 -- echo ran
	assert_success
	assert_output ran
	run "$LOCKRUN" --named n9 --id k9 -- echo ran
	assert_success
	assert_output ran
	# And still all or nothing: the named lock busy, the mutex is not kept.
	"$LOCKRUN" --named n9 -- sleep 1 3>&- &
	lr_wait_eq 1 sql "SELECT IS_USED_LOCK('n9') IS NOT NULL"
	run -75 "$LOCKRUN" -n --named n9 -x m9 -- true
	assert_equal "$(holds m9)" 0
	assert_equal "$(waiters)" 0
	wait
}

@test "an uncontended run is one CALL to acquire and one to release, each prepared once on MariaDB: nothing else is sent" {
	log_on
	run "$LOCKRUN" -x rtt -- true
	assert_success
	run lockrun_log
	assert_output "$(set_line; first_call lockrun_acquire; first_call lockrun_release; printf 'Quit\t')"
}

@test "a command that runs a while with nobody queued behind sends nothing more" {
	log_on
	"$LOCKRUN" -x prep -- sh -c "sleep 0.5; $(rec_cmd "$rec" A)"
	run lockrun_log
	assert_output "$(set_line; first_call lockrun_acquire; first_call lockrun_release; printf 'Quit\t')"
	assert_equal "$(sql "SELECT CONCAT(end_reason, ' ', exit_status) FROM lr_grants")" "exited 0"
}

@test "a run granted with others queued behind has its release prepared once, which releases nothing" {
	local go=$BATS_TEST_TMPDIR/go
	# The holder and W1's command each stay until the test lets them go,
	# so that the order below does not rest on how fast lockrun starts.
	"$LOCKRUN" -x prep -- sh -c "while [ ! -e $go.H ]; do sleep 0.01; done" &
	pids+=($!)
	lr_wait_eq 1 holds prep
	log_on
	# Own places in the database's queue, not the host's: W1 is handed the
	# lock with W2 behind it.
	"$LOCKRUN" --no-local-queue -w 30 -x prep -- \
		sh -c "while [ ! -e $go.W1 ]; do sleep 0.01; done; $(rec_cmd "$rec" W1)" &
	local w1=$!
	pids+=("$w1")
	lr_wait_eq 1 sql "SELECT COUNT(*) FROM lr_waiters WHERE resource = 'prep'"
	"$LOCKRUN" --no-local-queue -w 30 -x prep -- true &
	local w2=$!
	pids+=("$w2")
	lr_wait_eq 2 sql "SELECT COUNT(*) FROM lr_waiters WHERE resource = 'prep'"
	touch "$go.H"
	lr_wait_eq 1 sql "SELECT COUNT(*) FROM mysql.general_log WHERE argument LIKE 'CALL lockrun_release(NULL%'"
	# Prepared while W1's command runs, and W1 still holds the lock.
	assert_equal "$(holds prep)" 1
	[[ ! -s $rec ]] || fail "the command was done before the release was prepared"
	touch "$go.W1"
	wait "$w1"
	wait "$w2"
	assert_equal "$(sql "SELECT COUNT(*) FROM mysql.general_log WHERE argument LIKE 'CALL lockrun_release(NULL%'")" 1
	assert_equal "$(sql "SELECT GROUP_CONCAT(CONCAT(end_reason, ' ', exit_status) ORDER BY id) FROM lr_grants")" \
		"exited 0,exited 0,exited 0"
	assert_equal "$(holds prep)" 0
}

@test "an idle holder sends one statement per renewal interval: CALL lockrun_renew" {
	log_on
	# ttl 3: a renewal every second, so about three while the command runs.
	run "$LOCKRUN" --ttl 3 --kill-after 0.5 -x idle -- sleep 3.5
	assert_success
	run lockrun_log
	echo "$output"
	# Once per connection: its statements kept out of the slow log, and
	# on MariaDB each CALL prepared (its arguments travel apart from its
	# text).
	local first
	first=$(set_line; first_call lockrun_acquire)
	assert_equal "$(head -n "$(wc -l <<<"$first")" <<<"$output")" "$first"
	assert_line --index $((${#lines[@]} - 2)) "$(next_call lockrun_release)"
	local renewals
	renewals=$(grep -cx "$(next_call lockrun_renew)" <<<"$output")
	((renewals >= 2 && renewals <= 4)) || fail "$renewals renewals in 3.5 s"
	# Nothing but those: acquire, renewals, release, each prepared once on
	# MariaDB, the SET and quit (nobody waits, so the release is not warmed
	# up).
	if lr_server_is_mysql; then
		assert_equal "${#lines[@]}" $((renewals + 4))
	else
		assert_equal "$(grep -cx $'Prepare\tCALL lockrun_renew' <<<"$output")" 1
		assert_equal "${#lines[@]}" $((renewals + 7))
	fi
}
