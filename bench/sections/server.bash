# shellcheck shell=bash
#
# bench/sections/server.bash: the "server" section of bench/run, sourced by
# it.
#
# Measures what a run costs the database server in its own CPU time, beside
# a plain-SQL lock (a row, a locking read and a conditional update) and
# etcd's server: cold runs (a new process and connection each, as every
# lockrun run is) and warm operations on one connection.
# How: the server's user + system ticks from /proc/PID/stat before and
# after N_SRV cold runs (N_SRV / 5 for etcd) or N_SRV_WARM statements fed to
# one `mariadb` client, less what it spends idle over SRV_IDLE_SECS.
# To the page: the table "Server cost" (cold, then warm), what a fleet of
# idle holders costs, where a cold run's server time goes, a headline and
# three rows of the targets table (server_targets), from data/srv.*.
# Uses bench/run's T, DB_PID, DB_PORT, ETCD_PID, ETCDCTL, LOCKRUN, N_SRV,
# N_SRV_WARM, SRV_IDLE_SECS, smoke, md, headline, db_sql, log and die.
# shellcheck disable=SC2154 # smoke is bench/run's

# srv_ticks PID: CPU clock ticks (user + system) PID has used.
srv_ticks() { proc_ticks "$1"; }

# srv_ms TICKS N US IDLE: milliseconds of CPU per item, TICKS over N items
# in US microseconds, less what the server spends idle (IDLE ticks a
# second: its background threads, InnoDB's purge of earlier sections'
# rows) over that time; never below 0.
srv_ms() {
	awk -v t="$1" -v n="$2" -v us="$3" -v idle="${4:-0}" -v hz="$(getconf CLK_TCK)" \
		'BEGIN { v = (t - idle * us / 1e6) * 1000 / hz / n; printf "%.3f", v < 0 ? 0 : v }'
}

# srv_idle PID SECS: the ticks a second PID uses while nothing runs.
srv_idle() {
	local a b
	a=$(srv_ticks "$1")
	sleep "$2"
	b=$(srv_ticks "$1")
	awk -v d=$((b - a)) -v s="$2" 'BEGIN { printf "%.3f", d / s }'
}

# srv_cold OUT PID N CMD...: runs CMD N times, one after the other; writes to
# OUT the CPU ms per run that PID used meanwhile, less its idle rate
# ($SRV_IDLE for the database, $SRV_IDLE_ETCD for etcd). Fails if a run
# failed.
srv_cold() {
	local out=$1 pid=$2 n=$3 i a b t0 idle=$SRV_IDLE
	shift 3
	[[ $pid == "$DB_PID" ]] || idle=$SRV_IDLE_ETCD
	t0=$(now_us)
	a=$(srv_ticks "$pid")
	for ((i = 0; i < n; i++)); do
		"$@" </dev/null >/dev/null 2>&1 || die "server: '$*' failed"
	done
	b=$(srv_ticks "$pid")
	srv_ms $((b - a)) "$n" $(($(now_us) - t0)) "$idle" >"$out"
}

# srv_warm OUT N DB SQLFILE: feeds SQLFILE to one mariadb client connection
# (the lockrun account over TCP, as lockrun connects); writes to OUT the
# server's CPU ms per item, N items in the file.
srv_warm() {
	local out=$1 n=$2 db=$3 file=$4 a b t0
	t0=$(now_us)
	a=$(srv_ticks "$DB_PID")
	srv_client "$db" <"$file" >"$T/srv.warm.out" 2>&1 || die "server: $file: $(tail -n 2 "$T/srv.warm.out")"
	b=$(srv_ticks "$DB_PID")
	srv_ms $((b - a)) "$n" $(($(now_us) - t0)) "$SRV_IDLE" >"$out"
}

srv_client() {
	mariadb --no-defaults -h 127.0.0.1 -P "$DB_PORT" -u lockrun -p"$(<"$T/db/lockrun.pw")" -N -B "$@"
}

# srv_hex I: a 32-digit lowercase hex id, unique per I within this run.
srv_hex() { printf '%08x%024x' "$SRV_SALT" "$1"; }

# The plain-SQL lock the way the articles lockrun grew from take one: a
# row per lock, a locking read and a conditional update in a transaction,
# then an update to release it.
SRV_PLAIN_TAKE="BEGIN; SELECT owner FROM locks WHERE name = 'm' FOR UPDATE;
UPDATE locks SET owner = 'me', until = NOW(6) + INTERVAL 30 SECOND
 WHERE name = 'm' AND (owner IS NULL OR until < NOW(6)); COMMIT;"
SRV_PLAIN_GIVE="UPDATE locks SET owner = NULL WHERE name = 'm' AND owner = 'me';"

