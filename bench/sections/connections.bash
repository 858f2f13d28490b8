# shellcheck shell=bash
#
# bench/sections/connections.bash: the "connections" section of bench/run,
# sourced by it.
#
# Measures what many waiters on one host cost the server: its connections
# and statements per second while WAITERS waiters wait behind a held mutex,
# with the host's queue (lockrun's default) and with --no-local-queue; and
# how many waiters fail with MariaDB's default max_connections of 151.
# How: conn_point starts a holder and the waiters, waits until they are
# queued, samples Threads_connected for CONN_SECS, reads
# Max_used_connections and the Questions counter; conn_reap stops the
# waiters and counts those that had ended by themselves.
# To the page: the table "Connections", a headline, the plot
# bench-connections.png (connections_plot) and two rows of the targets
# table (connections_targets), from data/conn.*.
# Uses bench/run's T, LOCKRUN, WAITERS, CONN_SECS, Q_SELF, BG_PIDS, md,
# headline, db_sql, held, queued, queue_empty, status_var, log and die.

# The outcome at max_connections = 151, for the headline.
CONN_151=

# live_count PID...: how many of PIDs still run.
live_count() {
	local p n=0
	for p in "$@"; do
		kill -0 "$p" 2>/dev/null && n=$((n + 1))
	done
	echo "$n"
}

# wait_settled SECONDS PID...: wait until every live waiter among PIDs is in
# the database's queue or, should some wait elsewhere (a queue on the host,
# retries after "too many connections"), until the database's queue has not
# changed for 3 s.
wait_settled() {
	local secs=$1 i q alive last=-1 same=0
	shift
	for ((i = 0; i < secs; i++)); do
		q=$(queued conn-mx)
		alive=$(live_count "$@")
		((q >= alive)) && return 0
		if ((q == last)); then
			same=$((same + 1))
			((same >= 3)) && return 0
		else
			same=0
		fi
		last=$q
		sleep 1
	done
	return 1
}

# conn_point W MAXCONN QUEUE: W waiters behind the held mutex conn-mx, with
# the host's queue QUEUE (on, lockrun's default, or off). Prints a table
# row, and adds "W PEAK_THREADS MAX_USED QPS" to conn.QUEUE.dat.
conn_point() {
	local w=$1 maxconn=$2 lq=$3 i peak=0 tc q0 q1 t0 t1 maxused failed=0 qps nq how='' holder
	local -a pids=() opt=()
	local -A codes=()
	[[ $lq == on ]] || opt=(--no-local-queue)
	# A holder of its own: one that lost its lock at an earlier point (a
	# machine too loaded to renew in time) must not spoil this one.
	"$LOCKRUN" -x conn-mx -- sleep 100000 </dev/null >/dev/null 2>&1 &
	holder=$!
	BG_PIDS+=("$holder")
	wait_until 30 held conn-mx ||
		die "the holder of conn-mx did not get it"
	db_sql "SET GLOBAL max_connections = $maxconn; FLUSH STATUS"
	# --wait bounds a waiter's life if this script dies; we stop them sooner.
	for ((i = 0; i < w; i++)); do
		"$LOCKRUN" -q "${opt[@]}" --wait $((600 + CONN_SECS)) -x conn-mx -- true </dev/null >/dev/null 2>>"$T/conn.err" &
		pids+=($!)
	done
	BG_PIDS+=("${pids[@]}")
	if ((maxconn < w)); then
		# The server is full, and the waiters that are not in keep
		# logging in again: our own client would be turned away as
		# well. Give them a fixed time, ask the server nothing, and
		# judge by how many gave up.
		sleep $((CONN_SECS + 10))
		peak=- maxused=- qps=- nq=-
		conn_reap
		md "| $w | $lq | $maxconn | $nq | $peak | $maxused | $qps | $failed${how:+ ($how)} |"
		CONN_151+="${CONN_151:+; }host queue $lq: $failed of $w waiters failed${how:+ ($how)}"
		echo "$w $failed ${codes[69]:-0}" >"$T/data/conn.151.$lq"
		db_sql "SET GLOBAL max_connections = 1500"
		wait_until 60 queue_empty conn-mx || true
		return 0
	fi
	wait_settled $((60 + w / 10)) "${pids[@]}" || log "connections: $w waiters did not settle"
	sleep 1
	q0=$(status_var Questions)
	t0=$(now_us)
	local samples=0
	while (($(now_us) < t0 + CONN_SECS * 1000000)); do
		tc=$(status_var Threads_connected)
		((tc > peak)) && peak=$tc
		samples=$((samples + 1))
		sleep 0.5
	done
	q1=$(status_var Questions)
	t1=$(now_us)
	maxused=$(status_var Max_used_connections)
	# Our own status reads (samples + the final one) are not lockrun's.
	qps=$(awk -v d=$((q1 - q0 - (samples + 1) * Q_SELF)) -v us=$((t1 - t0)) \
		'BEGIN { printf "%.1f", d / (us / 1e6) }')
	nq=$(queued conn-mx)
	conn_reap
	md "| $w | $lq | $maxconn | $nq | $peak | $maxused | $qps | $failed${how:+ ($how)} |"
	echo "$w $peak $maxused $qps" >>"$T/data/conn.$lq.dat"
	wait_until 30 queue_empty conn-mx || true
}

