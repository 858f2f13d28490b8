# shellcheck shell=bash
#
# bench/sections/contention.bash: the "contention" section of bench/run,
# sourced by it.
#
# Measures a hot lock: grants per second and release-to-start time with
# LOOPS concurrent loops, for `lockrun -x`, `etcdctl lock`, flock(1),
# `lockrun -s` (semaphore of 3) and `lockrun --write` behind `--read`; what
# each grant costs in CPU time, and so what bounds the rates. lockrun's rows
# run once per database server of the run (bench/run --servers); etcdctl's
# and flock's, which do not depend on it, only with the first.
# How: contend (bench/lib.bash) runs the loops of `TOOL LOCK -- stamp FILE`
# for CONT_SECS after CONT_WARM_US of start-up; cont_stats and rw_stats
# read the stamps, cont_cpu the machine's and the server's CPU ticks;
# cont_bound runs the same loops of the stamp helper alone. Then the mutex
# again at 8 loops (or the most measured) with a CPU hog beside it, one
# busy loop per CPU (cont_hog), for `lockrun -x` on each server and
# `etcdctl lock` once: both contestants share the CPUs with the same
# other work, as on a host that does more than lock; hog_row reads how much
# of the CPUs the hog took meanwhile (data/cont.hog).
# Each run appends its rows to data/cont.rows and its figures to
# data/cont.cpu; contention_page, once all servers ran, writes to the page:
# the contention table (lockrun's rows of each server side by side), the
# table of ratios, a headline (8 loops, or the most measured), what bounds
# the rates, the plot bench-contention.png (contention_plot) and two rows of
# the targets table (contention_targets, the first server's), from
# data/cont.dat; data/cont.bound (first server) for the bounds section.
# Uses bench/run's T, DB_NAME, DB_FIRST, DB_PID, ETCD_PID, ETCDCTL, LOCKRUN,
# LOCKRUNCTL, STAMP, LOOPS, CONT_SECS, CONT_WARM_US, SERVERS, md, headline,
# db_label, servers_run and log.

# rw_stats NAME: "GRANTS_PER_S WRITER_GRANTS_PER_S P50_US P99_US VIOLATIONS"
# for readers (tag r) and writers (tag w). A writer's hand-off is its start
# minus the latest end of any run that ended before it started: the release
# that let it in. A violation is a run that overlaps a writer's.
rw_stats() {
	local name=$1 f=$T/data/cont.$1 p50 p99 summary
	local w0=$((WIN0 * 1000)) w1=$((WIN1 * 1000))
	summary=$(awk -v w0="$w0" -v w1="$w1" -v s="$CONT_SECS" -v out="$T/data/r2s.$name" '
		{ tag[NR] = $1; st[NR] = $2; en[NR] = $3 }
		END {
			for (i = 1; i <= NR; i++) {
				if (st[i] >= w0 && st[i] < w1) { n++; if (tag[i] == "w") nw++ }
				if (tag[i] != "w") continue
				last = 0
				for (j = 1; j <= NR; j++) {
					if (j == i) continue
					if (en[j] <= st[i]) { if (en[j] > last) last = en[j] }
					else if (st[j] < en[i]) bad++
				}
				if (last > 0 && st[i] >= w0 && st[i] < w1)
					print int((st[i] - last) / 1000) > out
			}
			close(out)
			printf "%.1f %.1f %d\n", n / s, nw / s, bad
		}' "$f")
	[[ -f $T/data/r2s.$name ]] || : >"$T/data/r2s.$name"
	read -r p50 p99 < <(pct "$T/data/r2s.$name" 50 99)
	read -r g gw bad <<<"$summary"
	echo "$g $gw $p50 $p99 $bad"
}

# cont_line KEY LOOPS CELLS...: one row of the contention table, for the
# page: "KEY LOOPS SERVER" and a tab before the cells, one per column from
# the grants/s on, in data/cont.rows.
cont_line() {
	local key=$1 n=$2 cells
	shift 2
	cells=$(printf ' %s |' "$@")
	printf '%s %s %s\t%s\n' "$key" "$n" "$DB_NAME" "$cells" >>"$T/data/cont.rows"
}

# cont_row LOOPS KEY CAPACITY LABEL CMD...: LOOPS loops of CMD wrapping the
# stamp helper; adds a table row. Not to be called in $(...), so that the
# loops' pids reach BG_PIDS.
cont_row() {
	local n=$1 key=$2 cap=$3 label=$4 g p50 p99 bad fails busy cpu srv
	shift 4
	log "contention: $label, $n loops, on $DB_NAME"
	case $key in
	lr-*) CONT_SRV_PID=$DB_PID ;;
	et-*) CONT_SRV_PID=$ETCD_PID ;;
	*) CONT_SRV_PID= ;;
	esac
	contend "$key.$n" "$n" "$@" "$STAMP" "$T/data/cont.$key.$n"
	fails=$(wc -l <"$T/cont.fail")
	read -r g p50 p99 bad < <(cont_stats "$key.$n" "$cap")
	read -r busy cpu srv < <(cont_cpu "$T/data/cont.$key.$n")
	# With no more loops than permits nobody waits: no hand-off to measure.
	if ((n <= cap)); then
		p50=- p99=-
	fi
	# With the hog beside, the machine's CPU is the hog's as much as the
	# loops': only the server's share per grant means something.
	if [[ $key == *-hog ]]; then
		busy=- cpu=-
	fi
	cont_line "$key" "$n" "$g" "$(fmt_ms "$p50")" "$(fmt_ms "$p99")" "$fails" "$bad" "$busy" "$cpu" "$srv"
	echo "$DB_NAME $key $n $g $busy $cpu $srv" >>"$T/data/cont.cpu"
}

