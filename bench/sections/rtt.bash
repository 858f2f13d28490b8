# shellcheck shell=bash
#
# bench/sections/rtt.bash: the "rtt" section of bench/run, sourced by it.
#
# Measures how the wall time of one uncontended `lockrun -x` and
# `etcdctl lock` grows with the network's round-trip time: the slope is the
# number of sequential round trips a run makes.
# How: two lrproxy instances (tests/tools/lrproxy) in front of MariaDB and
# etcd hold every chunk DELAYS ms each way; the real RTT is measured through
# the proxy (rtt_probe); N_RTT runs per tool and delay, median; a least-
# squares fit of median wall time on measured RTT.
# To the page: the table per delay, the table of slopes and intercepts, a
# headline, the plot bench-rtt.png (rtt_plot) and two rows of the targets
# table (rtt_targets), from data/rtt.dat and data/rtt.slopes.
# Uses bench/run's T, DB_PORT, ETCD_PORT, LOCKRUN, LRPROXY, DELAYS, N_RTT,
# N_PROBE, BG_PIDS, md, headline, log and die.

# proxy_start NAME TARGET_PORT: an lrproxy in front of TARGET_PORT; its port
# is in PROXY_PORT, its control FIFO is $T/NAME.fifo. Not to be called in
# $(...): its pid must reach BG_PIDS in this shell, for the cleanup.
PROXY_PORT=
proxy_start() {
	local name=$1 target=$2 i
	"$LRPROXY" --target "$target" --port-file "$T/$name.port" \
		--control "$T/$name.fifo" </dev/null >/dev/null 2>"$T/$name.err" &
	BG_PIDS+=($!)
	for ((i = 0; i < 100; i++)); do
		[[ -s $T/$name.port ]] && break
		sleep 0.05
	done
	[[ -s $T/$name.port ]] || die "lrproxy $name did not start: $(cat "$T/$name.err")"
	PROXY_PORT=$(<"$T/$name.port")
}

# proxy_cmd NAME COMMAND: send COMMAND and wait until lrproxy acknowledged it
# (what it logs for the command, such as "turns N", comes before the "ok").
proxy_cmd() {
	local name=$1 line=$2 n i new
	n=$(wc -l <"$T/$name.fifo.log" 2>/dev/null || echo 0)
	echo "$line" >"$T/$name.fifo"
	for ((i = 0; i < 100; i++)); do
		new=$(tail -n +$((n + 1)) "$T/$name.fifo.log")
		grep -qxF "ok $line" <<<"$new" && return 0
		grep -qxF "error $line" <<<"$new" && die "lrproxy $name refused: $line"
		sleep 0.02
	done
	die "lrproxy $name did not acknowledge: $line"
}

# rtt_turns NAME CMD...: run CMD once through proxy NAME and print the
# commands it sent after an answer (lrproxy's turns): the round trips it
# waited out after the login, exactly.
rtt_turns() {
	local name=$1
	shift
	proxy_cmd "$name" turns
	"$@" </dev/null >/dev/null 2>&1 || true
	proxy_cmd "$name" turns
	grep '^turns ' "$T/$name.fifo.log" | tail -n 1 | cut -d' ' -f2
}

# rtt_probe PORT: the measured round-trip time through the proxy at PORT, in
# µs: (time of 51 statements - time of 1) / 50 on one client connection,
# median of N_PROBE. Relaying costs time too, so the real RTT is not exactly
# 2*delay.
rtt_probe() {
	local port=$1 i k=50 t0 t1 t2 many one
	local -a cli=(mariadb --no-defaults -h 127.0.0.1 -P "$port" -u lockrun
		"--password=$(<"$T/db/lockrun.pw")" -N -B lockrun)
	one="DO 1"
	many=$(printf 'DO 1;%.0s' $(seq $((k + 1))))
	: >"$T/data/probe"
	for ((i = 0; i < N_PROBE; i++)); do
		t0=$(now_us)
		"${cli[@]}" -e "$one" >/dev/null
		t1=$(now_us)
		"${cli[@]}" -e "$many" >/dev/null
		t2=$(now_us)
		echo $((((t2 - t1) - (t1 - t0)) / k)) >>"$T/data/probe"
	done
	pct "$T/data/probe" 50
}