# conn_reap: stops conn_point's waiters (pids) and counts in failed, codes
# and how those that had ended by themselves: a waiter alive now is waiting
# as it should; one that ended already has failed (it cannot have been
# granted, unless the holder lost its lock, which is said). Then stops the
# holder.
conn_reap() {
	local p rc lost=
	kill -0 "$holder" 2>/dev/null || lost="the holder lost its lock"
	for p in "${pids[@]}"; do
		kill -0 "$p" 2>/dev/null && kill -TERM "$p" 2>/dev/null
	done
	for p in "${pids[@]}"; do
		rc=0
		wait "$p" 2>/dev/null || rc=$?
		if ((rc != 128 + 15)); then
			failed=$((failed + 1))
			codes[$rc]=$((${codes[$rc]:-0} + 1))
		fi
	done
	how=$lost
	for rc in "${!codes[@]}"; do how+="${how:+, }${codes[$rc]}× exit $rc"; done
	kill -TERM "$holder" 2>/dev/null || true
	wait "$holder" 2>/dev/null || true
}

section_connections() {
	local w lq
	: >"$T/data/conn.on.dat"
	: >"$T/data/conn.off.dat"
	md "## Connections: waiters on one host" ""
	md "| waiters | host queue | max_connections | queued | peak Threads_connected | Max_used_connections | statements/s at the server | failed |" \
		"| ---: | --- | ---: | ---: | ---: | ---: | ---: | --- |"
	for lq in on off; do
		for w in "${WAITERS[@]}"; do
			log "connections: $w waiters, host queue $lq"
			conn_point "$w" 1500 "$lq"
		done
	done
	w=${WAITERS[-1]}
	for lq in on off; do
		log "connections: $w waiters, host queue $lq, max_connections 151"
		conn_point "$w" 151 "$lq"
	done
	db_sql "SET GLOBAL max_connections = 1500"
	local peak maxused qps omaxused oqps
	read -r w peak maxused qps < <(tail -n 1 "$T/data/conn.on.dat")
	read -r _ _ omaxused oqps < <(tail -n 1 "$T/data/conn.off.dat")
	headline "$w waiters on one host: $maxused server connections at most, $qps statements/s" \
		"at the server while they wait (without the host's queue: $omaxused and $oqps);" \
		"with max_connections = 151, ${CONN_151:-not measured}."
	md "" "![server connections against waiters](bench-connections.png)" ""
	md "How measured: one \`lockrun -x conn-mx -- sleep\` holds the mutex (a new one for each row); W waiters" \
		"\`lockrun --wait $((600 + CONN_SECS)) -x conn-mx -- true\` start at once on this host," \
		"with the host's queue (lockrun's default) and with \`--no-local-queue\`." \
		"Once they are queued (rows in lr_waiters) or have exited, or the queue has not changed" \
		"for 3 s (with the host's queue only its head is in the database's), Threads_connected is sampled" \
		"every 0.5 s for $CONN_SECS s (peak shown), Max_used_connections is read after a FLUSH STATUS" \
		"taken before the waiters started, and statements/s is the server's Questions delta over" \
		"the window, less this script's own status reads. Every figure includes the holder's" \
		"connection and this script's one. Then every waiter still waiting is stopped with SIGTERM" \
		"(status 143); any other status counts as failed: a waiter cannot be granted here, so one" \
		"that ended by itself failed. The server runs with max_connections = 1500 (and ulimit -n" \
		"65536) so that the figures show what lockrun asks for; the last rows repeat the largest" \
		"run with MariaDB's default of 151. How to read: with the host's queue, the head of the" \
		"host's queue holds two connections (its own and the doorbell's) and the other waiters" \
		"none; without it, each waiting lockrun holds one connection of its own." ""
}

# connections_plot DIR: the gnuplot commands for bench-connections.png in DIR, if the
# section has data (bench/run's plot_all draws every plot at once).
connections_plot() {
	local out=$1
	[[ -s $T/data/conn.on.dat || -s $T/data/conn.off.dat ]] || return 0
	echo "set output '$out/bench-connections.png'"
	echo "set title 'Server connections against waiters on one host'"
	echo "set xlabel 'waiters'; set ylabel 'Max\\_used\\_connections'; set logscale xy 10"
	echo "plot '$T/data/conn.on.dat' using 1:3 with linespoints title 'host queue on (default)', \\"
	echo "     '$T/data/conn.off.dat' using 1:3 with linespoints title '--no-local-queue'"
	echo "unset logscale"
}

# connections_targets: the section's rows of the targets table.
connections_targets() {
	local f=$T/data a b n
	if [[ -s $f/conn.on.dat ]]; then
		# Less the holder's connection and this script's own.
		read -r n _ a _ < <(tail -n 1 "$f/conn.on.dat")
		target "server connections of $n waiters on one host" "≤ 2" "$((a - 2))" "$(calc "$a - 2 <= 2")"
	else
		target "server connections of 1,000 waiters on one host" "≤ 2" - ""
	fi
	if [[ -s $f/conn.151.on ]]; then
		read -r n a b <"$f/conn.151.on"
		target "waiters exiting 69 with max_connections = 151 ($n waiters)" "0" "$b ($a failed)" "$(calc "$b == 0")"
	else
		target "waiters exiting 69 with max_connections = 151" "0" - ""
	fi
}
