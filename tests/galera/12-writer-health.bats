#!/usr/bin/env bats
#
# The Galera writer node when it is sick (run with tests/run-galera): frozen
# (SIGSTOP, a hung host), a state-transfer donor (rsync blocks it for the
# whole copy), desynced. Clients list every node, each its own first
# (localN.conf), and take turns on a mutex; the children record when they
# went in and out, with their fencing token, under a local flock. The
# verdicts come from those records: never two inside, tokens increasing,
# and the longest time without a grant; and from the nodes' own counters
# of the CALLs they served, for where the clients wrote.

bats_require_minimum_version 1.5.0

load suite

setup() {
	work=$LR_TMP/health$BATS_TEST_NUMBER
	fresh_cluster "$work"
	rec=$work/rec
	: >"$rec"
	loops=()
	proxies=()
}

teardown() {
	: >"$work/stop"
	local p
	for p in "${loops[@]}"; do wait "$p" || true; done
	for p in "${proxies[@]}"; do kill "$p" 2>/dev/null || true; done
	# A test that failed half-way must not leave a node frozen or desynced.
	local n
	for n in 1 2 3; do
		lr_galera_resume "$LR_GALERA" "$n" 2>/dev/null || true
		lr_galera_sql "$LR_GALERA" "$n" "SET GLOBAL wsrep_desync = OFF" 2>/dev/null || true
	done
}

