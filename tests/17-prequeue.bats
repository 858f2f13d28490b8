#!/usr/bin/env bats
#
# The host's queue: runs of one host that want the same locks wait on a
# file lock first, holding no database connection; only the head of that
# queue waits in the database's queue, and it leaves the host's queue once
# granted. The suite's config turns the queue off (each lockrun plays a
# host of its own): these tests turn it on with --local-queue, each with a
# directory of its own, except where the default directory is the point.
# Exclusion and "ran once" are judged from the children's records.

load helpers/common
load helpers/records

bats_require_minimum_version 1.5.0

setup() {
	setup_records
	pids=()
	qdir=$BATS_TEST_TMPDIR/q
	conf=$BATS_TEST_TMPDIR/lq.conf
	cp "$LOCKRUN_CONFIG" "$conf"
	printf '[lock]\nlocal_queue = on\nlocal_queue_dir = %s\n' "$qdir" >>"$conf"
	# Connections still closing from an earlier test would blur the counts.
	lr_wait_eq 0 lockrun_conns
}

teardown() {
	local p
	for p in "${pids[@]}" ${holder:-}; do kill -TERM "$p" 2>/dev/null || true; done
	for p in "${pids[@]}" ${holder:-}; do wait "$p" 2>/dev/null || true; done
	[[ -z ${locker:-} ]] || kill "$locker" 2>/dev/null || true
}

# lockrun_conns: open connections of the account lockrun uses.
lockrun_conns() {
	sql "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = 'lockrun'"
}

# hold ARGS...: a background lockrun that holds what ARGS ask for until
# $BATS_TEST_TMPDIR/go.holder exists (records as "holder"); waits until it
# holds.
hold() {
	"$LOCKRUN" -c "$conf" "$@" -- sh -c "$(until_cmd holder)" 3>&- &
	holder=$!
	lr_wait_for grep -q "^enter holder " "$rec"
}

# most_conns SECONDS: the most lockrun connections seen in SECONDS of
# sampling every 0.2 s.
most_conns() {
	local end=$((${EPOCHREALTIME/[.,]/} + $1 * 1000000)) n most=0
	while ((${EPOCHREALTIME/[.,]/} < end)); do
		n=$(lockrun_conns)
		((n > most)) && most=$n
		sleep 0.2
	done
	echo "$most"
}

# live_count PID...: how many of PIDs still run.
live_count() {
	local p n=0
	for p in "$@"; do
		kill -0 "$p" 2>/dev/null && n=$((n + 1))
	done
	echo "$n"
}

# wait_all WHAT: wait for every run in pids; each must succeed.
wait_all() {
	local p
	for p in "${pids[@]}"; do
		wait "$p" || fail "$1 failed"
	done
	pids=()
}

# head_settled NAME: the head of NAME's database queue sleeps on its
# second connection (lockrun_sleep registered it): the head is all in.
head_settled() {
	[[ $(sql "SELECT COUNT(*) FROM lr_waiters WHERE resource = '$1' AND wake_conn IS NOT NULL") == 1 ]]
}

@test "50 waiters on one mutex hold 2 connections, then each runs once, alone" {
	hold -x pq50
	local base i
	base=$(lockrun_conns)
	for ((i = 0; i < 50; i++)); do
		"$LOCKRUN" -c "$conf" -w 120 -x pq50 -- sh -c "$(rec_cmd "$rec" pq50 -- 0.02)" 3>&- &
		pids+=($!)
	done
	lr_wait_for head_settled pq50
	assert_equal "$(waiters pq50)" 1
	# The head: its connection and its doorbell; the other 49 none.
	local most
	most=$(most_conns 3)
	((most <= base + 2)) || fail "$most connections with 50 waiting (base $base)"
	touch "$BATS_TEST_TMPDIR/go.holder"
	wait_all "a waiter"
	assert_equal "$(rec_count "$rec" enter pq50)" 50
	assert_equal "$(rec_count "$rec" leave pq50)" 50
	assert_equal "$(rec_max "$rec" pq50)" 1
	assert_equal "$(waiters)" 0
	assert_equal "$(holds)" 0
}

