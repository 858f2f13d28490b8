# shellcheck shell=bash
#
# bench/sections/rtt.bash: the "rtt" section of bench/run, sourced by it.
#
# Measures how the wall time of one uncontended `lockrun -x` and
# `etcdctl lock` grows with the network's round-trip time: the slope is the
# number of sequential round trips a run makes. Runs once per server of
# SERVERS; etcdctl runs beside lockrun on each, so that every ratio is of
# one stretch of time on one machine.
# How: two lrproxy instances (tests/tools/lrproxy) in front of the database
# server and etcd hold every chunk DELAYS ms each way; the real RTT is
# measured through the proxy (rtt_probe); N_RTT runs per tool and delay,
# median; a least-squares fit of median wall time on measured RTT.
# Each run writes data/rtt.SERVER.dat, .slopes and .turns; rtt_page, once
# all servers ran, writes the tables per server, the table of slopes and
# intercepts and a headline; rtt_plot draws bench-rtt.png and rtt_targets
# gives rows of the targets table, from the same files.
# Uses bench/run's T, DB_NAME, DB_PORT, ETCD_PORT, LOCKRUN, LRPROXY, DELAYS,
# N_RTT, N_PROBE, BG_PIDS, servers_run, db_label, md, headline, log and die.

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
	local db_px etcd_px d i rtt0 rtt lr et f=$T/data/rtt.$DB_NAME
	proxy_start "pxdb.$DB_NAME" "$DB_PORT"
	db_px=$PROXY_PORT
	proxy_start "pxetcd.$DB_NAME" "$ETCD_PORT"
	etcd_px=$PROXY_PORT
	sed "s/^port = .*/port = $db_px/" "$T/db/lockrun.conf" >"$T/proxy.conf"
	local -a lr_cmd=("$LOCKRUN" -c "$T/proxy.conf" -x rtt-mx -- true)
	local -a et_cmd=(etcdctl --endpoints="127.0.0.1:$etcd_px" lock rtt-mx -- true)
	: >"$f.dat"
	# Also the first login of the account on this server: MySQL's
	# caching_sha2_password then lets rtt_probe's client in without a key.
	rtt_turns "pxdb.$DB_NAME" "${lr_cmd[@]}" >"$f.turns"
	rtt0=
	for d in "${DELAYS[@]}"; do
		proxy_cmd "pxdb.$DB_NAME" "delay $d"
		proxy_cmd "pxetcd.$DB_NAME" "delay $d"
		rtt=$(rtt_probe "$db_px")
		# The probe's own server time is not network: count from delay 0.
		rtt0=${rtt0:-$rtt}
		rtt=$((rtt - rtt0 < 0 ? 0 : rtt - rtt0))
		: >"$f.lr.$d"
		: >"$f.et.$d"
		timed "${lr_cmd[@]}" || true
		timed "${et_cmd[@]}" || true
		for ((i = 0; i < N_RTT; i++)); do
			timed "${lr_cmd[@]}" && echo "$WALL_US" >>"$f.lr.$d"
			timed "${et_cmd[@]}" && echo "$WALL_US" >>"$f.et.$d"
		done
		lr=$(pct "$f.lr.$d" 50)
		et=$(pct "$f.et.$d" 50)
		echo "$d $rtt $lr $et $(wc -l <"$f.lr.$d") $(wc -l <"$f.et.$d")" >>"$f.dat"
		log "rtt on $DB_NAME: delay $d ms: measured RTT $(fmt_ms "$rtt") ms, lockrun $(fmt_ms "$lr") ms, etcdctl $(fmt_ms "$et") ms"
	done
	proxy_cmd "pxdb.$DB_NAME" reset
	proxy_cmd "pxetcd.$DB_NAME" reset
	# Least squares of median wall time on measured RTT: the slope is the
	# number of sequential round trips, the intercept (ms) the cost at RTT 0.
	# data/rtt.SERVER.slopes: "LOCKRUN_SLOPE ETCDCTL_SLOPE LOCKRUN_MS ETCDCTL_MS".
	awk '
		{ x[NR] = $2; a[NR] = $3; b[NR] = $4 }
		function fit(y, k,   i, sx, sy, sxx, sxy, n, s) {
			n = NR
			for (i = 1; i <= n; i++) { sx += x[i]; sy += y[i]; sxx += x[i] * x[i]; sxy += x[i] * y[i] }
			if (n * sxx - sx * sx == 0) { slope[k] = "-"; icpt[k] = "-"; return }
			s = (n * sxy - sx * sy) / (n * sxx - sx * sx)
			slope[k] = sprintf("%.1f", s)
			icpt[k] = sprintf("%.2f", (sy - s * sx) / n / 1000)
		}
		END {
			fit(a, "lr"); fit(b, "et")
			print slope["lr"], slope["et"], icpt["lr"], icpt["et"]
		}' "$f.dat" >"$f.slopes"
}

# rtt_servers: the servers the section ran on, in SERVERS order.
rtt_servers() {
	local s
	for s in $(servers_run); do
		[[ -s $T/data/rtt.$s.dat ]] && echo "$s"
	done
	return 0
}

