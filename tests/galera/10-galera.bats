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

load suite
load ../helpers/records

# ctl ARGS...: lockrunctl as the administrator (the runtime account may only
# EXECUTE the procedures), through node 1.
ctl() {
	"$LOCKRUNCTL" -c "$LR_GALERA/admin.conf" -q "$@"
}

# Permits held on every node that is up, one line per node: "N SUM".
holds_everywhere() {
	local n
	for n in $(up_nodes); do
		echo "$n $(gsql "$n" "SELECT COALESCE(SUM(permits), 0) FROM lr_holds")"
	done
}

setup() {
	worker_pids=()
	work=$LR_TMP/test$BATS_TEST_NUMBER
	fresh_cluster "$work"
	rec=$work/rec
	rcs=$work/rcs
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

# workers FILE NAME WORKERS RUNS SECS [SPEC]: WORKERS concurrent loops of
# RUNS runs each of `lockrun -v -s NAME` beside node (w mod 3) + 1, the
# child recording itself in FILE and staying SECS. With SPEC, a function:
# `SPEC W` prints worker W's lock options and its record item (NAME or
# NAME:WEIGHT), separated by "|", instead. Each run's "WORKER RUN STATUS"
# goes to $rcs, lockrun's log to $work/stderr (see poll_report), and the
# log of a run that failed to $work/failed too (statuses_are shows it).
workers() {
	local file=$1 name=$2 nw=$3 runs=$4 secs=$5 spec=${6:-} w cmd pids=()
	for ((w = 1; w <= nw; w++)); do
		(
			lr_close_fds
			local -a lockopt=(-s "$name")
			local item=$name sp
			if [[ -n $spec ]]; then
				sp=$("$spec" "$w")
				read -ra lockopt <<<"${sp%%|*}"
				item=${sp#*|}
			fi
			cmd=$(rec_cmd "$file" "$item" -- "$secs")
			# Each worker is set up beside a node and lists every
			# node, its own first: lockrun sends the calls to the
			# writer node (every node listed alone would make all
			# three write the same rows, which can stall the cluster).
			conf=$LR_GALERA/local$(((w - 1) % 3 + 1)).conf
			for ((r = 1; r <= runs; r++)); do
				rc=0
				# A run takes seconds; `timeout` turns a hung lockrun
				# into a failed run (124) instead of a hung test.
				timeout -k 10 150 "$LOCKRUN" -v -c "$conf" -w 120 "${lockopt[@]}" -- \
					sh -c "$cmd" 2>"$work/err.w$w" || rc=$?
				cat "$work/err.w$w" >>"$work/stderr"
				if ((rc)); then
					{
						echo "worker $w (${conf##*/}) run $r: exit $rc"
						sed 's/^/  /' "$work/err.w$w"
					} >>"$work/failed"
				fi
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

# statuses_are EXPECTED: the statuses are EXPECTED; if not, the log of each
# run that failed is shown with the failure.
statuses_are() {
	local got
	got=$(statuses)
	if [[ $got != "$1" && -s $work/failed ]]; then
		echo "the runs that failed, and what lockrun said:"
		cat "$work/failed"
	fi
	assert_equal "$got" "$1"
}

# poll_report NAME SECONDS: how fast the grants went, and what waiting cost
# the servers (polls; the head polls only where no doorbell reaches it),
# from lockrun -v's "waited ..." lines.
poll_report() {
	local grants
	grants=$(rec_count "$rec" enter "$1")
	awk -v n="$1" -v secs="$2" -v g="$grants" '
		/waited .* polls, / {
			w++
			for (i = 1; i <= NF; i++) {
				if ($i == "polls,") polls += $(i - 1)
				if ($i == "them") { hp += $(i - 2); hs += $(i + 2) }
			}
		}
		END {
			printf "# %s: %d grants in %.1f s (%.1f/s); %d waits, %d polls, ", n, g, secs, g / secs, w, polls
			printf "the head polled %d times in %.1f s (%.0f/s)\n", hp, hs, (hs > 0 ? hp / hs : 0)
		}' "$work/stderr" >&3
}

# tokens_ok NODE NAME RUNS: every fencing token of NAME went to a grant
# (the resource's fence is the number of its grants), and every grant
# ended as a run that exited 0, or in one of the ways a stalled cluster
# or a starved waiter leaves it: handed to a waiter that did not claim it
# in time (lost) or gave it back (aborted), or a release that did not
# land (lockrun warns "could not release", the run's status stands, and
# the sweep ends it as expired after ttl + grace). At least RUNS ended
# exited 0 or expired. The runs themselves are judged by the children's
# records. Prints the end reasons.
tokens_ok() {
	local n=$1 name=$2 runs=$3 fence grants ok other
	fence=$(gsql "$n" "SELECT fence FROM lr_resources WHERE name = '$name'")
	grants=$(gsql "$n" "SELECT COUNT(*) FROM lr_grant_items WHERE resource = '$name'")
	ok=$(gsql "$n" "SELECT COUNT(*) FROM lr_grants g JOIN lr_grant_items i ON i.grant_id = g.id
		WHERE i.resource = '$name' AND (g.end_reason = 'expired'
			OR (g.end_reason = 'exited' AND g.exit_status = 0))")
	other=$(gsql "$n" "SELECT COUNT(*) FROM lr_grants g JOIN lr_grant_items i ON i.grant_id = g.id
		WHERE i.resource = '$name' AND NOT (g.end_reason = 'exited' AND g.exit_status = 0)
		AND g.end_reason NOT IN ('lost', 'aborted', 'expired')")
	echo "# $name: fence $fence, grants $grants, exited 0 or expired: $ok; by end reason:" \
		"$(gsql "$n" "SELECT CONCAT(g.end_reason, ' ', COUNT(*)) FROM lr_grants g
			JOIN lr_grant_items i ON i.grant_id = g.id WHERE i.resource = '$name'
			GROUP BY g.end_reason" | paste -sd,)" >&3
	assert_equal "$fence" "$grants"
	((ok >= runs)) || fail "$ok grants exited 0 or expired, $runs runs"
	assert_equal "$other" 0
}

# longest_gap NAME: the longest time between two grants of NAME, by the
# lock log's grant times (the writer's clock), in seconds: a stall of the
# cluster shows as a gap (printed, not judged: a figure, not a verdict).
longest_gap() {
	gsql 1 "SELECT COALESCE(ROUND(MAX(gap) / 1e6, 1), 0) FROM (SELECT TIMESTAMPDIFF(MICROSECOND,
		LAG(g.acquired_at) OVER (ORDER BY g.acquired_at), g.acquired_at) gap
		FROM lr_grants g JOIN lr_grant_items i ON i.grant_id = g.id WHERE i.resource = '$1') t"
}

@test "capacity 1, 300 grants from 30 contenders on 3 nodes: never 2 inside" {
	ctl set g1 1
	local before t0
	before=$(conflicts)
	t0=$EPOCHREALTIME
	workers "$rec" g1 30 10 0.01
	poll_report g1 "$(echo "$EPOCHREALTIME - $t0" | bc)"
	echo "exit statuses:"
	statuses
	statuses_are "300 0"
	assert_equal "$(rec_count "$rec" enter g1)" 300
	assert_equal "$(rec_count "$rec" leave g1)" 300
	run judge "$rec" g1 1
	assert_success
	assert_output "max inside: 1"
	assert_equal "$(rec_max "$rec" g1)" 1
	# Nothing left held, as every node sees it, and the nodes agree.
	assert_equal "$(holds_everywhere)" "$(printf '1 0\n2 0\n3 0')"
	tokens_ok 2 g1 300
	local n sums=()
	for n in 1 2 3; do
		sums+=("$(gsql "$n" "CHECKSUM TABLE lr_grants, lr_resources, lr_holds" | awk '{ print $2 }' | tr '\n' ' ')")
	done
	assert_equal "${sums[1]}" "${sums[0]}"
	assert_equal "${sums[2]}" "${sums[0]}"
	echo "# g1: $(($(conflicts) - before)) Galera conflicts (certification failures + BF aborts) resolved;" \
		"longest gap between grants $(longest_gap g1) s" >&3
}

@test "capacity 3, 300 grants from 30 contenders on 3 nodes: never 4 inside, and more than 1" {
	ctl set g3 3
	local t0=$EPOCHREALTIME
	workers "$rec" g3 30 10 0.2
	poll_report g3 "$(echo "$EPOCHREALTIME - $t0" | bc)"
	statuses_are "300 0"
	assert_equal "$(rec_count "$rec" enter g3)" 300
	assert_equal "$(rec_count "$rec" leave g3)" 300
	run judge "$rec" g3 3
	assert_success
	local max
	max=$(rec_max "$rec" g3)
	((max <= 3)) || fail "$max inside at once, capacity 3"
	((max >= 2)) || fail "never more than one inside: not a semaphore of 3"
	assert_equal "$(holds_everywhere)" "$(printf '1 0\n2 0\n3 0')"
	tokens_ok 1 g3 300
	echo "# g3: at most $max inside at once; longest gap between grants $(longest_gap g3) s" >&3
}

# Worker W of the mixed test: odd ones ask 2 permits of gm, even ones 1.
mixed_sem() {
	if (($1 % 2)); then echo "-s gm:2|gm:2"; else echo "-s gm:1|gm:1"; fi
}

# Worker W of the read-write test: one in five writes. A writer weighs 100
# in the records, so that the judge's limit of 100 allows one writer alone
# or readers alone, never both.
mixed_rw() {
	if (($1 % 5 == 0)); then echo "--write grw|grw:100"; else echo "--read grw|grw:1"; fi
}

@test "capacity 3 with requests of 1 and 2 permits, and a read-write lock, from 30 contenders: never over" {
	ctl set gm 3
	local max t0=$EPOCHREALTIME
	workers "$rec" gm 30 6 0.1 mixed_sem
	poll_report gm "$(echo "$EPOCHREALTIME - $t0" | bc)"
	statuses_are "180 0"
	run judge "$rec" gm 3
	assert_success
	max=$(rec_max "$rec" gm)
	((max >= 2)) || fail "never more than one permit in use"
	tokens_ok 1 gm 180
	echo "# gm: at most $max permits in use; longest gap between grants $(longest_gap gm) s" >&3
	: >"$rcs"
	t0=$EPOCHREALTIME
	workers "$rec" grw 30 6 0.1 mixed_rw
	poll_report grw "$(echo "$EPOCHREALTIME - $t0" | bc)"
	statuses_are "180 0"
	run judge "$rec" grw 100
	assert_success
	max=$(awk '$2 == "grw" && $1 == "enter" && $3 == 1 { u++; if (u > m) m = u }
		$2 == "grw" && $1 == "leave" && $3 == 1 { u-- } END { print m + 0 }' "$rec")
	((max >= 2)) || fail "readers never shared the lock"
	assert_equal "$(holds_everywhere)" "$(printf '1 0\n2 0\n3 0')"
	echo "# grw: up to $max readers at once; longest gap between grants $(longest_gap grw) s" >&3
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
	rm -f "$work/failed"
	ctl set g3 3
	workers "$rec" g3 12 5 0.3
	statuses_are "60 0"
	run judge "$rec" g3 1
	assert_failure
	assert_output --partial "inside at once (limit 1)"
}

# first_host CONF: the first host of a config's list.
first_host() {
	sed -n 's/^host = \([^,]*\).*/\1/p' "$1"
}

# fault_worker W NAME SECS LOCKRUN-OPTIONS...: runs of `lockrun -s NAME`
# with a SECS child until $work/stop exists, with config order(W mod 3).
# Each run's "W RUN STATUS TIME NAME" goes to $rcs.
fault_worker() {
	local w=$1 name=$2 secs=$3 r=0 rc conf
	shift 3
	lr_close_fds
	conf=$work/order$(((w - 1) % 3)).conf
	while [[ ! -e $work/stop ]]; do
		r=$((r + 1))
		rc=0
		# -vv: lockrun logs every connection (and statement).
		# `timeout`: a hung lockrun becomes a failed run (124), not a hung
		# test. No run here needs more than -w 30 plus a lease or two.
		timeout -k 10 90 "$LOCKRUN" -vv -c "$conf" "$@" -s "$name" -- \
			sh -c "$(fault_cmd "$rec" "$name" "w$w.$r" "$secs")" \
			2>>"$work/stderr.w$w" || rc=$?
		echo "$w $r $rc $(date +%T.%N) $name" >>"$rcs"
	done
}

# "exit STATUS: COUNT, ..." of the runs on NAME.
statuses_of() {
	awk -v n="$1" '$5 == n { print $3 }' "$rcs" | sort -n | uniq -c |
		awk '{ printf "%sexit %d: %d", (NR > 1 ? ", " : ""), $2, $1 }'
}

@test "faults: node 2 frozen for 8 s, then node 3 killed, mid-run: no overlap, clean exits, fail-over" {
	ctl set g1 1
	ctl set gl 1
	# Each client tries every node, each starting from a different one; short
	# timeouts so that a dead or frozen node costs seconds, not minutes.
	local orders=("127.0.0.1, 127.0.0.2, 127.0.0.3" "127.0.0.2, 127.0.0.3, 127.0.0.1"
		"127.0.0.3, 127.0.0.1, 127.0.0.2") k
	for k in 0 1 2; do
		lr_galera_conf "$LR_GALERA" "$work/order$k.conf" "${orders[k]}" \
			"connect_timeout = 2" "read_timeout = 3" "write_timeout = 3"
	done
	# g1: 12 workers, short children (most runs complete). gl: 4 workers
	# whose children outlive their lease unless it is renewed (4 s child,
	# --ttl 3): whoever holds gl during a stall of the cluster loses it (76),
	# and the judge sees whether the next holder waited for it to be gone.
	local w
	worker_pids=() # global: teardown stops them if the test fails
	for ((w = 1; w <= 12; w++)); do
		fault_worker "$w" g1 0.5 -w 20 --ttl 6 --kill-after 1 3>&- &
		worker_pids+=($!)
	done
	for ((w = 13; w <= 16; w++)); do
		fault_worker "$w" gl 4 -w 30 --ttl 3 --kill-after 0.5 3>&- &
		worker_pids+=($!)
	done

	# Freeze node 2 longer than Galera's suspect timeout (5 s): nodes 1 and 3
	# stall, then go on without it; once thawed it finds itself evicted and
	# rejoins (IST). Then crash node 3: nodes 1 and 2 stall, then go on as a
	# cluster of 2.
	local size=
	sleep 5
	echo "# $(date +%T) SIGSTOP node 2" >&3
	lr_galera_pause "$LR_GALERA" 2
	sleep 8
	size=$(lr_galera_state "$LR_GALERA" 1)
	lr_galera_resume "$LR_GALERA" 2
	echo "# $(date +%T) SIGCONT node 2 (node 1 said: ${size:-nothing})" >&3
	lr_galera_wait_cluster "$LR_GALERA" 3 60 1 2 3
	echo "# $(date +%T) node 2 synced again" >&3
	sleep 4
	lr_galera_kill "$LR_GALERA" 3
	echo "# $(date +%T) kill -9 node 3" >&3
	lr_galera_wait_cluster "$LR_GALERA" 2 30 1 2
	echo "# $(date +%T) cluster of 2" >&3
	sleep 6
	touch "$work/stop"
	waitall "${worker_pids[@]}"
	echo "# $(date +%T) workers done" >&3

	run judge_ids "$rec" g1 1
	echo "$output"
	assert_success
	run judge_ids "$rec" gl 1
	echo "$output"
	assert_success
	local ok
	ok=$(awk '$3 == 0 && $5 == "g1"' "$rcs" | wc -l)
	echo "# g1 runs: $(statuses_of g1)" >&3
	echo "# gl runs: $(statuses_of gl)" >&3
	# lockrun exits 69 when the first host that answers is a node not (yet)
	# ready: "WSREP has not yet prepared node for application use" (1047),
	# as a thawed or rejoining node says. Allowed, but counted.
	local unready
	unready=$(cat "$work"/stderr.w* | grep -c '^lockrun: [0-9.:]*: WSREP has not yet prepared node' || true)
	echo "# runs that gave up (69) on a node not ready, without trying their next host: $unready" >&3
	# Every run completed or failed cleanly: 0, or 69 (no database), 75 (not
	# acquired in time), 76 (lease lost; child stopped). Nothing else; 124
	# means lockrun hung and `timeout` stopped it.
	run awk '$3 != 0 && $3 != 69 && $3 != 75 && $3 != 76' "$rcs"
	if [[ -n $output ]]; then
		# What those workers' lockrun said last (-vv), shown with the
		# failure: a crash leaves nothing else, as the work directory goes.
		local w
		for w in $(awk '{ print $1 }' <<<"$output" | sort -u); do
			echo "-- the end of worker $w's stderr:"
			tail -n 40 "$work/stderr.w$w"
		done
	fi
	assert_output ""
	((ok >= 20)) || fail "only $ok runs on g1 completed"

	# Clients failed over: some connected to a host other than the first
	# of their list.
	local moved=0 first
	for ((w = 1; w <= 16; w++)); do
		first=$(first_host "$work/order$(((w - 1) % 3)).conf")
		moved=$((moved + $(grep 'connected to ' "$work/stderr.w$w" | grep -vc "connected to $first:" || true)))
	done
	echo "# connections to a host other than the client's first: $moved" >&3
	((moved > 0)) || fail "no client ever connected to its second or third host"

	# Leftover leases of runs that failed expire within their ttl (6 s).
	live_holds() {
		gsql 1 "SELECT COUNT(*) FROM lr_holds WHERE expires_at > NOW(6)"
	}
	local i
	for ((i = 0; i < 100; i++)); do
		[[ $(live_holds) == 0 ]] && break
		sleep 0.1
	done
	assert_equal "$(live_holds)" 0
}

# --- renewals and releases through a node that lags behind the grant -----

# lag_node2: make node 2 fall behind the cluster while it still serves
# clients. A session on node 2 with wsrep_on = OFF locks row lrlag.t 1 and
# sits idle in its transaction; node 1 then updates that row. Node 2's
# applier cannot brute-force abort a session that does not replicate
# (MariaDB 10.11 logs "BF lock wait long" and waits), so what node 1 commits
# from then on is certified but not applied on node 2 until lag_stop: three
# more updates of the row (dependent on the first, they occupy node 2's
# other applier threads, wsrep_slave_threads = 2), then whatever the test
# does. Node 2 answers every query meanwhile, from its old state. Sets
# blocker_pid and blocker_fd.
lag_node2() {
	gsql 1 "CREATE DATABASE IF NOT EXISTS lrlag;
		CREATE TABLE IF NOT EXISTS lrlag.t (id INT PRIMARY KEY, v INT) ENGINE=InnoDB;
		REPLACE INTO lrlag.t VALUES (1, 0)"
	assert_equal "$(gsql 2 "SELECT v FROM lrlag.t WHERE id = 1")" 0
	mkfifo "$work/blocker"
	(
		lr_close_fds
		exec timeout 300 mariadb --no-defaults --unbuffered -N -B -u"$(lr_admin_user)" \
			--socket="$LR_GALERA/n2/mysqld.sock" <"$work/blocker" >"$work/blocker.out" 2>&1
	) 3>&- &
	blocker_pid=$!
	exec {blocker_fd}>"$work/blocker"
	echo "SET SESSION wsrep_on = OFF; BEGIN;
		SELECT v FROM lrlag.t WHERE id = 1 FOR UPDATE; SELECT 'locked';" >&"$blocker_fd"
	local i
	for ((i = 0; i < 100; i++)); do
		grep -qx locked "$work/blocker.out" && break
		sleep 0.1
	done
	assert_equal "$(tail -n 1 "$work/blocker.out")" locked
	for i in 1 2 3 4; do
		lr_galera_sql "$LR_GALERA" 1 "UPDATE lrlag.t SET v = v + 1 WHERE id = 1"
	done
	# Node 1 has them, node 2 (a plain, non-causal read) does not.
	assert_equal "$(gsql 1 "SELECT v FROM lrlag.t WHERE id = 1")" 4
	assert_equal "$(stale 2 "SELECT v FROM lrlag.t WHERE id = 1")" 0
}

# lag_stop: end the blocking session; node 2 catches up at once.
lag_stop() {
	if [[ -n ${blocker_fd:-} ]]; then
		echo "ROLLBACK;" >&"$blocker_fd" || true
		exec {blocker_fd}>&-
		blocker_fd=
	fi
	if [[ -n ${blocker_pid:-} ]]; then
		wait "$blocker_pid" || true
		blocker_pid=
	fi
}

# stale N "SQL": SQL on node N as it stands, without waiting for the node
# to catch up with the cluster (wsrep_sync_wait = 0).
stale() {
	local n=$1
	shift
	lr_galera_sql "$LR_GALERA" "$n" "SET SESSION wsrep_sync_wait = 0; $*" lockrun
}

# lagging_run renew|release: the grant is made on node 1, then node 1 is
# cut off and lockrun goes on through node 2, which lags behind that grant.
# Node 1 sits behind a proxy on 127.0.0.4 (same port; lockrun tries it
# first, then node 2). lockrun -vv --ttl 9 runs a child that stays until
# $work/go exists.
#   renew: the proxy is killed as soon as the child has started; lockrun
#     sees its connection close and renews at once, through node 2.
#   release: the proxy is frozen (SIGSTOP: a silent partition, which
#     lockrun does not notice by itself) and the child told to exit; the
#     release times out on node 1 and is retried through node 2.
# 2 s after lockrun connected to node 2, node 2 must still lack the grant
# (else the test proves nothing); then it may catch up, and the child
# leaves. Leaves lockrun's exit status in $work/lockrun.rc, its log in
# $work/lockrun.err, and the child's "in"/"out" lines in $work/child.
lagging_run() {
	local mode=$1 i lr_pid
	ctl set lag 1
	# shellcheck source=/dev/null
	source "$LR_GALERA/cluster.env"
	# socat forks a child per connection: it runs in a process group of its
	# own (setsid), so that a signal to the group reaches what it relays.
	(
		lr_close_fds
		exec setsid socat "TCP-LISTEN:$GALERA_SQL_PORT,bind=127.0.0.4,reuseaddr,fork" \
			"TCP:127.0.0.1:$GALERA_SQL_PORT"
	) 3>&- &
	proxy_pid=$!
	for ((i = 0; i < 50; i++)); do
		(exec 9<>"/dev/tcp/127.0.0.4/$GALERA_SQL_PORT") 2>/dev/null && break
		sleep 0.1
	done
	# In the order listed: the writer node must not pull the client off the
	# proxy to node 1 before the test means it to go to node 2.
	lr_galera_conf "$LR_GALERA" "$work/lag.conf" "127.0.0.4, 127.0.0.2" \
		"connect_timeout = 2" "read_timeout = 3" "write_timeout = 3" "galera_writer = false"

	lag_node2
	(
		lr_close_fds
		rc=0
		timeout -k 5 60 "$LOCKRUN" -vv -c "$work/lag.conf" --ttl 9 --kill-after 1 -s lag -- \
			sh -c "echo in >>'$work/child'; while [ ! -e '$work/go' ]; do sleep 0.05; done
				echo out >>'$work/child'" 2>"$work/lockrun.err" || rc=$?
		echo "$rc" >"$work/lockrun.rc"
	) 3>&- &
	lr_pid=$!
	for ((i = 0; i < 200; i++)); do
		[[ -s $work/child ]] && break
		sleep 0.1
	done
	assert_equal "$(cat "$work/child")" in
	# Granted on node 1; node 2 has not applied it.
	assert_equal "$(gsql 1 "SELECT COUNT(*) FROM lr_holds WHERE resource = 'lag'")" 1
	assert_equal "$(stale 2 "SELECT COUNT(*) FROM lr_holds WHERE resource = 'lag'")" 0

	if [[ $mode == renew ]]; then
		kill -- -"$proxy_pid"
	else
		kill -STOP -- -"$proxy_pid"
		touch "$work/go"
	fi
	for ((i = 0; i < 200; i++)); do
		grep -q "connected to 127.0.0.2:" "$work/lockrun.err" && break
		sleep 0.1
	done
	grep "connected to 127.0.0.2:" "$work/lockrun.err"
	sleep 2
	assert_equal "$(stale 2 "SELECT COUNT(*) FROM lr_holds WHERE resource = 'lag'")" 0
	lag_stop
	touch "$work/go"
	wait "$lr_pid" || true
	echo "# lockrun's log:" && cat "$work/lockrun.err"
}

@test "causal: a renewal through a node that lags behind the grant waits for it (no false 'lease lost')" {
	# Reads-only causality (wsrep_sync_wait = 1) lets the renewal's UPDATE
	# match no row on node 2: lockrun calls the lease lost (76) and stops
	# the child.
	lagging_run renew
	assert_equal "$(cat "$work/lockrun.rc")" 0
	assert_equal "$(cat "$work/child")" "$(printf 'in\nout')"
	run ! grep "expired or was revoked" "$work/lockrun.err"
	# Released through node 2, and every node agrees.
	assert_equal "$(holds_everywhere)" "$(printf '1 0\n2 0\n3 0')"
	assert_equal "$(gsql 3 "SELECT end_reason, exit_status FROM lr_grants")" "$(printf 'exited\t0')"
}

@test "causal: a release through a node that lags behind the grant deletes the hold" {
	# The release is lockrun's first statement on node 2. Were it not
	# causal, its DELETE would match nothing and it would report success,
	# leaving the hold to its ttl. (The procedure turns wsrep_sync_wait on
	# for itself: its transaction waits for node 2 to catch up.)
	lagging_run release
	assert_equal "$(cat "$work/lockrun.rc")" 0
	assert_equal "$(cat "$work/child")" "$(printf 'in\nout')"
	grep -q "127.0.0.2:[0-9]*: CALL lockrun_release(" "$work/lockrun.err"
	# Gone now (a hold that ran out would still be there: nothing sweeps
	# it), on every node, and the log says how the grant ended.
	local n
	for n in 1 2 3; do
		assert_equal "$(gsql "$n" "SELECT COUNT(*) FROM lr_holds")" 0
	done
	assert_equal "$(gsql 3 "SELECT end_reason, exit_status FROM lr_grants")" "$(printf 'exited\t0')"
}

teardown() {
	# The causal test: end the session that holds node 2 back, and the proxy.
	lag_stop
	if [[ -n ${proxy_pid:-} ]]; then
		kill -- -"$proxy_pid" 2>/dev/null || true
		kill -CONT -- -"$proxy_pid" 2>/dev/null || true
		wait "$proxy_pid" || true
		proxy_pid=
	fi
	# The fault test leaves node 3 dead (and, if it failed, maybe node 2
	# frozen and its workers running): thaw, stop the workers, and bring the
	# cluster back for whatever runs next.
	local n
	for n in 1 2 3; do
		lr_galera_resume "$LR_GALERA" "$n" 2>/dev/null || true
	done
	if ((${#worker_pids[@]})); then
		touch "$work/stop"
		waitall "${worker_pids[@]}"
	fi
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
	run -64 "$LOCKRUN" -c "$LR_GALERA/node2.conf" -n -s g1 --named x -- touch "$mark"
	assert_output --partial "Galera node"
	assert [ ! -e "$mark" ]
	assert_equal "$(holds_everywhere)" "$(printf '1 0\n2 0\n3 0')"
}

@test "epochs: a change of node is no fail-over; every node grants at once, tokens run on by one" {
	local n f prev=0
	for n in 1 2 3 1; do
		run -0 "$LOCKRUN" -c "$LR_GALERA/node$n.conf" -n -x gep -- sh -c 'echo "$LOCKRUN_FENCE"'
		f=$output
		((f == prev + 1)) || fail "node $n gave token $f after $prev"
		prev=$f
	done
	# The cluster is one server: one epoch, named after the cluster.
	assert_equal "$(gsql 2 "SELECT COUNT(*), MIN(server) LIKE 'galera:%', MAX(quarantine_until) <= UTC_TIMESTAMP(6) FROM lr_epochs")" "$(printf '1\t1\t1')"
}

@test "doctor on a Galera node: every node listed passes, one node alone is warned about; no server setting asked" {
	assert_equal "$(gsql 1 "SELECT @@GLOBAL.innodb_lock_wait_timeout")" 50
	run "$LOCKRUNCTL" -c "$LR_GALERA/local2.conf" doctor
	assert_success
	assert_line --regexp '^ok +galera +Galera node \(state Synced, cluster size 3\)'
	assert_line --regexp "^ok +galera +\[database\] host lists 3 nodes and the cluster's writer node"
	refute_output --partial innodb_lock_wait_timeout
	run "$LOCKRUNCTL" -c "$LR_GALERA/node1.conf" doctor
	assert_success
	assert_line --regexp '^WARN +galera +\[database\] host names one node: lockrun writes there'
	assert_line --regexp '^no problems, [1-9][0-9]* warnings?$'
}

# calls N...: how many CALL statements each of nodes N... has served.
calls() {
	local n
	for n; do
		gsql "$n" "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS
			WHERE VARIABLE_NAME = 'COM_CALL_PROCEDURE'"
	done | paste -sd' '
}

# writer_of N...: the node the CALLs of one lockrun run through each of
# localN.conf went to, if all went to one of nodes N... (else it fails).
writer_of() {
	local before after k served=()
	read -ra before <<<"$(calls "$@")"
	for k in 1 2 3; do
		"$LOCKRUN" -c "$LR_GALERA/local$k.conf" -w 30 -x gw -- true || return 1
	done
	read -ra after <<<"$(calls "$@")"
	local args=("$@")
	for ((k = 0; k < $#; k++)); do
		if ((after[k] > before[k])); then served+=("${args[k]}"); fi
	done
	((${#served[@]} == 1)) || {
		echo "CALLs went to nodes '${served[*]}' (before ${before[*]}, after ${after[*]})" >&2
		return 1
	}
	echo "${served[0]}"
}

@test "writer: the move to the writer node verifies its certificate by name, as the first connect did" {
	local w k first hosts
	w=$(writer_of 1 2 3)
	# Listed by name (each node's certificate has its DNS name only),
	# another node first: lockrun connects there, then moves.
	first=$((w % 3 + 1))
	hosts="node$first.lockrun.test"
	for k in 1 2 3; do ((k == first)) || hosts+=", node$k.lockrun.test"; done
	printf '127.0.0.%s node%s.lockrun.test\n' 1 1 2 2 3 3 >"$BATS_TEST_TMPDIR/hosts"
	lr_galera_conf "$LR_GALERA" "$BATS_TEST_TMPDIR/tls.conf" "$hosts" "connect_timeout = 5" \
		"ssl_ca = $LR_GALERA/tls/ca.pem" "ssl_verify_server_cert = true"
	local before after
	read -ra before <<<"$(calls 1 2 3)"
	run unshare --mount sh -c 'mount --bind "$0" /etc/hosts && exec "$@"' \
		"$BATS_TEST_TMPDIR/hosts" "$LOCKRUN" -vv -c "$BATS_TEST_TMPDIR/tls.conf" -x gtls -- true
	assert_success
	read -ra after <<<"$(calls 1 2 3)"
	assert_line --partial "connected to node$first.lockrun.test:"
	assert_line --partial "the Galera cluster's writer node is node$w.lockrun.test: moving there"
	assert_line --partial "connected to node$w.lockrun.test:"
	# The lock's CALLs went to the writer only.
	for k in 1 2 3; do
		if ((k == w)); then
			((after[k - 1] > before[k - 1])) || fail "node $k (the writer) served no CALL"
		else
			assert_equal "${after[k - 1]}" "${before[k - 1]}"
		fi
	done
}

@test "writer: clients listing the nodes in any order send their calls to one node; without it, to the next" {
	local w first w2 k rest=()
	w=$(writer_of 1 2 3)
	# The first member the cluster reports (the same on every node).
	first=$(gsql 2 "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS
		WHERE VARIABLE_NAME = 'WSREP_INCOMING_ADDRESSES'")
	first=${first%%,*}
	assert_equal "${first%:*}" "$(lr_galera_addr "$w")"
	echo "# writer: node $w (members: $(gsql 2 "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS
		WHERE VARIABLE_NAME = 'WSREP_INCOMING_ADDRESSES'"))" >&3
	# The writer dies while three loops take turns on a mutex through it:
	# clients whose list starts with it connect to their next node, and all
	# of them move to the new writer. The longest gap between two grants
	# is the time the move took (a figure for doc/production.md).
	local loops=() end=$((SECONDS + 9)) p
	for k in 1 2 3; do
		(
			while ((SECONDS < end)); do
				"$LOCKRUN" -c "$LR_GALERA/local$k.conf" -w 30 -x gmv -- sleep 0.05 ||
					echo "loop $k: exit $?" >>"$BATS_TEST_TMPDIR/moves"
			done
		) &
		loops+=($!)
	done
	sleep 3
	lr_galera_kill "$LR_GALERA" "$w"
	for k in 1 2 3; do ((k == w)) || rest+=("$k"); done
	# The server's time once the writer is dead: a grant logged after it
	# came from the new writer. (A window counted back from the end would
	# depend on how long the cluster took to settle on a loaded machine.)
	local killed
	killed=$(gsql "${rest[0]}" "SELECT UTC_TIMESTAMP(6)")
	lr_galera_wait_cluster "$LR_GALERA" 2 30 "${rest[@]}"
	for p in "${loops[@]}"; do wait "$p"; done
	w2=$(writer_of "${rest[@]}")
	echo "# node $w killed: the writer is node $w2; grants of the loops: $(gsql "${rest[0]}" \
		"SELECT COUNT(*) FROM lr_grant_items WHERE resource = 'gmv'"), longest gap between two \
		$(gsql "${rest[0]}" "SELECT ROUND(MAX(gap) / 1e6, 2) FROM (SELECT TIMESTAMPDIFF(MICROSECOND,
			LAG(g.acquired_at) OVER (ORDER BY g.acquired_at), g.acquired_at) gap
			FROM lr_grants g JOIN lr_grant_items i ON i.grant_id = g.id
			WHERE i.resource = 'gmv') t") s; runs that failed: $(cat "$BATS_TEST_TMPDIR/moves" 2>/dev/null | paste -sd, || true)" >&3
	# After the move the loops' runs were granted again.
	(($(gsql "${rest[0]}" "SELECT COUNT(*) FROM lr_grants g JOIN lr_grant_items i ON i.grant_id = g.id
		WHERE i.resource = 'gmv' AND g.acquired_at > '$killed'") > 0)) ||
		fail "no grant of the loops after the writer died"
	# A node listed alone is written where it is told: no move.
	local before after
	read -ra before <<<"$(calls "${rest[@]}")"
	local other=${rest[0]}
	((other != w2)) || other=${rest[1]}
	run -0 "$LOCKRUN" -c "$LR_GALERA/node$other.conf" -x gw -- true
	read -ra after <<<"$(calls "${rest[@]}")"
	local i
	for i in 0 1; do
		if ((rest[i] == other)); then
			((after[i] > before[i])) || fail "node $other served no CALL"
		else
			assert_equal "${after[i]}" "${before[i]}"
		fi
	done
}

# kills N: the KILL statements node N has run (a release's doorbell ring
# is a KILL QUERY, run inside lockrun_release).
kills() {
	gsql "$1" "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS
		WHERE VARIABLE_NAME = 'COM_KILL'"
}

# held_on N NAME: waits until node N sees a hold of NAME.
held_on() {
	local i
	for ((i = 0; i < 100; i++)); do
		(($(gsql "$1" "SELECT COUNT(*) FROM lr_holds WHERE resource = '$2'") > 0)) && return 0
		sleep 0.1
	done
	fail "no hold of $2 on node $1"
}

# sleeps_of FILE: "POLLS HEAD_POLLS SLEEPS SECONDS" from lockrun -v's
# "waited ..." line in FILE.
sleeps_of() {
	sed -n 's/.*waited \([0-9.]*\) s: \([0-9]*\) polls, \([0-9]*\) of them.*, \([0-9]*\) doorbell sleeps.*/\2 \3 \4 \1/p' "$1"
}

@test "wake-ups: on the writer node the release rings the head and the chain wakes the next; across nodes the head sleeps its turn out" {
	local w k0 polls head sleeps secs holder first
	w=$(writer_of 1 2 3)
	# Every node listed: holder and two waiters on the writer node. The
	# release rings the head's doorbell (a KILL there); the second waiter
	# blocks on the first one's wake-up lock, so it never polls at the head.
	k0=$(kills "$w")
	# (Waits name their pids: a node restarted by setup is a child too.)
	"$LOCKRUN" -c "$LR_GALERA/local1.conf" -x gwk -- sleep 2 &
	holder=$!
	held_on "$w" gwk
	"$LOCKRUN" -c "$LR_GALERA/local2.conf" -v -w 30 -x gwk -- sleep 1 2>"$BATS_TEST_TMPDIR/a.err" &
	first=$!
	sleep 0.3
	run -0 "$LOCKRUN" -c "$LR_GALERA/local3.conf" -v -w 30 -x gwk -- true
	wait "$holder" "$first"
	(($(kills "$w") >= k0 + 2)) || fail "the writer node ran $(($(kills "$w") - k0)) KILLs, not 2"
	read -r polls head sleeps secs < <(sleeps_of "$BATS_TEST_TMPDIR/a.err")
	echo "# first waiter: $secs s, $polls polls ($head at the head), $sleeps doorbell sleeps" >&3
	assert_equal "$head" 0
	((sleeps >= 1)) || fail "the first waiter slept $sleeps times on its doorbell"
	printf '%s\n' "$output" >"$BATS_TEST_TMPDIR/b.err"
	read -r polls head sleeps secs < <(sleeps_of "$BATS_TEST_TMPDIR/b.err")
	echo "# second waiter: $secs s, $polls polls ($head at the head), $sleeps doorbell sleeps" >&3
	assert_equal "$head" 0
	((polls <= 3)) || fail "the second waiter polled $polls times behind the first"

	# Each on its own node: no ring reaches the waiter; it sleeps 250 ms
	# at a time (at most 4 calls a second, plus the first) until a sleep
	# finds the hand-off.
	k0=$(kills 2)
	"$LOCKRUN" -c "$LR_GALERA/node1.conf" -x gwx -- sleep 1.5 &
	holder=$!
	held_on 1 gwx
	run -0 "$LOCKRUN" -c "$LR_GALERA/node2.conf" -v -w 30 -x gwx -- true
	wait "$holder"
	assert_equal "$(kills 2)" "$k0"
	printf '%s\n' "$output" >"$BATS_TEST_TMPDIR/c.err"
	read -r polls head sleeps secs < <(sleeps_of "$BATS_TEST_TMPDIR/c.err")
	echo "# waiter on another node: $secs s, $polls polls, $sleeps doorbell sleeps" >&3
	((sleeps >= 2)) || fail "it slept $sleeps times"
	awk -v n="$sleeps" -v s="$secs" 'BEGIN { exit !(n <= 4 * s + 2) }' ||
		fail "$sleeps doorbell sleeps in $secs s: more than 4 a second"
}
