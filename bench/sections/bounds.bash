# shellcheck shell=bash
#
# bench/sections/bounds.bash: the "bounds" section of bench/run, sourced by
# it; runs last, after contention and cost.
#
# Measures what bounds the targets that are hard to reach here: the CPU time
# and peak RSS of starting alone, for `true`, flock(1), bench/floor (starts
# Connector/C, connects nowhere; and again with the least session a lock
# over SQL needs), `lockrun --version`, a whole
# `lockrun -x` run and `etcdctl lock`.
# How: bench/cpurun.c runs each command N_FLOOR times and adds up the CPU
# time wait4() reports; the server's CPU ticks meanwhile; peak RSS by
# rss_runs (bench/lib.bash).
# To the page: the start-up table; from it and the contention section's
# data/cont.bound, the budget of a grant against the grants/s targets and
# of memory against the RSS target; what was tried; and, under the targets
# table, a pointer to this section (bounds_note).
# Uses bench/run's T, DB_PID, ETCD_PID, ETCDCTL, LOCKRUN, CPURUN, FLOOR,
# N_FLOOR, N_RSS, md and log.

# floor_row KEY LABEL SERVER_PID CMD...: a row of the start-up table: CPU per
# run on an otherwise idle machine and peak RSS; with SERVER_PID, the
# server's CPU per run as well. Also appended to data/floor.
floor_row() {
	local key=$1 label=$2 spid=$3 cpu rss s0 s1 srv=- hz
	shift 3
	log "bounds: $label"
	"$@" </dev/null >/dev/null 2>&1 || true # warm the page cache
	s0=$(proc_ticks "$spid")
	cpu=$("$CPURUN" "$N_FLOOR" "$@") || cpu=-
	s1=$(proc_ticks "$spid")
	hz=$(getconf CLK_TCK)
	[[ -n $spid ]] && srv=$(awk -v t=$((s1 - s0)) -v n="$N_FLOOR" -v hz="$hz" \
		'BEGIN { printf "%.2f", 1000 * t / hz / n }')
	: >"$T/rss.floor"
	rss_runs "$T/rss.floor" "$@"
	rss=$(pct "$T/rss.floor" 50)
	echo "$key $cpu $srv $rss" >>"$T/data/floor"
	md "| $label | $cpu | $srv | $rss |"
}