@test "in practice, the runs of one host go in the order they came" {
	hold -x pqfifo
	local i
	for i in 1 2 3 4 5 6; do
		"$LOCKRUN" -c "$conf" -v -w 120 -x pqfifo -- sh -c "$(rec_cmd "$rec" "r$i" -- 0.01)" \
			2>"$BATS_TEST_TMPDIR/err.$i" 3>&- &
		pids+=($!)
		if ((i == 1)); then
			lr_wait_for head_settled pqfifo
		else
			lr_wait_for grep -q "waiting behind another run of this host" "$BATS_TEST_TMPDIR/err.$i"
			sleep 0.3 # until its thread waits in the kernel
		fi
	done
	touch "$BATS_TEST_TMPDIR/go.holder"
	wait_all "a waiter"
	assert_equal "$(awk '$1 == "enter" && $2 ~ /^r/ { printf "%s ", $2 }' "$rec")" "r1 r2 r3 r4 r5 r6 "
}

@test "the default directory is this user's, made when missing" {
	local d=/run/lockrun
	((EUID == 0)) || d=${XDG_RUNTIME_DIR:-/tmp/lockrun-$EUID}
	# No local_queue_dir: the default. (No test removes it: other suites
	# may use it at the same time.)
	run "$LOCKRUN" --local-queue -vv -w 5 -x pqdef -- true
	assert_success
	assert_output --regexp "host queue: $d/[0-9a-f]{16}\.lock"
	local f=${output##*host queue: }
	f=${f%%$'\n'*}
	[[ -O $d && $(stat -c %a "$d") == 700 ]] || fail "$d: $(stat -c '%U %a' "$d")"
	grep -qx "mutex pqdef 1" "$f" || fail "$f does not name its request: $(cat "$f")"
}

@test "--no-local-queue and local_queue = off: each waiter has a place of its own" {
	hold -x pqoff
	local i
	for ((i = 0; i < 3; i++)); do
		"$LOCKRUN" -c "$conf" --no-local-queue -w 60 -x pqoff -- true 3>&- &
		pids+=($!)
	done
	printf '[lock]\nlocal_queue = off\n' >>"$conf"
	for ((i = 0; i < 3; i++)); do
		"$LOCKRUN" -c "$conf" -w 60 -x pqoff -- true 3>&- &
		pids+=($!)
	done
	lr_wait_eq 6 waiters pqoff
	touch "$BATS_TEST_TMPDIR/go.holder"
	wait_all "a waiter"
}

@test "an unusable directory: waits at the database directly, and says so at -v" {
	: >"$BATS_TEST_TMPDIR/file"
	sed -i "s|^local_queue_dir = .*|local_queue_dir = $BATS_TEST_TMPDIR/file/q|" "$conf"
	run "$LOCKRUN" -c "$conf" -v -w 5 -x pqbad -- true
	assert_success
	assert_output --partial "no queue on this host (cannot make $BATS_TEST_TMPDIR/file/q: Not a directory): waiting at the database directly"
	# A directory others may write to is not used either.
	mkdir -m 777 "$qdir"
	chmod 777 "$qdir"
	sed -i "s|^local_queue_dir = .*|local_queue_dir = $qdir|" "$conf"
	run "$LOCKRUN" -c "$conf" -v -w 5 -x pqbad -- true
	assert_success
	assert_output --partial "no queue on this host ($qdir is not a directory of this user that only it may write to)"
	# Without -v, nothing is said.
	run "$LOCKRUN" -c "$conf" -w 5 -x pqbad -- true
	assert_success
	assert_output ""
}

@test "a semaphore of 3: three local holders run together, the rest wait with 2 connections" {
	ctl set pqsem 3
	local i base most
	base=$(lockrun_conns)
	for ((i = 0; i < 8; i++)); do
		"$LOCKRUN" -c "$conf" -w 120 -s pqsem -- sh -c "$(rec_cmd "$rec" pqsem -- 3)" 3>&- &
		pids+=($!)
	done
	lr_wait_eq 3 holds pqsem
	lr_wait_for head_settled pqsem
	# Three holders (one connection each), one head (two).
	most=$(most_conns 1)
	((most <= base + 5)) || fail "$most connections with 3 holding and 5 waiting"
	wait_all "a run"
	assert_equal "$(rec_count "$rec" enter pqsem)" 8
	assert_equal "$(rec_max "$rec" pqsem)" 3
}

@test "--wait counts the time in the host's queue; running out there is 'not acquired'" {
	hold -x pqw
	"$LOCKRUN" -c "$conf" -w 60 -x pqw -- true 3>&- &
	local head=$!
	pids+=($head)
	lr_wait_for head_settled pqw
	# Behind the head on this host: gives up after 1 s, as at the database.
	local t0=${EPOCHREALTIME/[.,]/}
	run -42 "$LOCKRUN" -c "$conf" -w 1 -E 42 -x pqw -- touch "$BATS_TEST_TMPDIR/ran"
	local ms=$(((${EPOCHREALTIME/[.,]/} - t0) / 1000))
	assert_output --partial "not acquired after 1 s: another run of this host is ahead in its queue for mutex 'pqw' (it holds them or waits for them at the database; 'lockrunctl status' shows who)"
	((ms >= 900 && ms < 5000)) || fail "gave up after $ms ms"
	# One wait in all: 2.5 s in the host's queue leave 1.5 s for the
	# database's (the head goes away, the holder stays).
	"$LOCKRUN" -c "$conf" -w 4 -x pqw -- touch "$BATS_TEST_TMPDIR/ran" 2>"$BATS_TEST_TMPDIR/err" 3>&- &
	local late=$!
	t0=${EPOCHREALTIME/[.,]/}
	sleep 2.5
	kill -TERM "$head"
	wait "$head" || true
	local rc=0
	wait "$late" || rc=$?
	ms=$(((${EPOCHREALTIME/[.,]/} - t0) / 1000))
	assert_equal "$rc" 75
	((ms < 5500)) || fail "waited $ms ms with --wait 4"
	[[ ! -e $BATS_TEST_TMPDIR/ran ]] || fail "ran without the lock"
}

@test "SIGTERM and SIGINT end a wait in the host's queue at once; nothing held" {
	hold -x pqsig
	"$LOCKRUN" -c "$conf" -w 60 -x pqsig -- true 3>&- &
	pids+=($!)
	lr_wait_for head_settled pqsig
	local sig p rc t0 ms
	for sig in TERM INT; do
		# Every signal at its default, as for a terminal's foreground job:
		# the shell starts a background one with SIGINT ignored, and
		# lockrun keeps it so (10-signals.bats).
		env --default-signal "$LOCKRUN" -c "$conf" -v -w 60 -x pqsig -- touch "$BATS_TEST_TMPDIR/ran" \
			2>"$BATS_TEST_TMPDIR/err.$sig" 3>&- &
		p=$!
		sleep 1
		t0=${EPOCHREALTIME/[.,]/}
		kill -"$sig" "$p"
		rc=0
		wait "$p" || rc=$?
		ms=$(((${EPOCHREALTIME/[.,]/} - t0) / 1000))
		assert_equal "$rc" $((128 + $(kill -l "$sig")))
		((ms < 1000)) || fail "SIG$sig took $ms ms"
		grep -q "interrupted while waiting; nothing held" "$BATS_TEST_TMPDIR/err.$sig"
	done
	assert_equal "$(waiters pqsig)" 1
	[[ ! -e $BATS_TEST_TMPDIR/ran ]] || fail "ran without the lock"
}

@test "SIGTERM to a whole host's queue at once: every run ends at once" {
	# Each one that goes gives the queue to the next just as it, too, is
	# told to stop: the hand-over must not hang the one that gets it.
	hold -x pqall
	local i round
	for round in 1 2 3; do
		for ((i = 0; i < 40; i++)); do
			"$LOCKRUN" -c "$conf" -w 120 -x pqall -- true 3>&- &
			pids+=($!)
		done
		lr_wait_for head_settled pqall
		sleep 1
		kill -TERM "${pids[@]}"
		local deadline=$((${EPOCHREALTIME/[.,]/} + 15000000))
		while (($(live_count "${pids[@]}") > 0)); do
			((${EPOCHREALTIME/[.,]/} < deadline)) ||
				fail "round $round: $(live_count "${pids[@]}") runs still there 15 s after SIGTERM"
			sleep 0.2
		done
		for i in "${pids[@]}"; do
			wait "$i" || true
		done
		pids=()
	done
	assert_equal "$(waiters pqall)" 0
}

@test "-n asks the database even when the host's queue is stuck; a waiter stays behind it" {
	run "$LOCKRUN" -c "$conf" -w 5 -x pqn -- true
	assert_success
	local f
	f=$(grep -l "pqn" "$qdir"/*.lock)
	# Another process holds the queue file (as a stopped head would).
	python3 -c 'import fcntl, sys, time
f = open(sys.argv[1], "r+"); fcntl.lockf(f, fcntl.LOCK_EX); print("locked", flush=True); time.sleep(60)' \
		"$f" >"$BATS_TEST_TMPDIR/locker" 3>&- &
	locker=$!
	lr_wait_for grep -q locked "$BATS_TEST_TMPDIR/locker"
	run "$LOCKRUN" -c "$conf" -n -x pqn -- true
	assert_success
	run "$LOCKRUN" -c "$conf" --wait 0 -x pqn -- true
	assert_success
	run -75 "$LOCKRUN" -c "$conf" -w 1 -x pqn -- true
	assert_output --partial "another run of this host is ahead in its queue for mutex 'pqn'"
	run "$LOCKRUN" -c "$conf" --no-local-queue -w 1 -x pqn -- true
	assert_success
}

@test "the command inherits no queue file" {
	run "$LOCKRUN" -c "$conf" -w 5 -x pqfd -- sh -c 'ls -l /proc/$$/fd/'
	assert_success
	refute_output --partial ".lock"
	refute_output --partial "$qdir"
}

@test "local_queue and local_queue_dir: a bad value is a configuration error (78)" {
	printf '[lock]\nlocal_queue = maybe\n' >>"$conf"
	run -78 "$LOCKRUN" -c "$conf" -x pqcfg -- true
	assert_output --regexp "lq\.conf:[0-9]+: local_queue: 'maybe' is not a boolean"
	sed -i '$d' "$conf"
	printf 'local_queue_dir = run/lockrun\n' >>"$conf"
	run -78 "$LOCKRUN" -c "$conf" -x pqcfg -- true
	assert_output --regexp "lq\.conf:[0-9]+: local_queue_dir: 'run/lockrun' is not an absolute path"
}

# status_of NAME FIELD: a field of NAME's resource in `status --json`.
status_of() {
	"$LOCKRUNCTL" -c "$LR_ADMIN_CONFIG" status --json "$1" |
		python3 -c 'import json, sys; r = json.load(sys.stdin)["resources"][0]; print(r[sys.argv[1]])' "$2"
}

# metric NAME FAMILY: the value of lockrun_FAMILY for resource NAME.
metric() {
	"$LOCKRUNCTL" -c "$LR_ADMIN_CONFIG" status --format=prometheus "$1" |
		awk -v m="lockrun_$2" -v r="resource=\"$1\"" '$1 ~ "^" m "\\{" && index($1, r) { print $2 }'
}

@test "runs waiting in the host's queue count in status, JSON and Prometheus, leave the count when they go, and count on new places" {
	hold -x pqcount
	local i
	for i in 1 2 3 4; do
		"$LOCKRUN" -c "$conf" -w 120 -x pqcount -- true 3>&- &
		pids+=($!)
		((i == 1)) && lr_wait_for head_settled pqcount
	done
	# One request in the database's queue, three behind it on this host.
	assert_equal "$(waiters pqcount)" 1
	lr_wait_eq -t 10 3 sql "SELECT host_behind FROM lr_waiters WHERE resource = 'pqcount'"
	assert_equal "$(status_of pqcount waiting)" 4
	assert_equal "$(status_of pqcount host_queued)" 3
	assert_equal "$("$LOCKRUNCTL" -c "$LR_ADMIN_CONFIG" status --json pqcount |
		python3 -c 'import json, sys; print(json.load(sys.stdin)["resources"][0]["waiters"][0]["host_queue_behind"])')" 3
	assert_equal "$(metric pqcount resource_waiters)" 4
	run "$LOCKRUNCTL" -c "$LR_ADMIN_CONFIG" status pqcount
	assert_success
	assert_output --partial "and 3 more runs of its host queued behind it"
	# A run that leaves the host's queue leaves the count within seconds.
	kill -TERM "${pids[3]}"
	wait "${pids[3]}" || true
	unset 'pids[3]'
	lr_wait_eq -t 10 2 sql "SELECT host_behind FROM lr_waiters WHERE resource = 'pqcount'"
	assert_equal "$(metric pqcount resource_waiters)" 3
	# Places made anew (the head's were swept: here by hand) count the
	# runs behind again.
	sql "DELETE FROM lr_waiters WHERE resource = 'pqcount'"
	lr_wait_eq -t 10 2 sql "SELECT host_behind FROM lr_waiters WHERE resource = 'pqcount'"
	assert_equal "$(metric pqcount resource_waiters)" 3
	touch "$BATS_TEST_TMPDIR/go.holder"
	wait_all "a waiter"
	assert_equal "$(waiters)" 0
	assert_equal "$(status_of pqcount waiting)" 0
}