section_server() {
	local f=$T/data i n=$N_SRV nw=$N_SRV_WARM ne=$((N_SRV / 5)) lease
	SRV_SALT=$((RANDOM * 32768 + RANDOM))
	lr_admin_sql "$T/db" "CREATE DATABASE IF NOT EXISTS lrbench_plain;
		CREATE TABLE IF NOT EXISTS lrbench_plain.locks (name VARCHAR(64) PRIMARY KEY,
			owner VARCHAR(64), until DATETIME(6)) ENGINE=InnoDB;
		INSERT IGNORE INTO lrbench_plain.locks VALUES ('m', NULL, NULL);
		GRANT SELECT, UPDATE ON lrbench_plain.* TO 'lockrun'@'%';"
	# The statement texts for the warm runs: pairs, renewals, plain pairs.
	for ((i = 0; i < nw; i++)); do
		printf "CALL lockrun_acquire('mutex:srv-warm','%s','%s',30000,1,'bench',1,'bench','true');\n" \
			"$(srv_hex $((2 * i)))" "$(srv_hex $((2 * i + 1)))"
		printf "CALL lockrun_release('%s','exited',0,NULL);\n" "$(srv_hex $((2 * i + 1)))"
	done >"$T/srv.pairs.sql"
	lease=$(srv_hex $((2 * nw + 1)))
	{
		printf "CALL lockrun_acquire('mutex:srv-renew','%s','%s',30000,1,'bench',1,'bench','sleep');\n" \
			"$(srv_hex $((2 * nw)))" "$lease"
		for ((i = 0; i < nw; i++)); do
			printf "CALL lockrun_renew('%s',30000);\n" "$lease"
		done
		printf "CALL lockrun_release('%s','exited',0,NULL);\n" "$lease"
	} >"$T/srv.renew.sql"
	for ((i = 0; i < nw; i++)); do
		printf '%s %s\n' "$SRV_PLAIN_TAKE" "$SRV_PLAIN_GIVE"
	done >"$T/srv.plain.sql"
	# The minute after `lockrunctl init` installed the routines, every call
	# takes the general way (lr_fresh in sql/routines/20-sweep.sql): measure after
	# it, except in the smoke run, which only proves the section works.
	if ((!smoke)); then
		i=$(db_sql "SELECT GREATEST(0, 61 - TIMESTAMPDIFF(SECOND, applied_at, UTC_TIMESTAMP(6)))
			FROM lr_routines WHERE name = 'procedures'")
		((i == 0)) || log "server: waiting $i s for the minute after init to pass"
		sleep "$i"
	fi
	# Every routine in the server's table cache and this account's rows
	# read once, so the first figure pays no more than the others.
	"$LOCKRUN" -x srv-mx -- true
	"$LOCKRUN" -x srv-warm -- true
	"$LOCKRUN" -x srv-renew -- true

	# What the servers spend while nothing runs, taken off every figure.
	SRV_IDLE=$(srv_idle "$DB_PID" "$SRV_IDLE_SECS")
	SRV_IDLE_ETCD=$(srv_idle "$ETCD_PID" "$SRV_IDLE_SECS")
	log "server: idle: MariaDB $SRV_IDLE, etcd $SRV_IDLE_ETCD ticks/s"
	log "server: $n uncontended runs of each, cold"
	srv_cold "$f/srv.lockrun" "$DB_PID" "$n" "$LOCKRUN" -x srv-mx -- true
	srv_cold "$f/srv.plain" "$DB_PID" "$n" srv_client lrbench_plain -e "$SRV_PLAIN_TAKE $SRV_PLAIN_GIVE"
	srv_cold "$f/srv.bare" "$DB_PID" "$n" srv_client -e "SELECT 1"
	srv_cold "$f/srv.etcd" "$ETCD_PID" "$ne" "${ETCDCTL[@]}" lock srv-mx -- true
	log "server: $nw warm pairs and renewals on one connection"
	srv_warm "$f/srv.pair" "$nw" lockrun "$T/srv.pairs.sql"
	srv_warm "$f/srv.renew" "$nw" lockrun "$T/srv.renew.sql"
	srv_warm "$f/srv.plainpair" "$nw" lrbench_plain "$T/srv.plain.sql"
	[[ $(db_sql "SELECT COUNT(*) FROM lr_holds WHERE resource IN ('srv-warm', 'srv-renew')") == 0 ]] ||
		die "server: the warm runs left holds behind"

	local lr pl ba et pa pp re fleet
	lr=$(<"$f/srv.lockrun") pl=$(<"$f/srv.plain") ba=$(<"$f/srv.bare") et=$(<"$f/srv.etcd")
	pa=$(<"$f/srv.pair") pp=$(<"$f/srv.plainpair") re=$(<"$f/srv.renew")
	# 10,000 holders at the default ttl (30 s) renew every 10 s: 1,000
	# renewals a second, each as measured here on its warm connection.
	fleet=$(awk -v r="$re" 'BEGIN { printf "%.1f", r * 1000 / 1000 * 100 }')
	echo "$fleet" >"$f/srv.fleet"
	md "## Server cost" ""
	md "What a run costs the database server (or etcd's server): its CPU time, user + system," \
		"from /proc/PID/stat before and after, less what it spends idle over that time" \
		"(measured over $SRV_IDLE_SECS s just before: MariaDB $SRV_IDLE, etcd $SRV_IDLE_ETCD clock" \
		"ticks a second), divided by the runs. Cold: each run a new" \
		"process and a new connection, as every lockrun run is; $n runs each ($ne for etcd)." \
		"Warm: $nw operations on one connection of the \`mariadb\` client, through the SQL API" \
		"with the runtime account." ""
	md "| per run | server CPU ms | × plain-SQL lock |" "| --- | ---: | ---: |"
	md "| \`lockrun -x NAME -- true\` (connect, acquire, release) | $lr | $(ratio "$lr" "$pl") |"
	md "| plain-SQL lock by the \`mariadb\` client (connect, locking read + conditional update, release update) | $pl | 1.00 |"
	md "| bare connect + \`SELECT 1\` by the \`mariadb\` client | $ba | $(ratio "$ba" "$pl") |"
	md "| \`etcdctl lock NAME -- true\`, on the etcd server | $et | $(ratio "$et" "$pl") |"
	md "" "| warm, per operation | server CPU ms | × plain pair |" "| --- | ---: | ---: |"
	md "| \`lockrun_acquire\` + \`lockrun_release\` | $pa | $(ratio "$pa" "$pp") |"
	md "| plain-SQL take + release | $pp | 1.00 |"
	md "| \`lockrun_renew\` | $re | $(ratio "$re" "$pp") |"
	md "" "A fleet of 10,000 idle holders at the default ttl (30 s, renewed every 10 s) sends" \
		"1,000 renewals a second: at $re ms each, $fleet% of one server core." ""
	md "Where a cold run's server time goes, from the figures above: connection set-up (the" \
		"bare connect) $ba ms; loading and parsing the routines the run calls, which the server" \
		"does once per connection, and opening their tables (cold run less warm pair less bare" \
		"connect) $(calc "$lr - $pa - $ba") ms; executing acquire and release (the warm pair) $pa ms." ""
	md "How to read: the plain lock writes one row and checks nothing; a lockrun grant writes" \
		"the resource row (its fence), the lock-log entry, its item and the hold, and the" \
		"release ends them, inside stored procedures that check every argument and take every" \
		"time from the server's clock (the SQL API's security boundary). The statements of the" \
		"common acquire and release, and what each costs, are in" \
		"[design: what a run costs the server](design/server-cost.md)." ""
	headline "Server CPU per uncontended \`lockrun -x NAME -- true\`: $lr ms ($(ratio "$lr" "$pl")× a plain-SQL lock" \
		"by the \`mariadb\` client, $pl ms; etcd $et ms). Warm acquire + release: $pa ms" \
		"($(ratio "$pa" "$pp")× the plain pair); renewal $re ms; 10,000 idle holders: $fleet% of a core."
}

# server_targets: the section's rows of the targets table.
server_targets() {
	local f=$T/data lr pl pa pp fleet
	if [[ -s $f/srv.lockrun && -s $f/srv.plain ]]; then
		lr=$(<"$f/srv.lockrun") pl=$(<"$f/srv.plain")
		target "server CPU per uncontended run, × plain-SQL lock" "≤ 1.5" "$(ratio "$lr" "$pl")" "$(calc "$lr <= 1.5 * $pl")"
	else
		target "server CPU per uncontended run, × plain-SQL lock" "≤ 1.5" - ""
	fi
	if [[ -s $f/srv.pair && -s $f/srv.plainpair ]]; then
		pa=$(<"$f/srv.pair") pp=$(<"$f/srv.plainpair")
		target "server CPU per warm acquire + release, × plain pair" "≤ 2" "$(ratio "$pa" "$pp")" "$(calc "$pa <= 2 * $pp")"
	else
		target "server CPU per warm acquire + release, × plain pair" "≤ 2" - ""
	fi
	if [[ -s $f/srv.fleet ]]; then
		fleet=$(<"$f/srv.fleet")
		target "10,000 idle holders at the default ttl, share of one server core" "≤ 10%" "$fleet%" "$(calc "$fleet <= 10")"
	else
		target "10,000 idle holders at the default ttl, share of one server core" "≤ 10%" - ""
	fi
}