# rtt_page: the section's part of the page, once every server ran: a table
# per server, the slopes and intercepts of all, a headline.
rtt_page() {
	local s d rtt lr et nlr net s_lr s_et i_lr i_et turns head='' at=''
	md "## Wall time against round-trip time" ""
	for s in $(rtt_servers); do
		md "### $(db_label "$s")" "" \
			"| lrproxy delay | nominal RTT ms | measured RTT ms | lockrun median ms | etcdctl median ms | lockrun ÷ etcdctl | lockrun ok/runs | etcdctl ok/runs |" \
			"| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
		while read -r d rtt lr et nlr net; do
			md "| $d | $(awk -v d="$d" 'BEGIN { print 2 * d }') | $(fmt_ms "$rtt") | $(fmt_ms "$lr") | $(fmt_ms "$et") | $(ratio "$lr" "$et") | $nlr/$N_RTT | $net/$N_RTT |"
		done <"$T/data/rtt.$s.dat"
		md ""
	done
	md "| server | tool | round trips (slope) | intercept ms | counted after the login |" \
		"| --- | --- | ---: | ---: | ---: |"
	for s in $(rtt_servers); do
		read -r s_lr s_et i_lr i_et <"$T/data/rtt.$s.slopes"
		turns=$(<"$T/data/rtt.$s.turns")
		md "| $(db_label "$s") | lockrun -x | $s_lr | $i_lr | ${turns:--} |" \
			"| $(db_label "$s") | etcdctl lock (beside it) | $s_et | $i_et | |"
		read -r _ rtt lr et _ < <(tail -n 1 "$T/data/rtt.$s.dat")
		head+="${head:+; }$(db_label "$s") $s_lr (etcdctl $s_et)"
		at+="${at:+; }$(db_label "$s") $(fmt_ms "$lr") ms against etcdctl's $(fmt_ms "$et") ms at $(fmt_ms "$rtt") ms"
	done
	md ""
	headline "Round trips per uncontended run (slope of wall time against RTT): $head." \
		"At the largest RTT: $at."
	md "![wall time against RTT](bench-rtt.png)" ""
	md "How measured: on each server in turn, two lrproxy instances (tests/tools/lrproxy) relay to" \
		"the server and to etcd; \`delay D\` holds every chunk D ms in each direction, so the nominal" \
		"RTT is 2·D. The real RTT is measured, and it is what the fit uses: the time of 51 \`DO 1\`" \
		"statements on one \`mariadb\` client connection through the proxy, less the time of 1," \
		"divided by 50, taken relative to delay 0 (median of $N_PROBE)." \
		"lockrun runs \`-x rtt-mx -- true\` with a config whose port is the proxy's; etcdctl runs" \
		"\`lock rtt-mx -- true\` with the proxy as its endpoint, in turn with lockrun. $N_RTT runs" \
		"per tool and delay, median. How to read: the slope of median wall time against RTT (least" \
		"squares) is the number of sequential round trips one run makes, handshake included; the" \
		"intercept is its cost without network delay. Counted exactly (lrproxy \`turns\`: the" \
		"commands a client sends after an answer, the login and the goodbye left out): the round" \
		"trips lockrun waits out after its login." ""
}

# rtt_plot DIR: the gnuplot commands for bench-rtt.png in DIR, if the
# section has data (bench/run's plot_all draws every plot at once): lockrun
# on each server, etcdctl beside the first.
rtt_plot() {
	local out=$1 s first='' sep=''
	for s in $(rtt_servers); do
		first=${first:-$s}
	done
	[[ -n $first ]] || return 0
	echo "set output '$out/bench-rtt.png'"
	echo "set title 'Wall time of one uncontended run against round-trip time'"
	echo "set xlabel 'measured RTT (ms)'; set ylabel 'median wall time (ms)'; set yrange [0:*]"
	printf 'plot '
	for s in $(rtt_servers); do
		printf "%s'%s' using (\$2/1000):(\$3/1000) with linespoints title 'lockrun -x, %s'" \
			"$sep" "$T/data/rtt.$s.dat" "$(db_label "$s")"
		sep=$', \\\n     '
	done
	printf "%s'%s' using (\$2/1000):(\$4/1000) with linespoints title 'etcdctl lock (beside %s)'\n" \
		"$sep" "$T/data/rtt.$first.dat" "$(db_label "$first")"
	echo "set yrange [*:*]"
}

# rtt_targets: the section's rows of the targets table, per server.
rtt_targets() {
	local f s a v n lr et on any=0
	for s in $(rtt_servers); do
		any=1
		f=$T/data/rtt.$s
		on=", $(db_label "$s")"
		read -r a _ <"$f.slopes"
		if [[ $a == - ]]; then
			target "round trips per uncontended run (slope)$on" "≤ 4.0" - ""
		else
			target "round trips per uncontended run (slope)$on" "≤ 4.0" "$a" "$(calc "$a <= 4.0")"
		fi
		v=$(awk '$3 >= $4 { bad++ } END { print bad ? 0 : 1 }' "$f.dat")
		n=$(awk '{ printf "%s%.1f/%.1f", (NR > 1 ? ", " : ""), $3 / 1000, $4 / 1000 }' "$f.dat")
		target "faster than \`etcdctl lock\` at every RTT$on" "lockrun < etcdctl" "lockrun/etcdctl: $n ms" "$v"
		read -r _ _ lr et _ < <(tail -n 1 "$f.dat")
		target "at the largest RTT, \`etcdctl lock\` ÷ lockrun$on" "≥ 1.3" "$(calc "int(100 * $et / $lr + 0.5) / 100")" \
			"$(calc "$et >= 1.3 * $lr")"
	done
	((any)) || target "round trips per uncontended run (slope)" "≤ 4.0" - ""
}
