# shellcheck shell=bash
#
# bench/sections/scale.bash: the "scale" section of bench/run, sourced by it.
#
# Measures whether an uncontended semaphore acquire slows down with what the
# tables hold: HOLDERS live holders of the semaphore, then OTHER_RES
# unrelated resources and OLD_GRANTS finished grants as well.
# How: the holders are inserted with SQL as lockrun writes them
# (add_holds), the bulk rows from MariaDB's SEQUENCE engine; each point is
# the median of N_SCALE timed runs of `lockrun -s scale-sem -- true`
# (scale_point).
# To the page: the table "Scale", a headline, the plot bench-holders.png
# (scale_plot) and a row of the targets table (scale_targets), from
# data/scale.dat.
# Uses bench/run's T, LOCKRUN, LOCKRUNCTL, HOLDERS, N_SCALE, OTHER_RES,
# OLD_GRANTS, md, headline, db_sql and log.
# shellcheck disable=SC2153 # HOLDERS is bench/run's; holders a local

SCALE_HOLDS=0

# add_holds K: insert live holders of semaphore scale-sem up to K, as lockrun
# would: one lr_grants row and one lr_holds row each, expiring in a day, with
# fences above the resource's and the resource's fence moved past them, and
# their permits on its `used` (the procedures keep that count, no trigger).
add_holds() {
	local k=$1 from=$((SCALE_HOLDS + 1))
	((k >= from)) || return 0
	db_sql "START TRANSACTION;
		SELECT fence INTO @f FROM lr_resources WHERE name = 'scale-sem' FOR UPDATE;
		INSERT INTO lr_grants (request_id, host, pid, os_user, db_user, command, ttl_ms, acquired_at)
			SELECT CONCAT('bh', LPAD(seq, 30, '0')), 'bench-holder', seq, 'bench', 'lockrun@%',
				'sleep', 86400000, NOW(6)
			FROM seq_${from}_to_${k};
		INSERT INTO lr_holds (resource, grant_id, permits, fence, expires_at)
			SELECT 'scale-sem', g.id, 1, @f + CAST(SUBSTRING(g.request_id, 3) AS UNSIGNED),
				NOW(6) + INTERVAL 1 DAY
			FROM lr_grants g
			WHERE g.request_id BETWEEN CONCAT('bh', LPAD($from, 30, '0')) AND CONCAT('bh', LPAD($k, 30, '0'));
		UPDATE lr_resources SET fence = @f + $k, used = used + $((k - from + 1)), updated_at = NOW(6)
			WHERE name = 'scale-sem';
		COMMIT"
	SCALE_HOLDS=$k
}