section_rtt() {
	local db_px etcd_px d i rtt0 rtt lr et
	proxy_start pxdb "$DB_PORT"
	db_px=$PROXY_PORT
	proxy_start pxetcd "$ETCD_PORT"
	etcd_px=$PROXY_PORT
	sed "s/^port = .*/port = $db_px/" "$T/db/lockrun.conf" >"$T/proxy.conf"
	local -a lr_cmd=("$LOCKRUN" -c "$T/proxy.conf" -x rtt-mx -- true)
	local -a et_cmd=(etcdctl --endpoints="127.0.0.1:$etcd_px" lock rtt-mx -- true)
	: >"$T/data/rtt.dat"
	rtt_turns pxdb "${lr_cmd[@]}" >"$T/data/rtt.turns"
	rtt0=
	for d in "${DELAYS[@]}"; do
		proxy_cmd pxdb "delay $d"
		proxy_cmd pxetcd "delay $d"
		rtt=$(rtt_probe "$db_px")
		# The probe's own server time is not network: count from delay 0.
		rtt0=${rtt0:-$rtt}
		rtt=$((rtt - rtt0 < 0 ? 0 : rtt - rtt0))
		: >"$T/data/rtt.lr.$d"
		: >"$T/data/rtt.et.$d"
		timed "${lr_cmd[@]}" || true
		timed "${et_cmd[@]}" || true
		for ((i = 0; i < N_RTT; i++)); do
			timed "${lr_cmd[@]}" && echo "$WALL_US" >>"$T/data/rtt.lr.$d"
			timed "${et_cmd[@]}" && echo "$WALL_US" >>"$T/data/rtt.et.$d"
		done
		lr=$(pct "$T/data/rtt.lr.$d" 50)
		et=$(pct "$T/data/rtt.et.$d" 50)
		echo "$d $rtt $lr $et $(wc -l <"$T/data/rtt.lr.$d") $(wc -l <"$T/data/rtt.et.$d")" >>"$T/data/rtt.dat"
		log "rtt: delay $d ms: measured RTT $(fmt_ms "$rtt") ms, lockrun $(fmt_ms "$lr") ms, etcdctl $(fmt_ms "$et") ms"
	done
	proxy_cmd pxdb reset
	proxy_cmd pxetcd reset

	md "## Wall time against round-trip time" ""
	md "| lrproxy delay | nominal RTT ms | measured RTT ms | lockrun median ms | etcdctl median ms | lockrun ÷ etcdctl | lockrun ok/runs | etcdctl ok/runs |" \
		"| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
	# shellcheck disable=SC2034 # d is the loop's first column
	while read -r d rtt lr et nlr net; do
		md "| $d | $(awk -v d="$d" 'BEGIN { print 2 * d }') | $(fmt_ms "$rtt") | $(fmt_ms "$lr") | $(fmt_ms "$et") | $(ratio "$lr" "$et") | $nlr/$N_RTT | $net/$N_RTT |"
	done <"$T/data/rtt.dat"
	# Least squares of median wall time on measured RTT: the slope is the
	# number of sequential round trips, the intercept the cost at RTT 0.
	awk -v slopes="$T/data/rtt.slopes" '
		{ x[NR] = $2; a[NR] = $3; b[NR] = $4 }
		function fit(y, name,   i, sx, sy, sxx, sxy, n, s) {
			n = NR
			for (i = 1; i <= n; i++) { sx += x[i]; sy += y[i]; sxx += x[i] * x[i]; sxy += x[i] * y[i] }
			if (n * sxx - sx * sx == 0) { printf "| %s | - | - |\n", name; printf "- " > slopes; return }
			s = (n * sxy - sx * sy) / (n * sxx - sx * sx)
			printf "| %s | %.1f | %.2f |\n", name, s, (sy - s * sx) / n / 1000
			printf "%.1f ", s > slopes
		}
		END {
			print ""
			print "| tool | round trips (slope) | intercept ms |"
			print "| --- | ---: | ---: |"
			fit(a, "lockrun -x")
			fit(b, "etcdctl lock")
			printf "\n" > slopes
		}' "$T/data/rtt.dat" | md
	local s_lr s_et turns
	read -r s_lr s_et <"$T/data/rtt.slopes"
	turns=$(<"$T/data/rtt.turns")
	read -r d rtt lr et _ < <(tail -n 1 "$T/data/rtt.dat")
	md "" "Counted exactly (lrproxy \`turns\`: the commands a client sends after an answer, the" \
		"login and the goodbye left out): lockrun ${turns:--} after its login." ""
	headline "Round trips per uncontended run (slope of wall time against RTT): lockrun $s_lr," \
		"etcdctl $s_et; counted, lockrun's login and then ${turns:--}." \
		"At a measured RTT of $(fmt_ms "$rtt") ms: lockrun $(fmt_ms "$lr") ms," \
		"etcdctl $(fmt_ms "$et") ms."
	md "" "![wall time against RTT](bench-rtt.png)" ""
	md "How measured: two lrproxy instances (tests/tools/lrproxy) relay to MariaDB and to etcd;" \
		"\`delay D\` holds every chunk D ms in each direction, so the nominal RTT is 2·D." \
		"The real RTT is measured, and it is what the fit uses: the time of 51 \`DO 1\` statements" \
		"on one \`mariadb\` client connection through the proxy, less the time of 1, divided by" \
		"50, taken relative to delay 0 (median of $N_PROBE)." \
		"lockrun runs \`-x rtt-mx -- true\` with a config whose port is the proxy's; etcdctl runs" \
		"\`lock rtt-mx -- true\` with the proxy as its endpoint. $N_RTT runs per tool and delay, median." \
		"How to read: the slope of median wall time against RTT (least squares) is the number of" \
		"sequential round trips one run makes, handshake included; the intercept is its cost without" \
		"network delay." ""
}

