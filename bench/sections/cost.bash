# shellcheck shell=bash
#
# bench/sections/cost.bash: the "cost" section of bench/run, sourced by it.
#
# Measures what one lockrun costs the machine: the peak RSS of a run beside
# flock(1) and etcdctl, the statements an idle holder sends, and where a
# running lockrun's resident memory is.
# How: GNU time's %M over N_RSS runs of each (rss_runs, in bench/lib.bash);
# the server's Questions counter over IDLE_SECS while one holder sleeps,
# starting IDLE_SKIP s after its grant; /proc/PID/smaps of a lockrun, read
# by its own command (cost_map).
# To the page: the table "Cost", the idle holder's statements, the table of
# mappings, a headline and two rows of the targets table, the peak RSS
# (cost_targets_memory) and the statements per renewal (cost_targets_idle),
# from data/rss.* and data/idle.
# Uses bench/run's T, LOCKRUN, ETCDCTL, N_RSS, IDLE_SECS, IDLE_SKIP, Q_SELF,
# BG_PIDS, md, headline, held, status_var, log and die.

section_cost() {
	local q0 q1 t0 t1 holder d
	: >"$T/data/rss.lr"
	: >"$T/data/rss.fl"
	: >"$T/data/rss.et"
	rss_runs "$T/data/rss.lr" "$LOCKRUN" -x cost-mx -- true
	rss_runs "$T/data/rss.fl" flock "$T/cost.lock" true
	rss_runs "$T/data/rss.et" "${ETCDCTL[@]}" lock cost-mx -- true
	# The window starts IDLE_SKIP s after the grant and so, with renewals
	# every 10 s from the grant on, holds whole renewals, none at its edges:
	# 3 in a 30 s window starting 5 s in; none in the smoke run's.
	log "cost: one idle holder for $((IDLE_SKIP + IDLE_SECS)) s"
	/usr/bin/time -f %M -o "$T/rss.idle" "$LOCKRUN" -x cost-idle -- sleep $((IDLE_SKIP + IDLE_SECS + 2)) \
		</dev/null >/dev/null 2>&1 &
	holder=$!
	BG_PIDS+=("$holder")
	wait_until 30 held cost-idle || die "the idle holder did not get its lock"
	sleep "$IDLE_SKIP"
	q0=$(status_var Questions)
	t0=$(now_us)
	sleep "$IDLE_SECS"
	q1=$(status_var Questions)
	t1=$(now_us)
	# Only our second status read is inside the delta.
	d=$((q1 - q0 - Q_SELF))
	echo "$d $((IDLE_SECS / 10))" >"$T/data/idle"
	wait "$holder" || true
	md "## Cost" ""
	md "| program | peak RSS KiB (median of $N_RSS) | max |" "| --- | ---: | ---: |"
	md "| \`lockrun -x cost-mx -- true\` | $(pct "$T/data/rss.lr" 50) | $(pct "$T/data/rss.lr" 100) |"
	md "| \`lockrun\` holding for $((IDLE_SKIP + IDLE_SECS + 2)) s (renewals included) | $(tail -n 1 "$T/rss.idle") | |"
	md "| \`flock FILE true\` | $(pct "$T/data/rss.fl" 50) | $(pct "$T/data/rss.fl" 100) |"
	md "| \`etcdctl lock NAME -- true\` | $(pct "$T/data/rss.et" 50) | $(pct "$T/data/rss.et" 100) |"
	local renewals=$((IDLE_SECS / 10)) per=
	((renewals > 0)) && per=$(awk -v d="$d" -v r="$renewals" 'BEGIN { printf ", %.1f per renewal", d / r }')
	md "" "One idle holder (\`--ttl\` default 30 s, so renewed every 10 s): $d statements at the server" \
		"in $(fmt_ms $((t1 - t0))) ms ($renewals renewals), that is" \
		"$(awk -v d="$d" -v us=$((t1 - t0)) 'BEGIN { printf "%.2f", d / (us / 1e6) }') statements/s$per." ""
	headline "Peak RSS of \`lockrun -x NAME -- true\`: $(pct "$T/data/rss.lr" 50) KiB (flock" \
		"$(pct "$T/data/rss.fl" 50) KiB, etcdctl $(pct "$T/data/rss.et" 50) KiB). One idle holder:" \
		"$d statements in $IDLE_SECS s$per."
	md "How measured: peak RSS is GNU time's %M (maximum resident set size) of the whole" \
		"process; lockrun's includes the shared libraries it maps (libmariadb, libcrypto," \
		"libssl, libuv). Statements: the server's Questions counter over $IDLE_SECS s while one" \
		"\`lockrun -x cost-idle -- sleep\` holds its lock and nothing else runs, less this" \
		"script's own status read. The window starts $IDLE_SKIP s after the grant, so that with" \
		"renewals every 10 s it holds whole renewals and none at its edges. How to read: the" \
		"statements are the holder's renewals; between renewals an idle holder sends nothing." ""
	cost_map
}

# cost_map: where a running lockrun's resident memory is, by mapping, read
# from its /proc/PID/smaps by its own command; and what of it is its own
# (private dirty) and its proportional share (PSS).
cost_map() {
	local f=$T/data/smaps rss pss priv
	# shellcheck disable=SC2016 # $PPID is the command's, expanded by sh.
	"$LOCKRUN" -x cost-map -- sh -c 'cat /proc/$PPID/smaps' >"$f" 2>/dev/null || return 0
	md "Where the resident memory of a \`lockrun -x\` is while its command runs (its" \
		"/proc/PID/smaps, read by the command):" "" "| mapping | RSS KiB |" "| --- | ---: |"
	awk '/^[0-9a-f]+-[0-9a-f]+ / { m = (NF >= 6 ? $6 : "[anonymous]"); sub(/.*\//, "", m) }
		/^Rss:/ { r[m] += $2 } END { for (k in r) if (r[k] > 0) print r[k], k }' "$f" |
		sort -rn | head -n 8 | while read -r kb m; do md "| $m | $kb |"; done
	read -r rss pss priv < <(awk '/^Rss:/ { r += $2 } /^Pss:/ { p += $2 }
		/^Private_Dirty:/ { d += $2 } END { print r, p, d }' "$f")
	md "" "In all $rss KiB resident; its proportional share (PSS) is $pss KiB, and $priv KiB" \
		"are its own (private dirty); the rest are pages of the shared libraries, which" \
		"other processes map too. Connector/C brings in libssl and libcrypto, with or without" \
		"TLS." ""
}

# cost_targets_memory: the section's row of the targets table on peak RSS.
cost_targets_memory() {
	local f=$T/data a
	if [[ -s $f/rss.lr ]]; then
		a=$(pct "$f/rss.lr" 50)
		target "peak RSS of \`lockrun -x NAME -- true\`" "≤ 4096 KiB" "$a KiB" "$(calc "$a <= 4096")"
	else
		target "peak RSS" "≤ 4096 KiB" - ""
	fi
}

# cost_targets_idle: the section's row of the targets table on an idle holder
# (after the server section's rows).
cost_targets_idle() {
	local f=$T/data a b
	if [[ -s $f/idle ]] && read -r a b <"$f/idle" && ((b > 0)); then
		target "statements per renewal interval, one idle holder" "≤ 1" "$(calc "$a / $b")" "$(calc "$a <= $b")"
	else
		target "statements per renewal interval, one idle holder" "≤ 1" - ""
	fi
}