# scale_point LABEL KEY: time N_SCALE acquires of one more permit of
# scale-sem and add a table row (the counts are read after the runs).
SCALE_BASE=
scale_point() {
	local label=$1 f=$T/data/scale.$2 i p50 p90 holders other grants
	: >"$f"
	timed "$LOCKRUN" -s scale-sem -- true || true
	for ((i = 0; i < N_SCALE; i++)); do
		timed "$LOCKRUN" -s scale-sem -- true && echo "$WALL_US" >>"$f"
	done
	read -r p50 p90 < <(pct "$f" 50 90)
	SCALE_BASE=${SCALE_BASE:-$p50}
	read -r holders other grants < <(db_sql "SELECT
		(SELECT COUNT(*) FROM lr_holds WHERE resource = 'scale-sem'),
		(SELECT COUNT(*) FROM lr_resources WHERE name <> 'scale-sem'),
		(SELECT COUNT(*) FROM lr_grants WHERE ended_at IS NOT NULL)")
	md "| $label | $holders | $other | $grants | $(fmt_ms "$p50") | $(fmt_ms "$p90") | $(ratio "$p50" "$SCALE_BASE") | $(wc -l <"$f")/$N_SCALE |"
	echo "$holders $p50" >>"$T/data/scale.dat"
}

section_scale() {
	local h t0 t1 p50
	"$LOCKRUNCTL" -c "$T/db/admin.conf" -q set scale-sem 1000000
	: >"$T/data/scale.dat"
	md "## Scale: acquire latency against what is in the tables" ""
	md "| case | live holders | other resources | finished grants | median ms | p90 ms | × first row | ok/runs |" \
		"| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
	for h in "${HOLDERS[@]}"; do
		log "scale: $h live holders"
		add_holds "$h"
		scale_point "live holders" "h$h"
	done
	log "scale: adding $OTHER_RES resources and $OLD_GRANTS finished grants"
	t0=$(now_us)
	db_sql "INSERT INTO lr_resources (name, kind, capacity)
			SELECT CONCAT('other-', seq), 'mutex', 1 FROM seq_1_to_$OTHER_RES;
		INSERT INTO lr_grants (request_id, host, pid, os_user, db_user, command, ttl_ms,
				acquired_at, ended_at, end_reason, exit_status)
			SELECT CONCAT('bf', LPAD(seq, 30, '0')), CONCAT('host-', seq % 100), seq % 65536,
				'bench', 'lockrun@%', 'true', 30000,
				NOW(6) - INTERVAL seq SECOND, NOW(6) - INTERVAL seq SECOND + INTERVAL 5000 MICROSECOND,
				'exited', 0
			FROM seq_1_to_$OLD_GRANTS"
	t1=$(now_us)
	log "scale: bulk insert took $(fmt_ms $((t1 - t0))) ms"
	scale_point "live holders and bulk rows" bulk
	# Back to one live holder, with the bulk rows still there.
	db_sql "DELETE FROM lr_holds WHERE resource = 'scale-sem' AND grant_id <>
		(SELECT id FROM lr_grants WHERE request_id = CONCAT('bh', LPAD(1, 30, '0')));
		UPDATE lr_resources SET used = (SELECT COUNT(*) FROM lr_holds WHERE resource = 'scale-sem')
		WHERE name = 'scale-sem'"
	scale_point "one live holder and bulk rows" bulk1
	local hmax
	read -r hmax p50 < <(sed -n "${#HOLDERS[@]}p" "$T/data/scale.dat")
	headline "Uncontended semaphore acquire with $hmax live holders: $(ratio "$p50" "$SCALE_BASE")×" \
		"the time with one ($(fmt_ms "$p50") ms against $(fmt_ms "$SCALE_BASE") ms)."
	md "" "![acquire latency against live holders](bench-holders.png)" ""
	md "How measured: semaphore scale-sem has capacity 1,000,000; its live holders are inserted" \
		"with SQL as lockrun would write them (an lr_grants row and an lr_holds row each, expiring" \
		"in a day, fences above the resource's). Each point is the median of $N_SCALE runs of" \
		"\`lockrun -s scale-sem -- true\` (one more permit, uncontended) after one warm-up run." \
		"Then $OTHER_RES unrelated mutexes and $OLD_GRANTS finished grants are added with" \
		"INSERT ... SELECT from MariaDB's SEQUENCE engine (took $(fmt_ms $((t1 - t0))) ms), and the" \
		"acquire is timed again with all holders, and with all but one deleted. How to read:" \
		"× first row is the cost relative to one live holder; a flat column means the acquire" \
		"does not grow with what the tables hold." ""
}

# scale_plot DIR: the gnuplot commands for bench-holders.png in DIR, if the
# section has data (bench/run's plot_all draws every plot at once).
scale_plot() {
	local out=$1
	[[ -s $T/data/scale.dat ]] || return 0
	# Only the holder steps: the rows with bulk data are in the table.
	head -n "${#HOLDERS[@]}" "$T/data/scale.dat" >"$T/data/scale.plot"
	echo "set output '$out/bench-holders.png'"
	echo "set title 'Uncontended semaphore acquire against live holders'"
	echo "set xlabel 'live holders of the semaphore'; set ylabel 'median wall time (ms)'"
	echo "set logscale x 10; set yrange [0:*]"
	echo "plot '$T/data/scale.plot' using 1:(\$2/1000) with linespoints title 'lockrun -s'"
	echo "unset logscale; set yrange [*:*]"
}

# scale_targets: the section's row of the targets table.
scale_targets() {
	local f=$T/data a b n
	if [[ -s $f/scale.dat ]] && (($(wc -l <"$f/scale.dat") >= ${#HOLDERS[@]})); then
		read -r _ a < <(head -n 1 "$f/scale.dat")
		read -r n b < <(sed -n "${#HOLDERS[@]}p" "$f/scale.dat")
		target "acquire with $n live holders, × one holder" "≤ 1.5" "$(ratio "$b" "$a")" "$(calc "$b <= 1.5 * $a")"
	else
		target "acquire with 10,000 live holders, × one holder" "≤ 1.5" - ""
	fi
}