# section_bounds: what bounds the targets that are hard to reach here, from
# start-up costs measured now and the contention and cost sections' data;
# then what was tried. Reads data/cont.bound if the contention section ran.
section_bounds() {
	local f=$T/data n lc ls ec fc hc lb
	: >"$f/floor"
	md "## What bounds the contention and memory figures" ""
	md "What one process costs here before and around its lock, each command run $N_FLOOR times" \
		"one after the other on an otherwise idle machine:" ""
	md "| program | CPU ms per run | the server's CPU ms per run | peak RSS KiB |" \
		"| --- | ---: | ---: | ---: |"
	floor_row true "\`true\`: a process that does nothing" "" /bin/true
	floor_row flock "\`flock FILE true\`" "" flock "$T/floor.lock" /bin/true
	floor_row floor "bench/floor: starts Connector/C, connects nowhere" "" "$FLOOR"
	# The same with the least session a lock over SQL needs, to lockrun's
	# server as lockrun's configuration names it.
	local conf=() k
	mapfile -t conf < <(awk -F' *= *' '$1 ~ /^(host|port|user|password_file|database|server_public_key)$/ { v[$1] = $2 }
		END { print v["host"]; print v["port"]; print v["user"]; print v["password_file"]; print v["database"]; print v["server_public_key"] }' \
		"$LOCKRUN_CONFIG")
	k=${conf[5]:-}
	floor_row session "bench/floor with a session: a TCP login, two \`DO 0\`, goodbye" "$DB_PID" \
		"$FLOOR" "${conf[@]:0:5}" ${k:+"$k"}
	floor_row version "\`lockrun --version\`: lockrun's libraries, no work" "" "$LOCKRUN" --version
	floor_row lockrun "\`lockrun -x NAME -- true\`" "$DB_PID" "$LOCKRUN" -x floor-mx -- /bin/true
	floor_row etcdctl "\`etcdctl lock NAME -- true\`" "$ETCD_PID" "${ETCDCTL[@]}" lock floor-mx -- /bin/true
	md "" "How measured: bench/cpurun.c starts each run with posix_spawn() and adds up the user" \
		"and system time that wait4() reports, which include the wrapped \`true\`; the server's" \
		"is the CPU time MariaDB or etcd used meanwhile (clock ticks, over all runs)." \
		"Peak RSS: GNU time's %M, median of $N_RSS. bench/floor (bench/floor.c) links" \
		"libmariadb, which brings in libssl and libcrypto, starts OpenSSL as lockrun does without" \
		"TLS and calls mysql_init() once, which starts the connector's library: any program using" \
		"Connector/C pays this much, the dynamic loader's relocations of libcrypto above all." \
		"With a session, it also logs in to the same server as lockrun, over TCP without TLS, runs" \
		"\`DO 0\` twice (one round trip each, as lockrun's acquire and release) and says goodbye:" \
		"the least any program pays that opens a session for its lock." ""
	local -A c=() v=() r=()
	local key cpu srv rss
	while read -r key cpu srv rss; do
		c[$key]=$cpu v[$key]=$srv r[$key]=$rss
	done <"$f/floor"
	num() { [[ $1 =~ ^[0-9]+(\.[0-9]+)?$ ]]; }
	if [[ -s $f/cont.bound ]] && read -r n lc ls ec _ fc hc lb <"$f/cont.bound" &&
		num "${c[floor]:-}" && num "${c[flock]:-}" && num "${c[true]:-}" &&
		num "${c[lockrun]:-}" && num "${v[lockrun]:-}"; then
		md "$(awk -v n="$n" -v lc="$lc" -v ls="$ls" -v ec="$ec" -v fc="$fc" -v hc="$hc" -v lb="$lb" \
			-v fl="${c[floor]}" -v fk="${c[flock]}" -v tr="${c[true]}" \
			-v un="${c[lockrun]}" -v us="${v[lockrun]}" '
			BEGIN {
				a = ec / 3; left = a - hc - ls; un -= tr
				printf "**Grants/s with %d loops, 3× etcdctl.** The CPUs were busy %d%% of the time in lockrun'"'"'s run (see Contention), so ", n, lb
				printf "grants/s is the CPU time of the machine over the CPU time of a grant. 3× etcdctl would allow "
				printf "a lockrun grant %.1f ms (a third of etcdctl'"'"'s %.1f ms). The loop and the stamp helper take %.1f ms ", a, ec, hc
				printf "of each grant and MariaDB %.1f ms, which leaves %.1f ms for the lockrun process; it took %.1f ms. ", ls, left, lc - ls - hc
				printf "On an idle CPU, starting Connector/C alone costs %.2f ms (bench/floor) and a whole ", fl
				printf "uncontended run %.2f ms (its wrapped true not counted), with %.2f ms more in MariaDB, about a third of it (by a perf ", un, us
				printf "profile of such runs, taken apart from this page) loading the stored routines that every new session parses. "
				if (left < fl)
					printf "The budget is smaller than what merely starting Connector/C costs, so this goal is out of reach here for any design in which each grant starts a new process that loads it."
				else if (left < un)
					printf "The budget is smaller than one uncontended run, so this goal is out of reach here while each grant starts a new process that loads Connector/C and opens a session."
				else
					printf "The budget is larger than an uncontended run: contention itself costs the difference."
				printf "\n\n"
				b = 2 * fc
				printf "**Grants/s with %d loops, half of flock'"'"'s.** That allows %.1f ms a grant (twice flock'"'"'s %.1f ms); ", n, b, fc
				if (lc <= b) printf "lockrun took %.1f ms, within it.", lc
				else printf "lockrun took %.1f ms, %.1f ms (%.0f%%) over. A flock grant is one small process; a lockrun grant also starts Connector/C (bench/floor: %.2f ms on an idle CPU, against %.2f ms for a whole flock run) and has MariaDB answer its calls (%.1f ms).", lc, lc - b, 100 * (lc - b) / b, fl, fk, ls
				printf "\n"
			}' | fmt -w 92)" ""
	fi
	if num "${c[floor]:-}" && num "${c[session]:-}" && num "${c[lockrun]:-}" && num "${c[true]:-}" &&
		num "${v[session]:-}" && num "${v[lockrun]:-}"; then
		md "$(awk -v fl="${c[floor]}" -v se="${c[session]}" -v lr="${c[lockrun]}" -v tr="${c[true]}" \
			-v sv="${v[session]}" -v lv="${v[lockrun]}" '
			BEGIN {
				printf "**Client CPU ≤ 1.25× bench/floor.** A whole run costs %.2f ms, %.2f ms without its wrapped `true`: ", lr, lr - tr
				printf "%.2f× bench/floor (%.2f ms). The least session any program needs for a lock over SQL, ", (lr - tr) / fl, fl
				printf "a login over TCP and two statements that touch nothing, costs %.2f ms (%.2f× bench/floor), ", se, se / fl
				printf "so lockrun spends %.2f ms beyond it: the event loop, the child'"'"'s spawn, the threads that run the first ", lr - tr - se
				printf "call of each statement, and the calls'"'"' own work. "
				printf "In the server, that session costs %.2f ms and a whole run %.2f ms (%.1f×): the rest is the routines, ", sv, lv, (sv > 0 ? lv / sv : 0)
				printf "their parse in each new session above all.\n"
			}' | fmt -w 92)" ""
	fi
	if num "${r[floor]:-}" && num "${r[version]:-}" && num "${r[lockrun]:-}" && num "${r[flock]:-}"; then
		md "$(awk -v fl="${r[floor]}" -v ver="${r[version]}" -v lr="${r[lockrun]}" -v fk="${r[flock]}" \
			-v se="${r[session]:-0}" '
			BEGIN {
				printf "**Peak RSS ≤ 4096 KiB.** A program that only starts Connector/C peaks at %d KiB ", fl
				printf "(bench/floor) and loading lockrun'"'"'s libraries alone at %d KiB (`lockrun --version`); ", ver
				if (se > 0) printf "with the least session (a TCP login, two statements) bench/floor peaks at %d KiB; ", se
				printf "a whole run peaks at %d KiB, %d KiB above bench/floor. ", lr, lr - fl
				if (fl >= 4096) printf "The floor alone is over the goal, so no program built on Debian'"'"'s Connector/C meets it here."
				else if (se >= 4096) printf "The floor with a session is over the goal, so no program that opens a session with Debian'"'"'s Connector/C meets it here."
				else printf "That leaves %d KiB above the floor for libuv, inih, lockrun itself, its heap, one connection and the spawn.", 4096 - fl
				printf " Most of these pages are the shared libraries'"'"' (see Cost): other processes map the same ones, and flock maps %d KiB of its own libraries and libc.\n", fk
			}' | fmt -w 92)" ""
	fi
	md "What was tried, with the figures measured when each change was made (\`git log\` has them):" "" \
		"- OpenSSL is started without its configuration file, error strings and cipher and digest" \
		"  tables unless TLS may be used. Connector/C starts OpenSSL in its first \`mysql_init()\`" \
		"  even for a socket without TLS: this was a third of a run's instructions, and peak RSS" \
		"  went from about 6.5 to 4.7 MiB." \
		"- A numeric host is converted without libuv's thread pool, which saves its four threads." \
		"- libm is not linked (it held only \`ceil\` and \`llround\`): about 0.3 MiB of RSS." \
		"- The server parses less per session: the acquire and the release call their helper" \
		"  routines only when there is work for them, the first acquire of a session went from 4.5 to" \
		"  4.0 ms of server time and the first release from 1.5 to 1.1 ms; a run that lasts over" \
		"  20 ms has the release's routines parsed while its command runs." \
		"- Linking Connector/C and OpenSSL statically (from Debian's -dev packages, no PIE) saved about" \
		"  1 ms of CPU and 0.36 MiB per run. Not shipped: every OpenSSL security fix would then need" \
		"  a new lockrun build, and Debian's policy is to link its shared libraries." \
		"- Connector/C's start-up lookup of the \`mysql\` service port is answered by lockrun itself" \
		"  (src/servent.c: that one question gets \"no such service\", so the connector keeps 3306;" \
		"  every other lookup goes to libc). glibc's answer searched the library path for an NSS" \
		"  module that Debian's default nsswitch.conf names and does not install, then read" \
		"  /etc/services: 0.15 ms and some 200 system calls a run. bench/floor still pays it." ""
}

# bounds_note: under the targets table, where the bounds are, if this section
# ran.
bounds_note() {
	local f=$T/data
	if [[ -s $f/floor ]]; then
		echo "What bounds the contention and memory figures, and what was tried, is at the end of the page."
		echo
	fi
}
