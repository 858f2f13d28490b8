# shellcheck shell=bash
#
# bench/sections/server.bash: the "server" section of bench/run, sourced by
# it.
#
# Measures what a run costs the database server in its own CPU time, beside
# a plain-SQL lock (a row, a locking read and a conditional update) and
# etcd's server: cold runs (a new process and connection each, as every
# lockrun run is) and warm operations on one connection. Runs once per
# database server of the run (bench/run --servers); etcd's figure only with
# the first.
# How: the server's user + system ticks from /proc/PID/stat before and
# after N_SRV cold runs (N_SRV / 5 for etcd) or N_SRV_WARM statements fed to
# one `mariadb` client, less what it spends idle over SRV_IDLE_SECS.
# To the page (server_page, once all servers ran): the table "Server cost"
# (cold, then warm) with a pair of columns per server, what a fleet of idle
# holders costs, where a cold run's server time goes, a headline and three
# rows of the targets table (server_targets, the first server's), from
# data/srv.SERVER.* and data/srv.etcd*.
# Also, per server, the parse experiment (srv_parse): the same routine body
# as a procedure and as a trigger, on new connections (bench/conns.c).
# Uses bench/run's T, DB_NAME, DB_FIRST, DB_PID, DB_PORT, DB_VERSION,
# ETCD_PID, ETCDCTL, LOCKRUN, CONNS, N_SRV, N_SRV_WARM, SRV_IDLE_SECS,
# SERVERS, smoke, md, headline, db_sql, db_label, servers_run, log and die.
# shellcheck disable=SC2154 # smoke and the DB_ variables are bench/run's

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