# cont_bound: what bounds the mutex's grants/s, from the CPU columns of the
# most contended mutex runs (8 loops if measured) on the first server: with
# the CPUs busy, each tool's grants/s is about the machine's CPU time over
# its CPU time per grant. Runs the same loops of the stamp helper alone, for
# what the harness costs; cont_bound_page writes it up.
cont_bound() {
	local n lb lc ls eb ec es fb fc hc
	n=$(cont_bound_loops)
	read -r lb lc ls < <(cont_cpu_row "$DB_NAME" lr-mx "$n")
	read -r eb ec es < <(cont_cpu_row "$DB_NAME" et-mx "$n")
	read -r fb fc _ < <(cont_cpu_row "$DB_NAME" fl-mx "$n")
	[[ -n $lc && -n $ec && -n $fc && $lc != - && $ec != - && $fc != - ]] || return 0
	# The harness alone: the same loops running the stamp helper, no lock.
	log "contention: $n loops of the stamp helper alone"
	CONT_SRV_PID=
	contend "null.$n" "$n" "$STAMP" "$T/data/cont.null.$n"
	read -r _ hc _ < <(cont_cpu "$T/data/cont.null.$n")
	# For the bounds section: loops, then CPU ms per grant of lockrun (and
	# its server's part), etcdctl (and etcd's), flock, the harness alone;
	# then how busy the CPUs were in lockrun's run (%).
	echo "$n $lc $ls $ec $es $fc $hc $lb" >"$T/data/cont.bound"
}

# cont_bound_loops: the loops the bounds are worked out at: 8 if measured,
# else the most.
cont_bound_loops() {
	if [[ " ${LOOPS[*]} " == *" 8 "* ]]; then echo 8; else echo "${LOOPS[-1]}"; fi
}

# cont_cpu_row SERVER KEY LOOPS: "BUSY_PCT CPU_MS SERVER_MS" of that run.
cont_cpu_row() {
	awk -v s="$1" -v k="$2" -v n="$3" '$1 == s && $2 == k && $3 == n { r = $5 " " $6 " " $7 } END { print r }' \
		"$T/data/cont.cpu"
}

