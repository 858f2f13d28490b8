#!/usr/bin/env bats
#
# lockrun on a 3-node multi-primary Galera cluster (run with tests/run-galera,
# which starts the cluster and exports LR_GALERA, LOCKRUN and LOCKRUNCTL).
#
# Contenders spread over all three nodes, so every grant races grants
# certified on other nodes. Exclusion is judged from the children's own
# enter/leave records (tests/helpers/records.bash), written under a local
# flock, never from what lockrun or the database say. A control test shows
# the judge does catch an overlap, and a fault test kills one node and
# freezes another while the contenders run.

bats_require_minimum_version 1.5.0

load "${LR_BATS_LIB:-/usr/lib/bats}/bats-support/load"
load "${LR_BATS_LIB:-/usr/lib/bats}/bats-assert/load"

if [[ -z ${LR_GALERA:-} || -z ${LOCKRUN:-} || -z ${LOCKRUNCTL:-} ]]; then
	echo "LR_GALERA/LOCKRUN/LOCKRUNCTL are not set: run the tests with tests/run-galera" >&2
	return 1
fi

load ../helpers/galera
load ../helpers/records

# gsql N "SQL": SQL as root on node N in the lockrun database, as a causal
# read (wsrep_sync_wait): it sees every write committed anywhere before.
gsql() {
	local n=$1
	shift
	lr_galera_sql "$LR_GALERA" "$n" "SET SESSION wsrep_sync_wait = 15; $*" lockrun
}

# The nodes that are up (the fault test restarts the one it kills, but a
# failed run may leave one down).
up_nodes() {
	local n
	for n in 1 2 3; do
		lr_galera_running "$LR_GALERA" "$n" && echo "$n"
	done
}

ctl() {
	"$LOCKRUNCTL" -c "$LR_GALERA/all.conf" -q "$@"
}

# Permits held on every node that is up, one line per node: "N SUM".
holds_everywhere() {
	local n
	for n in $(up_nodes); do
		echo "$n $(gsql "$n" "SELECT COALESCE(SUM(permits), 0) FROM lr_holds")"
	done
}

