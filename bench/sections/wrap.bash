# shellcheck shell=bash
#
# bench/sections/wrap.bash: the "wrap" section of bench/run, sourced by it.
#
# Measures the fixed cost of one uncontended run with no network delay
# (process start, connect, acquire, spawn, release): `lockrun -s`,
# `lockrun -x`, flock(1) and `etcdctl lock`, each wrapping `true`.
# How: N_WRAP runs of each, round robin so that a change in the machine's
# load hits every tool alike, each timed as a shell sees it (timed, in
# bench/lib.bash).
# To the page: the table "Uncontended: wrapping `true`" (median, p90, ratio
# to flock and to etcdctl, failures) and a headline with the four medians.
# Uses bench/run's T, LOCKRUN, LOCKRUNCTL, ETCDCTL, N_WRAP, md and headline.

# wrap_cmd TOOL: one timed uncontended run of tool number TOOL (see names in
# section_wrap).
wrap_cmd() {
	case $1 in
	0) timed "$LOCKRUN" -s wrap-sem -- true ;;
	1) timed "$LOCKRUN" -x wrap-mx -- true ;;
	2) timed flock "$T/wrap.lock" true ;;
	3) timed "${ETCDCTL[@]}" lock wrap-mx -- true ;;
	esac
}

section_wrap() {
	local -a names=("lockrun -s" "lockrun -x" "flock" "etcdctl lock")
	local i j n=${#names[@]} p50 p90 fails
	local -A med=()
	"$LOCKRUNCTL" -c "$T/db/admin.conf" -q set wrap-sem 10
	for ((j = 0; j < n; j++)); do
		: >"$T/data/wrap.$j"
		echo 0 >"$T/data/wrap.$j.fail"
		wrap_cmd "$j" || true # warm the page cache and the servers
	done
	# Round robin, so that a change in the machine's load hits every tool.
	for ((i = 0; i < N_WRAP; i++)); do
		for ((j = 0; j < n; j++)); do
			if wrap_cmd "$j"; then
				echo "$WALL_US" >>"$T/data/wrap.$j"
			else
				echo $(($(<"$T/data/wrap.$j.fail") + 1)) >"$T/data/wrap.$j.fail"
			fi
		done
	done
	for ((j = 0; j < n; j++)); do
		read -r p50 _ < <(pct "$T/data/wrap.$j" 50 90)
		med[$j]=$p50
	done
	md "## Uncontended: wrapping \`true\`" ""
	md "$N_WRAP runs of each, round robin; wall time of the whole command, as a shell sees it." ""
	md "| tool | median ms | p90 ms | × flock | × etcdctl | failures |" "| --- | ---: | ---: | ---: | ---: | ---: |"
	for ((j = 0; j < n; j++)); do
		read -r p50 p90 < <(pct "$T/data/wrap.$j" 50 90)
		fails=$(<"$T/data/wrap.$j.fail")
		md "| \`${names[j]}\` | $(fmt_ms "$p50") | $(fmt_ms "$p90") | $(ratio "$p50" "${med[2]}") | $(ratio "$p50" "${med[3]}") | $fails |"
	done
	headline "Uncontended wrap of \`true\`, median: \`lockrun -s\` $(fmt_ms "${med[0]}") ms," \
		"\`lockrun -x\` $(fmt_ms "${med[1]}") ms, flock $(fmt_ms "${med[2]}") ms, \`etcdctl lock\` $(fmt_ms "${med[3]}") ms."
	md "" "How measured: \`lockrun -s wrap-sem -- true\` (a semaphore of 10), \`lockrun -x wrap-mx -- true\`," \
		"\`flock FILE true\` and \`etcdctl --endpoints=127.0.0.1:PORT lock wrap-mx -- true\`, timed with bash's" \
		"\`\$EPOCHREALTIME\` around each run. lockrun connects over TCP to the MariaDB on loopback" \
		"(127.0.0.1), as its provisioned lockrun.conf says. How to read: this is the fixed cost of" \
		"one run with no network delay (process start, connect, acquire, spawn, release);" \
		"the ratios divide each median by flock's and etcdctl's." ""
}