# cont_bound_page: cont_bound's figures, for the page.
cont_bound_page() {
	local n lc ls ec es fc hc lb eb fb cpus s sb sc ss first=${SERVERS[0]} others=
	[[ -s $T/data/cont.bound ]] || return 0
	read -r n lc ls ec es fc hc lb <"$T/data/cont.bound"
	read -r eb _ < <(cont_cpu_row "$first" et-mx "$n")
	read -r fb _ < <(cont_cpu_row "$first" fl-mx "$n")
	cpus=$(nproc)
	per() { awk -v c="$cpus" -v x="$1" 'BEGIN { printf "%.0f", c * 1000 / x }'; }
	for s in $(servers_run); do
		[[ $s == "$first" ]] && continue
		read -r sb sc ss < <(cont_cpu_row "$s" lr-mx "$n")
		[[ -n ${sc:-} && $sc != - ]] || continue
		others+=" On $(db_label "$s") the CPUs were busy $sb% of the time, and each lockrun"
		others+=" grant cost $sc ms of CPU ($ss ms of it in the server): about $(per "$sc") grants/s."
	done
	md "" "What bounds it: with $n loops the machine's $cpus CPUs were busy $lb% of the time for" \
		"lockrun on $(db_label "$first"), $eb% for etcdctl and $fb% for flock. Each lockrun grant cost $lc ms of CPU" \
		"($ls ms of it in the database server), each etcdctl grant $ec ms ($es ms in etcd), each flock grant" \
		"$fc ms; of each, the loop's fork and the stamp helper take $hc ms (the same loops running" \
		"the helper alone). lockrun's own process is then $(awk -v a="$lc" -v s="$ls" -v h="$hc" \
		'BEGIN { printf "%.1f", a - s - h }') ms a grant (start-up, connecting, the calls, the spawn), and" \
		"flock's $(awk -v a="$fc" -v h="$hc" 'BEGIN { printf "%.1f", a - h }') ms." \
		"With the CPUs busy, grants/s is about $cpus × 1000 ms over the CPU time per grant:" \
		"$(per "$lc") for lockrun, $(per "$ec") for etcdctl, $(per "$fc") for flock.$others The ratios of" \
		"grants/s above are then ratios of CPU time per grant, not of time spent waiting."
}

# cont_hog: starts one busy loop per CPU (HOG_PIDS), the same for every
# contestant; cont_hog stop ends them.
cont_hog() {
	local i
	if [[ ${1:-} == stop ]]; then
		kill "${HOG_PIDS[@]}" 2>/dev/null || true
		wait "${HOG_PIDS[@]}" 2>/dev/null || true # 143: the TERM just sent
		HOG_PIDS=()
		return 0
	fi
	HOG_PIDS=()
	for ((i = 0; i < $(nproc); i++)); do
		bash -c 'while :; do :; done' &
		HOG_PIDS+=($!)
	done
	BG_PIDS+=("${HOG_PIDS[@]}")
}

# hog_ticks: the CPU time (user + system, clock ticks) the hog's loops used
# so far.
hog_ticks() {
	local p t=0
	for p in "${HOG_PIDS[@]}"; do
		t=$((t + $(proc_ticks "$p")))
	done
	echo "$t"
}

# hog_row LOOPS KEY LABEL CMD...: cont_row beside the hog, and the share of
# the CPUs the hog took meanwhile (start-up and end included), appended to
# data/cont.hog as "SERVER KEY PERCENT": what the contestant left it.
hog_row() {
	local n=$1 key=$2 h0 t0 h1 t1
	shift 2
	h0=$(hog_ticks) t0=$(now_us)
	cont_row "$n" "$key" 1 "$@"
	h1=$(hog_ticks) t1=$(now_us)
	awk -v s="$DB_NAME" -v k="$key" -v h=$((h1 - h0)) -v hz="$(getconf CLK_TCK)" \
		-v us=$((t1 - t0)) -v c="$(nproc)" \
		'BEGIN { printf "%s %s %.0f\n", s, k, 100 * h / hz / (us / 1e6) / c }' >>"$T/data/cont.hog"
}