# Conflicts Galera resolved so far, summed over the nodes that are up:
# certification failures and brute-force aborts.
conflicts() {
	local n sum=0 v
	for n in $(up_nodes); do
		v=$(lr_galera_sql "$LR_GALERA" "$n" "SELECT SUM(VARIABLE_VALUE)
			FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME IN
			('WSREP_LOCAL_CERT_FAILURES', 'WSREP_LOCAL_BF_ABORTS')")
		sum=$((sum + ${v:-0}))
	done
	echo "$sum"
}

setup() {
	# Every node must be up and synced: a test must not inherit the
	# damage of one before it.
	local n
	for n in 1 2 3; do
		lr_galera_wait_synced "$LR_GALERA" "$n" 3 30
	done
	gsql 1 "DELETE FROM lr_holds; DELETE FROM lr_waiters; DELETE FROM lr_grants;
		DELETE FROM lr_resources; DELETE FROM lr_capacity_audit;"
	rec=$BATS_TEST_TMPDIR/rec
	rcs=$BATS_TEST_TMPDIR/rcs
	: >"$rec"
	: >"$rcs"
}

# judge FILE NAME LIMIT: the children's records of NAME never show more than
# LIMIT inside at once, every enter has its leave, and (LIMIT 1) the fencing
# tokens the children saw strictly increase in the order they went in.
# Prints the most seen inside at once; fails with the offending line.
judge() {
	local file=$1 name=$2 limit=$3
	awk -v n="$name" -v lim="$limit" '
		$2 != n { next }
		$1 == "enter" {
			u += $3
			if (u > m) m = u
			if (u > lim) { printf "line %d: %d inside at once (limit %d)\n", NR, u, lim; bad = 1 }
			if (lim == 1 && $4 != "") {
				if (seen && $4 + 0 <= prev + 0) { printf "line %d: fence %s after %s\n", NR, $4, prev; bad = 1 }
				prev = $4; seen = 1
			}
			e++
		}
		$1 == "leave" { u -= $3; l++ }
		END {
			if (e != l) { printf "%d enter but %d leave records\n", e, l; bad = 1 }
			print "max inside: " m + 0
			exit bad
		}' "$file"
}

# waitall PID...: wait for these (a bare `wait` would also wait for the
# watchdog bats runs beside a test when BATS_TEST_TIMEOUT is set).
waitall() {
	local p
	for p; do wait "$p" || true; done
}

# workers FILE NAME WORKERS RUNS SECS: WORKERS concurrent loops of RUNS runs
# each of `lockrun -s NAME` on node (w mod 3) + 1, the child recording itself
# in FILE and staying SECS. Each run's "WORKER RUN STATUS" goes to $rcs.
workers() {
	local file=$1 name=$2 nw=$3 runs=$4 secs=$5 w cmd pids=()
	cmd=$(rec_cmd "$file" "$name" -- "$secs")
	for ((w = 1; w <= nw; w++)); do
		(
			conf=$LR_GALERA/node$(((w - 1) % 3 + 1)).conf
			for ((r = 1; r <= runs; r++)); do
				rc=0
				"$LOCKRUN" -c "$conf" -w 300 -s "$name" -- sh -c "$cmd" 2>>"$BATS_TEST_TMPDIR/stderr" || rc=$?
				echo "$w $r $rc" >>"$rcs"
			done
		) 3>&- &
		pids+=($!)
	done
	waitall "${pids[@]}"
}

# statuses: "COUNT STATUS" lines, the exit statuses of all runs.
statuses() {
	awk '{ print $3 }' "$rcs" | sort -n | uniq -c | sed 's/^ *//'
}

@test "capacity 1, 300 grants from 30 contenders on 3 nodes: never 2 inside" {
	ctl set g1 1
	local before
	before=$(conflicts)
	workers "$rec" g1 30 10 0.01
	echo "exit statuses:"
	statuses
	assert_equal "$(statuses)" "300 0"
	assert_equal "$(rec_count "$rec" enter g1)" 300
	assert_equal "$(rec_count "$rec" leave g1)" 300
	run judge "$rec" g1 1
	assert_success
	assert_output "max inside: 1"
	assert_equal "$(rec_max "$rec" g1)" 1
	# Nothing left held, as every node sees it, and the nodes agree.
	assert_equal "$(holds_everywhere)" "$(printf '1 0\n2 0\n3 0')"
	assert_equal "$(gsql 2 "SELECT fence FROM lr_resources WHERE name = 'g1'")" 300
	assert_equal "$(gsql 3 "SELECT COUNT(*) FROM lr_grants WHERE end_reason = 'exited' AND exit_status = 0")" 300
	local n sums=()
	for n in 1 2 3; do
		sums+=("$(gsql "$n" "CHECKSUM TABLE lr_grants, lr_resources, lr_holds" | awk '{ print $2 }' | tr '\n' ' ')")
	done
	assert_equal "${sums[1]}" "${sums[0]}"
	assert_equal "${sums[2]}" "${sums[0]}"
	echo "# g1: $(($(conflicts) - before)) Galera conflicts (certification failures + BF aborts) resolved" >&3
}

@test "capacity 3, 300 grants from 30 contenders on 3 nodes: never 4 inside, and more than 1" {
	ctl set g3 3
	workers "$rec" g3 30 10 0.05
	assert_equal "$(statuses)" "300 0"
	assert_equal "$(rec_count "$rec" enter g3)" 300
	assert_equal "$(rec_count "$rec" leave g3)" 300
	run judge "$rec" g3 3
	assert_success
	local max
	max=$(rec_max "$rec" g3)
	((max <= 3)) || fail "$max inside at once, capacity 3"
	((max >= 2)) || fail "never more than one inside: not a semaphore of 3"
	assert_equal "$(holds_everywhere)" "$(printf '1 0\n2 0\n3 0')"
	assert_equal "$(gsql 1 "SELECT fence FROM lr_resources WHERE name = 'g3'")" 300
	echo "# g3: at most $max inside at once" >&3
}

@test "control: the judge reports an overlap (same workload, children not under lockrun)" {
	# Without lockrun the same 30 x 10 children overlap at once; a judge
	# that passed this would prove nothing above.
	local cmd w pids=()
	cmd=$(rec_cmd "$rec" g1 -- 0.01)
	for ((w = 1; w <= 30; w++)); do
		(for ((r = 1; r <= 10; r++)); do sh -c "$cmd"; done) 3>&- &
		pids+=($!)
	done
	waitall "${pids[@]}"
	assert_equal "$(rec_count "$rec" enter g1)" 300
	run judge "$rec" g1 1
	assert_failure
	assert_output --partial "inside at once (limit 1)"
	(($(rec_max "$rec" g1) > 1))

	# And with lockrun, a semaphore of 3 judged against a limit of 1.
	: >"$rec"
	: >"$rcs"
	ctl set g3 3
	workers "$rec" g3 12 5 0.1
	assert_equal "$(statuses)" "60 0"
	run judge "$rec" g3 1
	assert_failure
	assert_output --partial "inside at once (limit 1)"
}

# A child for the fault test: like rec_cmd's, but each record carries the
# run's id, and when lockrun stops it (SIGTERM: its lease is being lost) it
# records its leave before it dies, so a stopped run is not judged inside
# forever.
fault_cmd() {
	local file=$1 id=$2 secs=$3 enter leave
	enter="echo enter g1 1 \$LOCKRUN_FENCE $id"
	leave="echo leave g1 1 $id"
	printf 'trap %q TERM; flock %q sh -c %q >>%q; sleep %s; flock %q sh -c %q >>%q' \
		"flock $(printf %q "$file.lk") sh -c $(printf %q "$leave") >>$(printf %q "$file"); exit 143" \
		"$file.lk" "$enter" "$file" "$secs" "$file.lk" "$leave" "$file"
}

# judge_ids FILE LIMIT: like judge, for fault_cmd's records: a leave counts
# only for a run inside, a second leave of a run (stopped while leaving) is
# ignored, and a run that never left counts as inside to the end.
judge_ids() {
	awk -v lim="$2" '
		$1 == "enter" {
			if ($5 in inside) { printf "line %d: run %s entered twice\n", NR, $5; bad = 1 }
			inside[$5] = 1; u++
			if (u > m) m = u
			if (u > lim) { printf "line %d: %d inside at once (limit %d)\n", NR, u, lim; bad = 1 }
			if (seen && $4 + 0 <= prev + 0) { printf "line %d: fence %s after %s\n", NR, $4, prev; bad = 1 }
			prev = $4; seen = 1; e++
		}
		$1 == "leave" && ($4 in inside) { delete inside[$4]; u-- }
		END {
			for (id in inside) printf "run %s never left\n", id
			print "runs inside: " e ", max inside: " m + 0
			exit bad
		}' "$1"
}

@test "faults: node 3 killed, then node 2 frozen for 3 s, mid-run: no overlap, clean exits, fail-over" {
	ctl set g1 1
	# Each client tries every node, starting from a different one; short
	# timeouts so a dead or frozen node costs seconds, not minutes.
	local orders=("127.0.0.1, 127.0.0.2, 127.0.0.3" "127.0.0.2, 127.0.0.3, 127.0.0.1"
		"127.0.0.3, 127.0.0.1, 127.0.0.2") k
	for k in 0 1 2; do
		lr_galera_conf "$LR_GALERA" "$BATS_TEST_TMPDIR/order$k.conf" "${orders[k]}" \
			"connect_timeout = 2" "read_timeout = 3" "write_timeout = 3"
	done
	local stop=$BATS_TEST_TMPDIR/stop w pids=()
	for ((w = 1; w <= 12; w++)); do
		(
			conf=$BATS_TEST_TMPDIR/order$(((w - 1) % 3)).conf
			r=0
			while [[ ! -e $stop ]]; do
				r=$((r + 1))
				rc=0
				"$LOCKRUN" -c "$conf" -w 20 --ttl 6 --kill-after 1 -s g1 -- \
					sh -c "$(fault_cmd "$rec" "w$w.$r" 0.2)" \
					2>>"$BATS_TEST_TMPDIR/stderr.w$w" || rc=$?
				echo "$w $r $rc $(date +%s.%N)" >>"$rcs"
			done
		) 3>&- &
		pids+=($!)
	done

	sleep 4
	echo "# $(date +%T) kill -9 node 3" >&3
	lr_galera_kill "$LR_GALERA" 3
	# Nodes 1 and 2 go on as a cluster of 2 once they evict node 3.
	lr_galera_wait_synced "$LR_GALERA" 1 2 30
	echo "# $(date +%T) cluster of 2; SIGSTOP node 2 for 3 s" >&3
	sleep 2
	lr_galera_pause "$LR_GALERA" 2
	sleep 3
	lr_galera_resume "$LR_GALERA" 2
	echo "# $(date +%T) node 2 resumed" >&3
	lr_galera_wait_synced "$LR_GALERA" 2 2 30
	sleep 8
	touch "$stop"
	waitall "${pids[@]}"
	echo "# $(date +%T) workers done" >&3

	echo "exit statuses (count status):"
	statuses
	run judge_ids "$rec" 1
	echo "$output"
	assert_success
	# Every run completed or failed cleanly: 0, or 69 (no database), 75 (not
	# acquired in time), 76 (lease lost; child stopped). Nothing else.
	run awk '$3 != 0 && $3 != 69 && $3 != 75 && $3 != 76' "$rcs"
	assert_output ""
	local ok total
	ok=$(awk '$3 == 0' "$rcs" | wc -l)
	total=$(wc -l <"$rcs")
	echo "# runs: $total, completed: $ok; statuses: $(statuses | tr '\n' ' ')" >&3
	((ok >= 30)) || fail "only $ok runs completed"
	# A run that completed entered and left.
	# Leftover leases of runs that failed expire within their ttl (6 s).
	lr_wait_for_holds_gone() {
		[[ $(gsql 1 "SELECT COUNT(*) FROM lr_holds WHERE expires_at > NOW(6)") == 0 ]]
	}
	local i
	for ((i = 0; i < 100; i++)); do
		lr_wait_for_holds_gone && break
		sleep 0.1
	done
	lr_wait_for_holds_gone
}

teardown() {
	# The fault test leaves node 3 dead (and, if it failed, maybe node 2
	# frozen): bring the cluster back for whatever runs next.
	local n
	for n in 1 2 3; do
		lr_galera_resume "$LR_GALERA" "$n" 2>/dev/null || true
	done
	for n in 1 2 3; do
		if ! lr_galera_running "$LR_GALERA" "$n"; then
			echo "# restarting node $n" >&3
			lr_galera_restart "$LR_GALERA" "$n"
		fi
	done
}

@test "--named is refused on a Galera node (exit 64): a named lock would be node-local" {
	local conf mark=$BATS_TEST_TMPDIR/ran
	for conf in node1 node2 node3 all; do
		run -64 "$LOCKRUN" -c "$LR_GALERA/$conf.conf" --named x -- touch "$mark"
		assert_output --partial "is a Galera node: named locks there are local to one node"
		assert [ ! -e "$mark" ]
	done
	# Mixed with a table lock, too: all or nothing.
	ctl set g1 1
	run -64 "$LOCKRUN" -c "$LR_GALERA/node2.conf" -s g1 --named x -- touch "$mark"
	assert_output --partial "Galera node"
	assert [ ! -e "$mark" ]
	assert_equal "$(holds_everywhere)" "$(printf '1 0\n2 0\n3 0')"
}