# writer: the node every client writes on now, the first member the cluster
# reports (writer.h).
writer() {
	local m
	m=$(lr_galera_sql "$LR_GALERA" 1 "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS
		WHERE VARIABLE_NAME = 'WSREP_INCOMING_ADDRESSES'")
	m=${m%%,*}
	m=${m%:*}
	echo "${m##*.}"
}

# calls N: how many CALL statements node N has served.
calls() {
	lr_galera_sql "$LR_GALERA" "$1" "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS
		WHERE VARIABLE_NAME = 'COM_CALL_PROCEDURE'"
}

# loops N NAME SECS: N loops of `lockrun -x NAME` until $work/stop exists,
# loop w beside node (w mod 3) + 1 (localK.conf lists every node, its own
# first); the child records "enter TIME FENCE" and "leave TIME" in $rec
# and stays SECS. A run that fails is noted in $work/failed.
loops() {
	local n=$1 name=$2 secs=$3 w
	local child
	child="flock $rec.lk sh -c 'echo enter \$(date +%s.%N) \$LOCKRUN_FENCE >>$rec'; sleep $secs;"
	child+=" flock $rec.lk sh -c 'echo leave \$(date +%s.%N) >>$rec'"
	for ((w = 1; w <= n; w++)); do
		(
			lr_close_fds
			local conf=$LR_GALERA/local$(((w - 1) % 3 + 1)).conf rc
			while [[ ! -e $work/stop ]]; do
				rc=0
				timeout -k 5 120 "$LOCKRUN" -v -c "$conf" -w 90 -x "$name" -- sh -c "$child" \
					2>>"$work/err.$w" || rc=$?
				((rc == 0)) || echo "loop $w: exit $rc" >>"$work/failed"
			done
		) 3>&- &
		loops+=($!)
	done
}

# stop_loops: ends the loops after their current run.
stop_loops() {
	: >"$work/stop"
	local p
	for p in "${loops[@]}"; do wait "$p" || true; done
	loops=()
}

# judge [FROM TO]: from the records, never two inside, every enter with
# its leave, tokens increasing; prints "GRANTS GAP AT", the number of
# grants and the longest time between two grants (of those that overlap
# the times FROM to TO if given), and when it began.
judge() {
	awk -v from="${1:-0}" -v to="${2:-1e12}" '
		$1 == "enter" {
			u++
			if (u > 1) { printf "line %d: 2 inside at once\n", NR; bad = 1 }
			if (seen && $3 + 0 <= prev + 0) { printf "line %d: fence %s after %s\n", NR, $3, prev; bad = 1 }
			prev = $3; seen = 1; e++
			if (last != "" && $2 >= from && last <= to && $2 - last > gap) { gap = $2 - last; at = last }
			last = $2
		}
		$1 == "leave" { u--; l++ }
		END {
			if (e != l) { printf "%d enter but %d leave records\n", e, l; bad = 1 }
			if (bad) exit 1
			printf "%d %.1f %.1f\n", e, gap, at
		}' "$rec"
}

@test "writer frozen 10 s under 15 clients: the others write on the next node; longest gap <= eviction pause + 2 s" {
	local w g gap at t0
	w=$(writer)
	loops 15 gfz 0.05
	sleep 4
	t0=$(date +%s.%N)
	lr_galera_pause "$LR_GALERA" "$w"
	# The cluster's eviction pause: until another node sees a cluster
	# of 2 (no node commits anything before).
	local k=$((w % 3 + 1)) te=0 i
	for ((i = 0; i < 50; i++)); do
		if [[ $(lr_galera_state "$LR_GALERA" "$k") == *" 2" ]]; then
			te=$(date +%s.%N)
			break
		fi
		sleep 0.2
	done
	[[ $te != 0 ]] || fail "node $k did not see the frozen node evicted in 10 s"
	sleep "$(awk -v t0="$t0" -v te="$te" 'BEGIN { printf "%.1f", 10 - (te - t0) }')"
	lr_galera_resume "$LR_GALERA" "$w"
	sleep 3
	stop_loops
	read -r g gap at < <(judge) || fail "$(judge)"
	local pause
	pause=$(awk -v t0="$t0" -v te="$te" 'BEGIN { printf "%.1f", te - t0 }')
	echo "# node $w (the writer) frozen 10 s under 15 clients: $g grants, longest gap ${gap} s," \
		"from $(awk -v a="$at" -v t="$t0" 'BEGIN { printf "%.1f", a - t }') s after the freeze;" \
		"eviction pause ${pause} s; failed runs: $(cat "$work/failed" 2>/dev/null | wc -l)" >&3
	# Grants went on during the freeze, on the other nodes.
	(($(awk -v t="$t0" '$1 == "enter" && $2 > t + 8 && $2 < t + 10' "$rec" | wc -l) > 0)) ||
		fail "no grant in the last 2 s of the freeze"
	# The eviction pause with the servers' defaults is about 6 s (a frozen
	# member stalls the cluster until it is evicted): at most 2 s more.
	awk -v g="$gap" -v p="$pause" 'BEGIN { exit !(g <= p + 2) }' ||
		fail "longest gap ${gap} s > the eviction pause ${pause} s + 2 s"
	[[ ! -s $work/failed ]] || fail "$(cat "$work/failed")"
}

@test "writer as rsync donor: clients pass it over for the copy, and come back after" {
	local w j g gap at t0 t1 before after
	w=$(writer)
	j=$((w % 3 + 1))
	loops 6 gdn 0.05
	sleep 3
	# Node j leaves and comes back with a full state transfer (no
	# grastate: no IST), from the writer. (It leaves cleanly: a killed
	# node would stall the cluster until it is evicted, another case.)
	lr_server_stop "$(lr_galera_node "$LR_GALERA" "$j")"
	rm -f "$(lr_galera_node "$LR_GALERA" "$j")/data/grastate.dat"
	t0=$(date +%s.%N)
	(
		lr_close_fds
		lr_galera_node_start "$LR_GALERA" "$j" --wsrep-sst-donor="node$w"
	) 3>&- &
	local joiner=$!
	# The donor's state, as it says it, every 0.2 s.
	local i st donor=0
	for ((i = 0; i < 600; i++)); do
		st=$(lr_galera_sql "$LR_GALERA" "$w" "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS
			WHERE VARIABLE_NAME = 'WSREP_LOCAL_STATE_COMMENT'" 2>/dev/null)
		if [[ $st == Donor* ]]; then
			((donor)) || t1=$(date +%s.%N)
			donor=1
		elif ((donor)); then
			break
		fi
		sleep 0.2
	done
	local t2
	t2=$(date +%s.%N)
	wait "$joiner"
	((donor)) || fail "node $w was never seen as a donor"
	# Back: once the donor is Synced, the clients write on the writer
	# (the first member: the joiner's new identity may come first now),
	# and only there.
	sleep 6
	local w2 n b=() a=()
	w2=$(writer)
	for n in 1 2 3; do b[n]=$(calls "$n"); done
	sleep 2
	for n in 1 2 3; do a[n]=$(calls "$n"); done
	before=${b[w2]} after=${a[w2]}
	stop_loops
	read -r g gap at < <(judge "$t1" "$t2") || fail "$(judge "$t1" "$t2")"
	echo "# node $w donor of an rsync copy to node $j for" \
		"$(awk -v a="$t1" -v b="$t2" 'BEGIN { printf "%.1f", b - a }') s: $g grants, longest gap" \
		"${gap} s while it was (the copy took $(awk -v a="$t0" -v b="$t2" 'BEGIN { printf "%.1f", b - a }') s" \
		"from the joiner's start); 6 s after, in 2 s, CALLs on nodes 1-3:" \
		"$((a[1] - b[1])) $((a[2] - b[2])) $((a[3] - b[3])) (the writer: node $w2)" >&3
	awk -v g="$gap" 'BEGIN { exit !(g <= 3.0) }' || fail "longest gap ${gap} s > 3 s"
	((after > before)) || fail "no CALL on node $w2 (the writer) after the copy"
	for n in 1 2 3; do
		((n == w2)) || assert_equal "${a[n]}" "${b[n]}"
	done
	[[ ! -s $work/failed ]] || fail "$(cat "$work/failed")"
}

@test "long-lived holders and waiters leave a desynced writer within 5 s and come back, without conflicts" {
	local w k c0 c1 c2 c3 c4 x
	w=$(writer)
	# Holders renew every 2 s (ttl 6) for 32 s; a waiter queues behind
	# each. Each pair is set up beside another node.
	for k in 1 2 3; do
		(
			lr_close_fds
			"$LOCKRUN" -c "$LR_GALERA/local$k.conf" --ttl 6 --kill-after 1 -w 60 -x "gll$k" -- sleep 32 &
			h=$!
			sleep 0.5
			"$LOCKRUN" -c "$LR_GALERA/local$k.conf" --ttl 6 --kill-after 1 -w 60 -x "gll$k" -- true || exit 1
			wait "$h"
		) 3>&- &
		loops+=($!)
	done
	sleep 2
	c0=$(calls "$w")
	sleep 2
	c1=$(calls "$w")
	((c1 > c0)) || fail "no CALL on the writer, node $w, before"
	lr_galera_sql "$LR_GALERA" "$w" "SET GLOBAL wsrep_desync = ON"
	sleep 5
	c2=$(calls "$w")
	sleep 4
	c3=$(calls "$w")
	echo "# CALLs on the writer node $w: $((c1 - c0)) in 2 s; desynced: $((c2 - c1)) in the first 5 s, then $((c3 - c2)) in 4 s" >&3
	assert_equal "$c3" "$c2"
	# Once moved, all write on one node: no certification conflict.
	x=$(conflicts)
	sleep 2
	assert_equal "$(conflicts)" "$x"
	lr_galera_sql "$LR_GALERA" "$w" "SET GLOBAL wsrep_desync = OFF"
	sleep 9
	c4=$(calls "$w")
	echo "# Synced again: $((c4 - c3)) CALLs there in 9 s" >&3
	((c4 > c3)) || fail "the clients did not come back to node $w"
	local p
	for p in "${loops[@]}"; do wait "$p" || fail "a holder or waiter failed"; done
	loops=()
}

@test "doctor: says whether the configuration reaches the writer node, and why not" {
	local w k others=() port
	w=$(writer)
	run -0 "$LOCKRUNCTL" -c "$LR_GALERA/local$((w % 3 + 1)).conf" doctor
	assert_line --regexp "^ok +galera +\[database\] host lists 3 nodes and the cluster's writer node,$"
	assert_line --regexp "^ +127\.0\.0\.$w \(the first member, 127\.0\.0\.$w\): lockrun sends"
	# The writer left out: lockrun writes on the next member, while the
	# clients that list it write on it.
	for k in 1 2 3; do ((k == w)) || others+=("127.0.0.$k"); done
	lr_galera_conf "$LR_GALERA" "$BATS_TEST_TMPDIR/miss.conf" "${others[0]}, ${others[1]}"
	run -0 "$LOCKRUNCTL" -c "$BATS_TEST_TMPDIR/miss.conf" doctor
	assert_line --regexp "^WARN +galera +\[database\] host does not list the cluster's writer node, its$"
	assert_line --regexp "^ +first member 127\.0\.0\.$w: lockrun writes on 127\.0\.0\.[0-9] instead,$"
	assert_line --regexp "add 127\.0\.0\.$w to host$"
	# Proxies only (one in front of each of two nodes, on addresses the
	# cluster does not report): no writer can be chosen.
	port=$(sed -n 's/^GALERA_SQL_PORT=//p' "$LR_GALERA/cluster.env")
	for k in 1 2; do
		socat "TCP-LISTEN:$port,bind=127.0.0.1$k,reuseaddr,fork" "TCP:127.0.0.$k:$port" 3>&- &
		proxies+=($!)
	done
	sleep 0.5
	lr_galera_conf "$LR_GALERA" "$BATS_TEST_TMPDIR/proxy.conf" "127.0.0.11, 127.0.0.12"
	run -0 "$LOCKRUNCTL" -c "$BATS_TEST_TMPDIR/proxy.conf" doctor
	assert_line --regexp "^WARN +galera +\[database\] host lists 2 hosts, and none is a member the$"
	# galera_writer = false: said too.
	lr_galera_conf "$LR_GALERA" "$BATS_TEST_TMPDIR/off.conf" "127.0.0.1, 127.0.0.2" \
		"connect_timeout = 5" "galera_writer = false"
	run -0 "$LOCKRUNCTL" -c "$BATS_TEST_TMPDIR/off.conf" doctor
	assert_line --regexp "^WARN +galera +galera_writer = false: lockrun writes on the first of the 2$"
}
