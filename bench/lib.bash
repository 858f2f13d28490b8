# shellcheck shell=bash
#
# bench/lib.bash: what bench/run, its sections (bench/sections/) and
# bench/galera share: formatting, percentiles, timing one command, waiting
# for a condition, peak RSS, and the contention loops with their hand-off
# statistics. Expects T (the temp dir, with data/ in it), CONT_SECS,
# CONT_WARM_US and the array BG_PIDS from the caller; rss_runs also N_RSS;
# the hand-off rounds also LOCKRUN, STAMP and db_sql (a query as the
# administrator in lockrun's database).

# fmt_ms MICROSECONDS: milliseconds with two decimals ("-" stays "-").
fmt_ms() { awk -v v="$1" 'BEGIN { if (v ~ /^-?[0-9.]+$/) printf "%.2f", v / 1000; else printf "-" }'; }

# ratio A B: A/B with two decimals, or "-".
ratio() {
	awk -v a="$1" -v b="$2" '
		BEGIN { if (a ~ /^[0-9.]+$/ && b ~ /^[0-9.]+$/ && b > 0) printf "%.2f", a / b; else printf "-" }'
}

# pct FILE P...: the P-th percentiles (nearest rank) of the numbers in FILE,
# space-separated; "-" for each if FILE has no numbers.
pct() {
	local f=$1
	shift
	sort -n "$f" | awk -v ps="$*" '
		NF { v[++n] = $1 }
		END {
			k = split(ps, p, " ")
			for (i = 1; i <= k; i++) {
				if (n == 0) { printf "%s-", (i > 1 ? " " : ""); continue }
				r = int(p[i] / 100 * n + 0.999999)
				if (r < 1) r = 1
				if (r > n) r = n
				printf "%s%s", (i > 1 ? " " : ""), v[r]
			}
			printf "\n"
		}'
}

now_us() {
	local t=$EPOCHREALTIME
	echo "${t/./}"
}

# timed CMD...: run CMD with its output discarded; WALL_US is its wall time
# in microseconds. Returns CMD's status. A global, not $(...): a subshell per
# run would add a fork to every figure.
WALL_US=0
# shellcheck disable=SC2034 # WALL_US is for the caller
timed() {
	local t0 t1 rc=0
	t0=$EPOCHREALTIME
	"$@" >/dev/null 2>>"$T/errors.log" || rc=$?
	t1=$EPOCHREALTIME
	WALL_US=$((${t1/./} - ${t0/./}))
	return "$rc"
}

# wait_until SECONDS CMD...: poll CMD every 0.2 s until it succeeds; false on
# timeout.
wait_until() {
	local secs=$1 i
	shift
	for ((i = 0; i < secs * 5; i++)); do
		"$@" && return 0
		sleep 0.2
	done
	return 1
}

# rss_runs OUT CMD...: runs CMD N_RSS times, appending each run's peak RSS
# (KiB, GNU time's %M) to OUT; a run that fails adds nothing.
rss_runs() {
	local out=$1 i
	shift
	for ((i = 0; i < N_RSS; i++)); do
		/usr/bin/time -f %M -o "$T/rss" "$@" </dev/null >/dev/null 2>&1 &&
			tail -n 1 "$T/rss" >>"$out"
	done
}

# cpu_snap: "BUSY IDLE" clock ticks of the whole machine so far (/proc/stat:
# user, nice, system, irq, softirq; idle, iowait).
cpu_snap() { awk '$1 == "cpu" { print $2 + $3 + $4 + $7 + $8, $5 + $6; exit }' /proc/stat; }

# proc_ticks PID: the CPU clock ticks PID has used (user + system), 0 if
# PID is empty or gone.
proc_ticks() {
	[[ -n $1 && -r /proc/$1/stat ]] || {
		echo 0
		return
	}
	sed 's/.*) //' "/proc/$1/stat" | awk '{ print $12 + $13 }'
}

# contend_loop DEADLINE_US CMD...: run CMD over and over until DEADLINE_US.
# Failures are counted in $T/cont.fail (one line each).
contend_loop() {
	local deadline=$1 t
	shift
	while t=$EPOCHREALTIME && ((${t/./} < deadline)); do
		"$@" >/dev/null 2>>"$T/errors.log" || echo "$?" >>"$T/cont.fail"
	done
}