section_contention() {
	local n g gw p50 p99 bad fails nw busy cpu srv
	"$LOCKRUNCTL" -c "$T/db/admin.conf" -q set cont-sem 3
	for n in "${LOOPS[@]}"; do
		cont_row "$n" lr-mx 1 "lockrun -x (mutex)" "$LOCKRUN" -x "cont-mx-$n" --
		if ((DB_FIRST)); then
			cont_row "$n" et-mx 1 "etcdctl lock" "${ETCDCTL[@]}" lock "cont-mx-$n" --
			cont_row "$n" fl-mx 1 "flock" flock "$T/cont-$n.lock"
		fi
		cont_row "$n" lr-sem 3 "lockrun -s (semaphore of 3)" "$LOCKRUN" -s cont-sem --

		log "contention: lockrun --write behind --read, $n loops, on $DB_NAME"
		# shellcheck disable=SC2034 # contend (bench/lib.bash) reads it
		CONT_SRV_PID=$DB_PID
		contend "lr-rw.$n" "$n" "$LOCKRUN" --read "cont-rw-$n" -- "$STAMP" "$T/data/cont.lr-rw.$n" r \
			--- "$LOCKRUN" --write "cont-rw-$n" -- "$STAMP" "$T/data/cont.lr-rw.$n" w
		fails=$(wc -l <"$T/cont.fail")
		read -r g gw p50 p99 bad < <(rw_stats "lr-rw.$n")
		read -r busy cpu srv < <(cont_cpu "$T/data/cont.lr-rw.$n")
		cont_line lr-rw "$n" "$g (writers $gw)" "$(fmt_ms "$p50")" "$(fmt_ms "$p99")" "$fails" "$bad" "$busy" "$cpu" "$srv"
		echo "$DB_NAME lr-rw $n $g $busy $cpu $srv" >>"$T/data/cont.cpu"
	done
	((DB_FIRST)) && cont_bound
	n=$(cont_bound_loops)
	log "contention: $n loops with a CPU hog beside ($(nproc) busy loops)"
	cont_hog
	hog_row "$n" lr-hog "lockrun -x (mutex), CPU hog beside" "$LOCKRUN" -x "cont-hog-$n" --
	if ((DB_FIRST)); then
		hog_row "$n" et-hog "etcdctl lock, CPU hog beside" "${ETCDCTL[@]}" lock "cont-hog-$n" --
	fi
	cont_hog stop
	return 0
}

# cont_g SERVER KEY LOOPS: the grants/s of that run, "-" if none.
cont_g() {
	awk -v s="$1" -v k="$2" -v n="$3" '$1 == s && $2 == k && $3 == n { g = $4 } END { print (g == "" ? "-" : g) }' \
		"$T/data/cont.cpu"
}