# rtt_plot DIR: the gnuplot commands for bench-rtt.png in DIR, if the
# section has data (bench/run's plot_all draws every plot at once).
rtt_plot() {
	local out=$1
	[[ -s $T/data/rtt.dat ]] || return 0
	echo "set output '$out/bench-rtt.png'"
	echo "set title 'Wall time of one uncontended run against round-trip time'"
	echo "set xlabel 'measured RTT (ms)'; set ylabel 'median wall time (ms)'; set yrange [0:*]"
	echo "plot '$T/data/rtt.dat' using (\$2/1000):(\$3/1000) with linespoints title 'lockrun -x', \\"
	echo "     '' using (\$2/1000):(\$4/1000) with linespoints title 'etcdctl lock'"
	echo "set yrange [*:*]"
}

# rtt_targets: the section's rows of the targets table.
rtt_targets() {
	local f=$T/data a v n lr et
	if [[ -s $f/rtt.slopes ]]; then
		read -r a _ <"$f/rtt.slopes"
		target "round trips per uncontended run (slope)" "≤ 4.0" "$a" "$(calc "$a <= 4.0")"
		v=$(awk '$3 >= $4 { bad++ } END { print bad ? 0 : 1 }' "$f/rtt.dat")
		n=$(awk '{ printf "%s%.1f/%.1f", (NR > 1 ? ", " : ""), $3 / 1000, $4 / 1000 }' "$f/rtt.dat")
		target "faster than \`etcdctl lock\` at every RTT" "lockrun < etcdctl" "lockrun/etcdctl: $n ms" "$v"
		read -r _ _ lr et _ < <(tail -n 1 "$f/rtt.dat")
		target "at the largest RTT, \`etcdctl lock\` ÷ lockrun" "≥ 1.3" "$(calc "int(100 * $et / $lr + 0.5) / 100")" \
			"$(calc "$et >= 1.3 * $lr")"
	else
		target "round trips per uncontended run (slope)" "≤ 4.0" - ""
	fi
}