# contend NAME LOOPS CMD_A [--- CMD_B]: LOOPS loops, each running its command
# over and over for CONT_WARM_US + CONT_SECS; with CMD_B, the last
# max(1, LOOPS/8) loops run CMD_B (the writers behind readers). The wrapped
# commands append to $T/data/cont.NAME. Sets the measuring window, WIN0 to
# WIN1 (µs): the last CONT_SECS, once all loops have started and connected.
# Also what the whole run cost in CPU: CONT_BUSY and CONT_IDLE, the
# machine's ticks, and CONT_SRV, those of the server process CONT_SRV_PID
# (empty: none).
CONT_BUSY=0 CONT_IDLE=0 CONT_SRV=0
contend() {
	local name=$1 loops=$2 i nb=0 b0 i0 s0 b1 i1 s1
	shift 2
	local -a a=() b=() pids=()
	while (($#)) && [[ $1 != --- ]]; do
		a+=("$1")
		shift
	done
	if (($#)); then
		shift
		b=("$@")
		nb=$((loops / 8 > 1 ? loops / 8 : 1))
	fi
	: >"$T/data/cont.$name"
	: >"$T/cont.fail"
	read -r b0 i0 < <(cpu_snap)
	s0=$(proc_ticks "${CONT_SRV_PID:-}")
	WIN0=$(($(now_us) + CONT_WARM_US))
	WIN1=$((WIN0 + CONT_SECS * 1000000))
	for ((i = 0; i < loops; i++)); do
		if ((i >= loops - nb)); then
			contend_loop "$WIN1" "${b[@]}" &
		else
			contend_loop "$WIN1" "${a[@]}" &
		fi
		pids+=($!)
	done
	BG_PIDS+=("${pids[@]}")
	wait "${pids[@]}" || true
	read -r b1 i1 < <(cpu_snap)
	s1=$(proc_ticks "${CONT_SRV_PID:-}")
	CONT_BUSY=$((b1 - b0)) CONT_IDLE=$((i1 - i0)) CONT_SRV=$((s1 - s0))
}

# cont_cpu FILE: "BUSY_PCT CPU_MS SERVER_MS" for the last contend run, whose
# commands recorded one line each in FILE: the share of the machine's CPU
# time that was busy, and the CPU time per command run, all processes
# together and the server's part of it ("-" without a server).
cont_cpu() {
	local n hz
	n=$(wc -l <"$1")
	hz=$(getconf CLK_TCK)
	awk -v b="$CONT_BUSY" -v i="$CONT_IDLE" -v s="$CONT_SRV" -v n="$n" -v hz="$hz" \
		-v srv="${CONT_SRV_PID:-}" 'BEGIN {
			printf "%.0f %s %s\n", (b + i > 0 ? 100 * b / (b + i) : 0),
				(n > 0 ? sprintf("%.1f", 1000 * b / hz / n) : "-"),
				(n > 0 && srv != "" ? sprintf("%.1f", 1000 * s / hz / n) : "-")
		}'
}

# cont_stats NAME CAPACITY: "GRANTS_PER_S P50_US P99_US VIOLATIONS" from the
# stamps of the last contend run. Release-to-start: the k-th permit freed
# (k-th end in time order) is in use again at the (k+CAPACITY)-th start;
# the figure is that start minus that end, for starts inside the window.
# For a mutex this is simply the next start minus the previous end. A
# negative value would mean more than CAPACITY commands ran at once.
cont_stats() {
	local name=$1 cap=$2 f=$T/data/cont.$1 grants p50 p99 bad
	local w0=$((WIN0 * 1000)) w1=$((WIN1 * 1000))
	grants=$(awk -v w0="$w0" -v w1="$w1" -v s="$CONT_SECS" \
		'$2 >= w0 && $2 < w1 { n++ } END { printf "%.1f", n / s }' "$f")
	awk '{ print $2 }' "$f" | sort -n >"$T/starts"
	awk '{ print $3 }' "$f" | sort -n >"$T/ends"
	tail -n "+$((cap + 1))" "$T/starts" | paste - "$T/ends" |
		awk -v w0="$w0" -v w1="$w1" 'NF == 2 && $1 >= w0 && $1 < w1 { print int(($1 - $2) / 1000) }' \
			>"$T/data/r2s.$name"
	bad=$(awk '$1 < 0 { n++ } END { print n + 0 }' "$T/data/r2s.$name")
	read -r p50 p99 < <(pct "$T/data/r2s.$name" 50 99)
	echo "$grants $p50 $p99 $bad"
}

# until_holds NAME N: waits until resource NAME has N live holds, looking
# every 10 ms (a holder may hold for only 0.15 s), for at most 10 s.
until_holds() {
	local i
	for ((i = 0; i < 1000; i++)); do
		(($(db_sql "SELECT COUNT(*) FROM lr_holds WHERE resource = '$1'") == $2)) && return 0
		sleep 0.01
	done
	return 1
}

# handoff_round KIND OUT: one hand-off with one waiter (KIND: mutex,
# semaphore, writer, or flock for the harness alone); appends the time from
# the end of the freeing command to the start of the waiter's (µs) to OUT.
# Needs LOCKRUN, STAMP, db_sql, and the semaphore ho-sem of capacity 3. Not
# to be called in $(...) (BG_PIDS).
handoff_round() {
	local kind=$1 out=$2 f=$T/ho.rec
	local -a pids=()
	# later CMD...: CMD in the background, its pid kept for the wait.
	later() {
		"$@" &
		pids+=($!)
	}
	: >"$f"
	case $kind in
	mutex)
		later "$LOCKRUN" -x ho-mx -- sh -c "sleep 0.15; exec $STAMP $f end"
		until_holds ho-mx 1
		later "$LOCKRUN" -x ho-mx -- "$STAMP" "$f" start
		;;
	semaphore)
		# The youngest of three holders leaves first.
		later "$LOCKRUN" -s ho-sem -- sleep 0.6
		until_holds ho-sem 1
		later "$LOCKRUN" -s ho-sem -- sleep 0.6
		until_holds ho-sem 2
		later "$LOCKRUN" -s ho-sem -- sh -c "sleep 0.15; exec $STAMP $f end"
		until_holds ho-sem 3
		later "$LOCKRUN" -s ho-sem -- "$STAMP" "$f" start
		;;
	writer)
		# A writer behind three readers; the last of them leaves last.
		later "$LOCKRUN" --read ho-rw -- sleep 0.4
		later "$LOCKRUN" --read ho-rw -- sleep 0.4
		later "$LOCKRUN" --read ho-rw -- sh -c "sleep 0.6; exec $STAMP $f end"
		until_holds ho-rw 3
		later "$LOCKRUN" --write ho-rw -- "$STAMP" "$f" start
		;;
	flock)
		later flock "$T/ho.lock" sh -c "sleep 0.15; exec $STAMP $f end"
		sleep 0.05
		later flock "$T/ho.lock" "$STAMP" "$f" start
		;;
	esac
	BG_PIDS+=("${pids[@]}")
	wait "${pids[@]}"
	awk '$1 == "end" { e = $3 } $1 == "start" { s = $2 } END { print int((s - e) / 1000) }' "$f" \
		>>"$out"
}