# contention_page: the section's part of the page, once every server ran;
# also data/cont.dat, for the plot and the targets: per loop count, the
# grants/s of lockrun -x, etcdctl, flock, lockrun -s and --read/--write on
# the first server, then lockrun -x on each other server.
contention_page() {
	local n key s label first=${SERVERS[0]} nw lr et fl line
	local -a srvs
	mapfile -t srvs < <(servers_run)
	[[ -s $T/data/cont.cpu ]] || die "contention: no figures"
	md "## Contention" ""
	md "Each loop runs its tool wrapping the stamp helper over and over for $CONT_SECS s." \
		"lockrun's rows ran once per database server, each alone in the same run (the others" \
		"stopped); etcdctl's and flock's do not depend on it and ran once, beside the first." ""
	md "| lock | server | loops | grants/s | release-to-start p50 ms | p99 ms | failures | overlaps | CPU busy % | CPU ms per grant | of it, server |" \
		"| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
	for n in "${LOOPS[@]}"; do
		nw=$((n / 8 > 1 ? n / 8 : 1))
		for key in lr-mx et-mx fl-mx lr-sem lr-rw lr-hog et-hog; do
			case $key in
			lr-hog) label="lockrun -x (mutex), CPU hog beside" ;;
			et-hog) label="etcdctl lock, CPU hog beside" ;;
			lr-mx) label="lockrun -x (mutex)" ;;
			et-mx) label="etcdctl lock" ;;
			fl-mx) label="flock" ;;
			lr-sem) label="lockrun -s (semaphore of 3)" ;;
			lr-rw) label="lockrun --write behind --read ($((n - nw)) + $nw loops; writer hand-off)" ;;
			esac
			for s in "${srvs[@]}"; do
				line=$(awk -F '\t' -v k="$key $n $s" '$1 == k { print $2 }' "$T/data/cont.rows")
				[[ -n $line ]] || continue
				case $key in
				et-mx | et-hog) md "| $label | etcd | $n |$line" ;;
				fl-mx) md "| $label | - | $n |$line" ;;
				*) md "| $label | $(db_label "$s") | $n |$line" ;;
				esac
			done
		done
	done
	md "" "| loops | server | lockrun -x ÷ etcdctl (grants/s) | lockrun -x ÷ flock |" "| ---: | --- | ---: | ---: |"
	: >"$T/data/cont.dat"
	for n in "${LOOPS[@]}"; do
		et=$(cont_g "$first" et-mx "$n") fl=$(cont_g "$first" fl-mx "$n")
		line="$n $(cont_g "$first" lr-mx "$n") $et $fl $(cont_g "$first" lr-sem "$n") $(cont_g "$first" lr-rw "$n")"
		for s in "${srvs[@]}"; do
			lr=$(cont_g "$s" lr-mx "$n")
			[[ $s == "$first" ]] || line+=" $lr"
			[[ $lr == - ]] && continue
			md "| $n | $(db_label "$s") | $(ratio "$lr" "$et") | $(ratio "$lr" "$fl") |"
		done
		echo "$line" >>"$T/data/cont.dat"
	done
	n=$(cont_bound_loops)
	line=
	for s in "${srvs[@]}"; do
		lr=$(cont_g "$s" lr-mx "$n")
		line+="${line:+, }lockrun on $(db_label "$s") $lr ($(ratio "$lr" "$(cont_g "$first" et-mx "$n")")× etcdctl, $(ratio "$lr" "$(cont_g "$first" fl-mx "$n")")× flock)"
	done
	headline "Mutex grants/s with $n loops: $line; etcdctl $(cont_g "$first" et-mx "$n"), flock $(cont_g "$first" fl-mx "$n")."
	line=
	for s in "${srvs[@]}"; do
		lr=$(cont_g "$s" lr-hog "$n")
		[[ $lr == - ]] || line+="${line:+, }lockrun on $(db_label "$s") $lr ($(ratio "$lr" "$(cont_g "$first" et-hog "$n")")× etcdctl)"
	done
	[[ -z $line ]] ||
		headline "With a CPU hog beside (one busy loop per CPU), mutex grants/s with $n loops: $line; etcdctl $(cont_g "$first" et-hog "$n")."
	cont_hog_page "$n"
	cont_bound_page
	md "" "![grants per second against contenders](bench-contention.png)" ""
	md "How measured: N loops (bash) each run \`TOOL LOCK -- stamp FILE\` until the deadline;" \
		"stamp (bench/stamp.c) appends its start and end times (CLOCK_REALTIME, ns) to FILE with" \
		"one write. grants/s counts the commands that started inside the $CONT_SECS s window," \
		"which opens $(fmt_ms $((CONT_WARM_US / 1000))) s after the loops start, so that their start-up is not counted." \
		"Release-to-start: with capacity C, the k-th permit to be freed (k-th end in time order)" \
		"is in use again at the (k+C)-th start; the figure is that start minus that end, for" \
		"starts inside the window. For a mutex it is the next start minus the previous end: the" \
		"end of the holder's command to the start of the next holder's command, which takes in" \
		"the release, the wake-up, the grant and the spawn. With no more loops than permits" \
		"nobody waits, so it is not given. For the read-write lock, loops are readers except" \
		"max(1, N/8) writers; a writer's hand-off is its start minus the latest end of any run" \
		"that ended before it (the release that let it in). lockrun and etcdctl wait in their" \
		"queues; flock(1) waits in the kernel. Overlaps counts pairs of commands that ran at" \
		"once against the lock's rules (any at all would be a bug). How to read: grants/s is the" \
		"throughput of a hot lock including process start-up; release-to-start is the dead time" \
		"between two holders. The rows with a CPU hog beside ran with one busy loop per CPU" \
		"(a shell's \`while :; do :; done\`) for the whole window, the same for both tools; their" \
		"machine-CPU columns are left out, as the hog's time is in them. Not compared: \`etcdctl lock\` has no counting semaphore and no" \
		"read-write lock, and flock(1)'s shared and exclusive locks favour neither side, so a" \
		"stream of readers can keep a writer out indefinitely." ""
}