# srv_client ARG...: the `mariadb` client as lockrun's account. Without TLS,
# as lockrun connects: the client would otherwise negotiate it with a server
# that offers it (MySQL, MariaDB 11.4 and later make their own certificate).
srv_client() {
	mariadb --no-defaults --skip-ssl -h 127.0.0.1 -P "$DB_PORT" -u lockrun \
		-p"$(<"$T/db/lockrun.pw")" -N -B "$@"
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

# srv_body: the text of a routine body of about 6.6 KiB (24 branches, each
# a SELECT, an UPDATE and an INSERT) for srv_parse, over v_a and v_b.
srv_body() {
	local i
	for ((i = 1; i <= 24; i++)); do
		printf '  IF v_a = -%d THEN\n' "$i"
		printf '    SET v_b = (SELECT COUNT(*) FROM xt WHERE x = v_a AND y > UTC_TIMESTAMP(6) - INTERVAL %d SECOND);\n' $((i + 4))
		printf '    UPDATE xt SET y = UTC_TIMESTAMP(6), z = z + %d WHERE x = v_a AND z < %d;\n' $((i - 1)) $(((i - 1) * 7))
		printf "    INSERT INTO xt2 (x, note) VALUES (v_a, CONCAT('block%d:', v_b));\n" $((i - 1))
		printf '  END IF;\n'
	done
}

# srv_parse F: what the same routine body costs a new connection as a
# stored procedure and as a table's trigger, on the running server: the
# server parses a procedure once per session that calls it, a trigger once
# per table it opens into its table cache, which hands the table on from
# connection to connection. Writes F.parse: server CPU ms per connection
# for DO 1, the procedure with no branch taken and with one, the trigger
# alike. The trigger is on a BLACKHOLE table (which keeps no rows; MariaDB
# loads the engine's plugin first); MariaDB's INSERT returns the row as the
# trigger left it (RETURNING), as lockrun's answer would come. As the
# admin account over the socket, in a database of its own.
srv_parse() {
	local f=$1 n=$N_SRV ret="" q w a b t0 out=""
	if [[ $DB_VERSION == *MariaDB* ]]; then
		ret=" RETURNING a, b"
		(($(lr_admin_sql "$T/db" "SELECT COUNT(*) FROM information_schema.ENGINES
			WHERE ENGINE = 'BLACKHOLE' AND SUPPORT IN ('YES', 'DEFAULT')") > 0)) ||
			lr_admin_sql "$T/db" "INSTALL SONAME 'ha_blackhole'"
	fi
	{
		echo "CREATE DATABASE IF NOT EXISTS lrbench_parse; USE lrbench_parse;"
		echo "CREATE TABLE IF NOT EXISTS xt (x INT PRIMARY KEY, y DATETIME(6), z INT) ENGINE=InnoDB;"
		echo "CREATE TABLE IF NOT EXISTS xt2 (id INT AUTO_INCREMENT PRIMARY KEY, x INT, note VARCHAR(100)) ENGINE=InnoDB;"
		echo "CREATE TABLE IF NOT EXISTS xcall (a INT, b INT) ENGINE=BLACKHOLE;"
		echo "INSERT IGNORE INTO xt VALUES (-1, UTC_TIMESTAMP(6), 0);"
		echo "DROP PROCEDURE IF EXISTS xproc; DROP TRIGGER IF EXISTS xtrg;"
		echo "DELIMITER //"
		printf 'CREATE PROCEDURE xproc(IN p_a INT)\nBEGIN\n  DECLARE v_a INT DEFAULT p_a;\n  DECLARE v_b INT DEFAULT 0;\n'
		srv_body
		printf '  SELECT v_b AS b;\nEND//\n'
		printf 'CREATE TRIGGER xtrg BEFORE INSERT ON xcall FOR EACH ROW\nBEGIN\n  DECLARE v_a INT DEFAULT NEW.a;\n  DECLARE v_b INT DEFAULT 0;\n'
		srv_body
		printf '  SET NEW.b = v_b;\nEND//\n'
		echo "DELIMITER ;"
	} | lr_admin_sql "$T/db" - || die "server: the procedure and trigger of the parse experiment"
	log "server: $n new connections for each statement of the parse experiment"
	for q in "DO 1" "CALL xproc(5)" "CALL xproc(-1)" "INSERT INTO xcall (a) VALUES (5)$ret" \
		"INSERT INTO xcall (a) VALUES (-1)$ret"; do
		# One connection of each first, so that the table is in the cache.
		"$CONNS" 1 "$T/db/mysqld.sock" "$(lr_admin_user)" lrbench_parse "$q" >/dev/null ||
			die "server: '$q' failed"
		t0=$(now_us)
		a=$(srv_ticks "$DB_PID")
		"$CONNS" "$n" "$T/db/mysqld.sock" "$(lr_admin_user)" lrbench_parse "$q" || die "server: '$q' failed"
		b=$(srv_ticks "$DB_PID")
		w=$(srv_ms $((b - a)) "$n" $(($(now_us) - t0)) "$SRV_IDLE")
		out+="${out:+ }$w"
	done
	echo "$out" >"$f.parse"
}

section_server() {
	local f=$T/data/srv.$DB_NAME i n=$N_SRV nw=$N_SRV_WARM ne=$((N_SRV / 5)) lease
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

	# What the servers spend while nothing runs, taken off every figure;
	# etcd's only once, with its figure.
	SRV_IDLE=$(srv_idle "$DB_PID" "$SRV_IDLE_SECS")
	echo "$SRV_IDLE" >"$f.idle"
	if ((DB_FIRST)); then
		SRV_IDLE_ETCD=$(srv_idle "$ETCD_PID" "$SRV_IDLE_SECS")
		echo "$SRV_IDLE_ETCD" >"$T/data/srv.etcd.idle"
	fi
	log "server: idle: $DB_NAME $SRV_IDLE${SRV_IDLE_ETCD:+, etcd $SRV_IDLE_ETCD} ticks/s"
	log "server: $n uncontended runs of each, cold"
	srv_cold "$f.lockrun" "$DB_PID" "$n" "$LOCKRUN" -x srv-mx -- true
	srv_cold "$f.plain" "$DB_PID" "$n" srv_client lrbench_plain -e "$SRV_PLAIN_TAKE $SRV_PLAIN_GIVE"
	srv_cold "$f.bare" "$DB_PID" "$n" srv_client -e "SELECT 1"
	if ((DB_FIRST)); then
		srv_cold "$T/data/srv.etcd" "$ETCD_PID" "$ne" "${ETCDCTL[@]}" lock srv-mx -- true
	fi
	log "server: $nw warm pairs and renewals on one connection"
	srv_warm "$f.pair" "$nw" lockrun "$T/srv.pairs.sql"
	srv_warm "$f.renew" "$nw" lockrun "$T/srv.renew.sql"
	srv_warm "$f.plainpair" "$nw" lrbench_plain "$T/srv.plain.sql"
	[[ $(db_sql "SELECT COUNT(*) FROM lr_holds WHERE resource IN ('srv-warm', 'srv-renew')") == 0 ]] ||
		die "server: the warm runs left holds behind"
	# 10,000 holders at the default ttl (30 s) renew every 10 s: 1,000
	# renewals a second, each as measured here on its warm connection.
	awk -v r="$(<"$f.renew")" 'BEGIN { printf "%.1f\n", r * 1000 / 1000 * 100 }' >"$f.fleet"
	srv_parse "$f"
	echo "$n $nw $ne" >"$T/data/srv.sizes"
}

# srv_fig SERVER WHAT: figure WHAT of SERVER's run (data/srv.SERVER.WHAT;
# data/srv.etcd for WHAT etcd, the same for every server), "-" if missing.
srv_fig() {
	local p=$T/data/srv.$1.$2
	[[ $2 == etcd ]] && p=$T/data/srv.etcd
	if [[ -s $p ]]; then cat "$p"; else echo -; fi
}

# srv_row LABEL WHAT BASE: a row of a server-cost table: for each server, its
# figure WHAT and that over its figure BASE.
srv_row() {
	local s v line="| $1 |"
	for s in $(servers_run); do
		v=$(srv_fig "$s" "$2")
		line+=" $v | $(ratio "$v" "$(srv_fig "$s" "$3")") |"
	done
	md "$line"
}

# srv_head FIRST RATIO: the header lines of a server-cost table, a column of
# figures and one of ratios per server.
srv_head() {
	local s line="| $1 |" rule="| --- |"
	for s in $(servers_run); do
		line+=" $(db_label "$s"): server CPU ms | $2 |"
		rule+=" ---: | ---: |"
	done
	md "$line" "$rule"
}

# srv_each FORMAT WHAT...: FORMAT (printf) filled with each server's label and
# its figures WHAT..., joined with "; ".
srv_each() {
	local fmt=$1 s w out=
	shift
	local -a v
	for s in $(servers_run); do
		v=()
		for w; do v+=("$(srv_fig "$s" "$w")"); done
		# shellcheck disable=SC2059 # the format is the caller's
		out+="${out:+; }$(printf "$fmt" "$(db_label "$s")" "${v[@]}")"
	done
	echo "$out"
}

# srv_rest SERVER: a cold run less a warm pair less a bare connect, or "-".
srv_rest() {
	awk -v a="$(srv_fig "$1" lockrun)" -v b="$(srv_fig "$1" pair)" -v c="$(srv_fig "$1" bare)" '
		BEGIN { if (a c b ~ /^[0-9.]+$/) printf "%.3f", a - b - c; else printf "-" }'
}

# srv_parse_fig SERVER K: field K (1-5) of SERVER's parse experiment, or "-".
srv_parse_fig() {
	local p=$T/data/srv.$1.parse
	if [[ -s $p ]]; then awk -v k="$2" '{ print $k }' "$p"; else echo -; fi
}

# srv_parse_page: the parse experiment's table and how to read it.
srv_parse_page() {
	local s line rule="| --- |" k
	local -a what=("\`DO 1\`" "\`CALL xproc(5)\`: a procedure of 6.6 KiB, no branch taken"
		"\`CALL xproc(-1)\`: one branch taken (a \`SELECT\`, an \`UPDATE\`, an \`INSERT\`)"
		"\`INSERT INTO xcall (a) VALUES (5)\`: the same body as a trigger, no branch taken"
		"\`INSERT INTO xcall (a) VALUES (-1)\`: the trigger, one branch taken")
	line="| one statement per new connection (admin account, unix socket) |"
	for s in $(servers_run); do
		line+=" $(db_label "$s"): server CPU ms |"
		rule+=" ---: |"
	done
	md "### Parsed per session, or once" "" \
		"The same routine body, as a stored procedure and as the \`BEFORE INSERT\` trigger of" \
		"a \`BLACKHOLE\` table (which keeps no rows), each statement on $N_SRV new connections" \
		"one after the other (bench/conns.c), the server's CPU per connection. On MariaDB the" \
		"\`INSERT\` ends in \`RETURNING a, b\`, which answers with the row as the trigger left it." \
		"" "$line" "$rule"
	for k in 1 2 3 4 5; do
		line="| ${what[k - 1]} |"
		for s in $(servers_run); do line+=" $(srv_parse_fig "$s" "$k") |"; done
		md "$line"
	done
	md "" "How to read: a server parses a procedure once per session that calls it, and a" \
		"table's triggers when it opens the table into its table cache, which hands an open" \
		"table on from one connection to the next; what the procedure costs beyond the trigger" \
		"with no branch taken is that parse. The routines lockrun calls are procedures, parsed" \
		"by every run's new session ([design: what a run costs the server](design/server-cost.md))." ""
}

# server_page: the section's part of the page, once every server ran.
server_page() {
	local n nw ne et first=${SERVERS[0]} lr pl pa pp re fleet s others=
	read -r n nw ne <"$T/data/srv.sizes" || die "server: no figures"
	et=$(srv_fig "$first" etcd)
	md "## Server cost" ""
	md "What a run costs the database server (or etcd's server): its CPU time, user + system," \
		"from /proc/PID/stat before and after, less what it spends idle over that time" \
		"(measured over $SRV_IDLE_SECS s just before, in clock ticks a second:" \
		"$(srv_each '%s %s' idle); etcd $(srv_fig etcd idle)), divided by the runs. Cold: each run a new" \
		"process and a new connection, as every lockrun run is; $n runs each ($ne for etcd)." \
		"Warm: $nw operations on one connection of the \`mariadb\` client, through the SQL API" \
		"with the runtime account. The clients connect without TLS, as lockrun does." \
		"Each database server ran alone in the same run, the others stopped; etcd's figure is" \
		"measured once and set against each server's plain-SQL lock." ""
	srv_head "per run" "× plain-SQL lock"
	srv_row "\`lockrun -x NAME -- true\` (connect, acquire, release)" lockrun plain
	srv_row "plain-SQL lock by the \`mariadb\` client (connect, locking read + conditional update, release update)" plain plain
	srv_row "bare connect + \`SELECT 1\` by the \`mariadb\` client" bare plain
	srv_row "\`etcdctl lock NAME -- true\`, on the etcd server (measured once)" etcd plain
	md ""
	srv_head "warm, per operation" "× plain pair"
	srv_row "\`lockrun_acquire\` + \`lockrun_release\`" pair plainpair
	srv_row "plain-SQL take + release" plainpair plainpair
	srv_row "\`lockrun_renew\`" renew plainpair
	md "" "A fleet of 10,000 idle holders at the default ttl (30 s, renewed every 10 s) sends" \
		"1,000 renewals a second, at the renewal's cost above: $(srv_each '%s %s%% of one server core' fleet)." ""
	local where=
	for s in $(servers_run); do
		where+="${where:+; }$(db_label "$s"): $(srv_fig "$s" bare) ms, $(srv_rest "$s") ms, $(srv_fig "$s" pair) ms"
	done
	md "Where a cold run's server time goes, from the figures above: connection set-up (the" \
		"bare connect); loading and parsing the routines the run calls, which the server" \
		"does once per connection, and opening their tables (cold run less warm pair less bare" \
		"connect); executing acquire and release (the warm pair). In that order: $where." ""
	srv_parse_page
	md "How to read: the plain lock writes one row and checks nothing; a lockrun grant writes" \
		"the resource row (its fence), the lock-log entry, its item and the hold, and the" \
		"release ends them, inside stored procedures that check every argument and take every" \
		"time from the server's clock (the SQL API's security boundary). The statements of the" \
		"common acquire and release, and what each costs, are in" \
		"[design: what a run costs the server](design/server-cost.md)." ""
	lr=$(srv_fig "$first" lockrun) pl=$(srv_fig "$first" plain) pa=$(srv_fig "$first" pair)
	pp=$(srv_fig "$first" plainpair) re=$(srv_fig "$first" renew) fleet=$(srv_fig "$first" fleet)
	for s in $(servers_run); do
		[[ $s == "$first" ]] && continue
		others+="; on $(db_label "$s") $(srv_fig "$s" lockrun) ms cold"
		others+=" ($(ratio "$(srv_fig "$s" lockrun)" "$(srv_fig "$s" plain)")× its plain lock), warm pair $(srv_fig "$s" pair) ms"
	done
	headline "Server CPU per uncontended \`lockrun -x NAME -- true\` on $(db_label "$first"): $lr ms" \
		"($(ratio "$lr" "$pl")× a plain-SQL lock by the \`mariadb\` client, $pl ms; etcd $et ms). Warm acquire + release: $pa ms" \
		"($(ratio "$pa" "$pp")× the plain pair); renewal $re ms; 10,000 idle holders: $fleet% of a core$others."
}

# server_targets: the section's rows of the targets table.
server_targets() {
	local f=$T/data/srv.${SERVERS[0]} lr pl pa pp fleet
	if [[ -s $f.lockrun && -s $f.plain ]]; then
		lr=$(<"$f.lockrun") pl=$(<"$f.plain")
		target "server CPU per uncontended run, × plain-SQL lock" "≤ 1.5" "$(ratio "$lr" "$pl")" "$(calc "$lr <= 1.5 * $pl")"
	else
		target "server CPU per uncontended run, × plain-SQL lock" "≤ 1.5" - ""
	fi
	if [[ -s $f.pair && -s $f.plainpair ]]; then
		pa=$(<"$f.pair") pp=$(<"$f.plainpair")
		target "server CPU per warm acquire + release, × plain pair" "≤ 2" "$(ratio "$pa" "$pp")" "$(calc "$pa <= 2 * $pp")"
	else
		target "server CPU per warm acquire + release, × plain pair" "≤ 2" - ""
	fi
	if [[ -s $f.fleet ]]; then
		fleet=$(<"$f.fleet")
		target "10,000 idle holders at the default ttl, share of one server core" "≤ 10%" "$fleet%" "$(calc "$fleet <= 10")"
	else
		target "10,000 idle holders at the default ttl, share of one server core" "≤ 10%" - ""
	fi
}