# contention_plot DIR: the gnuplot commands for bench-contention.png in DIR, if the
# section has data (bench/run's plot_all draws every plot at once).
contention_plot() {
	local out=$1 s c=7 first=${SERVERS[0]} on=
	[[ -s $T/data/cont.dat ]] || return 0
	(($(servers_run | wc -l) > 1)) && on=", $(db_label "$first")"
	echo "set output '$out/bench-contention.png'"
	echo "set title 'Grants per second on one lock against concurrent loops'"
	echo "set xlabel 'concurrent loops'; set ylabel 'grants/s'; set logscale x 2"
	# A margin around the loop counts, so that the last tic is drawn.
	echo "set xtics ($(IFS=,; echo "${LOOPS[*]}")); set yrange [0:*]"
	echo "set xrange [${LOOPS[0]} * 0.8:${LOOPS[-1]} * 1.25]"
	echo "set datafile missing '-'"
	echo "plot '$T/data/cont.dat' using 1:2 with linespoints title 'lockrun -x$on', \\"
	echo "     '' using 1:3 with linespoints title 'etcdctl lock', \\"
	echo "     '' using 1:4 with linespoints title 'flock', \\"
	echo "     '' using 1:5 with linespoints title 'lockrun -s (capacity 3)$on', \\"
	printf '%s' "     '' using 1:6 with linespoints title 'lockrun --read/--write$on'"
	# lockrun -x on each other server: the columns after the first's.
	for s in $(servers_run); do
		[[ $s == "$first" ]] && continue
		printf ', \\\n%s' "     '' using 1:$c with linespoints title 'lockrun -x, $(db_label "$s")'"
		c=$((c + 1))
	done
	echo
	echo "unset logscale; set xtics autofreq; set xrange [*:*]; set yrange [*:*]"
}

# contention_targets: the section's rows of the targets table.
contention_targets() {
	local f=$T/data a b c
	if [[ -s $f/cont.dat ]] && read -r _ a b c _ < <(awk '$1 == 8' "$f/cont.dat") && [[ -n $c ]]; then
		target "mutex grants/s with 8 loops, × etcdctl" "≥ 3" "$(ratio "$a" "$b")" "$(calc "$b > 0 && $a >= 3 * $b")"
		target "mutex grants/s with 8 loops, × flock" "≥ 0.5" "$(ratio "$a" "$c")" "$(calc "$c > 0 && $a >= 0.5 * $c")"
	else
		target "mutex grants/s with 8 loops" "≥ 3× etcdctl, ≥ 0.5× flock" - ""
	fi
	a=$(cont_g "${SERVERS[0]}" lr-hog 8) b=$(cont_g "${SERVERS[0]}" et-hog 8)
	if [[ $a != - && $b != - ]]; then
		target "mutex grants/s with 8 loops and a CPU hog beside, × etcdctl" "≥ 1" "$(ratio "$a" "$b")" "$(calc "$b > 0 && $a >= $b")"
	else
		target "mutex grants/s with 8 loops and a CPU hog beside, × etcdctl" "≥ 1" - ""
	fi
}

# hog_left PERCENT GRANTS_PER_S: ms of CPU per grant in what a hog that
# took PERCENT of the CPUs left, at GRANTS_PER_S.
hog_left() {
	awk -v h="$1" -v g="$2" -v c="$(nproc)" \
		'BEGIN { if (g > 0) printf "%.1f", (100 - h) / 100 * c * 1000 / g; else printf "-" }'
}

# cont_hog_page LOOPS: how the CPUs were shared in the runs beside the hog
# (data/cont.hog): the share the hog took while each contestant ran.
cont_hog_page() {
	local n=$1 s h line='' per='' et eg first=${SERVERS[0]}
	[[ -s $T/data/cont.hog ]] || return 0
	et=$(awk '$2 == "et-hog" { print $3 }' "$T/data/cont.hog")
	eg=$(cont_g "$first" et-hog "$n")
	for s in $(servers_run); do
		h=$(awk -v s="$s" '$1 == s && $2 == "lr-hog" { print $3 }' "$T/data/cont.hog")
		[[ -n $h ]] || continue
		line+="${line:+, }$h% while lockrun ran on $(db_label "$s")"
		per+="${per:+, }$(hog_left "$h" "$(cont_g "$s" lr-hog "$n")") ms for lockrun on $(db_label "$s")"
	done
	[[ -n $et && $eg != - ]] && per+="${per:+, }$(hog_left "$et" "$eg") ms for etcdctl"
	md "" "Beside the hog, the hog's busy loops took ${line}${et:+, and ${et}% while etcdctl ran}" \
		"(their CPU time over the run's, start-up included, over $(nproc) CPUs). What the hog left," \
		"over the grants: $per per grant. How to read: the kernel shares a CPU between runnable" \
		"threads, not programs; etcd and etcdctl run many threads (Go's runtime), lockrun, its" \
		"command and the server's connection thread one each, so beside the same hog etcdctl's" \
		"side gets more of the machine. Its grants/s beside the hog are then a larger share of" \
		"the CPUs, not less CPU per grant." ""
}
