#!/usr/bin/env bats
#
# Upgrading a database of SQL API 2 (schema version 5, commit e71252b) with
# today's `lockrunctl init` while a holder runs. The old database comes from
# tests/fixtures/schema-api2.sql (what the old init left, dumped), loaded
# into a database of its own, lockrun_up, so the suite's `lockrun` database
# is not touched; its account, uptest, has the grant API 2 documented:
# GRANT EXECUTE ON lockrun_up.*. A Python holder connected before the
# upgrade takes mutex:upm through the API-2 procedures and renews it on that
# same connection every 0.5 s (ttl 4 s) through the upgrade. The upgrade
# must move the account to the role lockrun_up_api (<database>_api) and take
# away its database-wide EXECUTE, without breaking the holder and without
# granting its lock twice.
#
# The tests run in order and share the holder and the upgraded database:
# each one after the first needs the ones before it.

load helpers/common
load helpers/sqlapi

bats_require_minimum_version 1.5.0

UP_DB=lockrun_up
UP_ROLE=lockrun_up_api
# The routines table digest of e71252b's sql/procedures.sql.
API2_DIGEST=37e360bfe3a494dcc63dc909f7afffeff6c6238ef994703800d2e644a33d8e87
PUBLIC_PROCS="lockrun_acquire lockrun_check lockrun_dequeue lockrun_grant lockrun_history lockrun_host_queue lockrun_list lockrun_poll lockrun_release lockrun_renew lockrun_settle lockrun_sleep lockrun_status"

# upsql SQL: admin SQL in the upgraded database.
upsql() {
	lr_admin_sql "$LR_DB" "$1" "$UP_DB"
}

# upapp SQL: SQL as uptest on a NEW connection over TCP, like an
# application started after the upgrade; a header line per result set.
upapp() {
	MYSQL_PWD=$(<"$UP/uptest.pw") mariadb --no-defaults --skip-ssl-verify-server-cert -h 127.0.0.1 \
		-P "$LR_PORT" -u uptest -D "$UP_DB" -B -e "$1"
}

upacq() {
	upapp "CALL lockrun_acquire('$1', '$2', '$3', 30000, 0, 'newhost', 4343, 'tester', '23-upgrade new connection')"
}

uprel() { upapp "CALL lockrun_release('$1', 'exited', 0, NULL)"; }

# upgrade_errors: the holder's error lines that are not the one the
# upgrade is known to cause: while init replaces the routines, an old
# public procedure may call a helper whose arguments changed (1318) in the
# moment between the helper's replacement and its own. A caller retries
# (lockrun does at its next renewal); anything else is a failure.
upgrade_errors() {
	grep '^error' "$UP/holder.out" |
		grep -v '^error [0-9]* at=[0-9]* renew: OperationalError 1318 Incorrect number of arguments for PROCEDURE lockrun_up\.lr_' || true
	(($(grep -c '^error' "$UP/holder.out") <= 1)) || echo "more than one renewal failed"
}

# Everything this file creates on the shared server, gone; fine to repeat.
drop_all() {
	lr_admin_sql "$LR_DB" "DROP DATABASE IF EXISTS $UP_DB;
		DROP USER IF EXISTS 'uptest'@'%', 'upmore'@'%'; DROP ROLE IF EXISTS $UP_ROLE" || true
	# The definer account is the suite's too: only its rights on our database go.
	lr_admin_sql "$LR_DB" "REVOKE ALL PRIVILEGES ON $UP_DB.* FROM 'lockrun_owner'@'localhost'" \
		2>/dev/null || true
}

# The newest schema version this checkout has: the number of its last
# sql/NNN-*.sql migration.
latest_version() {
	local f
	f=$(printf '%s\n' "$LR_SRC"/sql/[0-9][0-9][0-9]-*.sql | sort | tail -n 1)
	f=${f##*/}
	echo $((10#${f%%-*}))
}

# The databases upgraded here were made by lockrun versions that ran on
# MariaDB alone (their dumps are MariaDB's): nothing to upgrade on MySQL.
setup() {
	if lr_server_is_mysql; then
		skip "the schemas upgraded here only ever existed on MariaDB"
	fi
}

setup_file() {
	export UP=$BATS_FILE_TMPDIR
	lr_server_is_mysql && return 0
	/usr/bin/python3 -c 'import pymysql' || {
		echo "python3-pymysql is not installed (tests/run installs it)" >&2
		return 1
	}
	drop_all
	lr_admin_sql "$LR_DB" "CREATE DATABASE $UP_DB"
	mariadb --no-defaults --socket="$LR_SOCKET" -u"$(lr_admin_user)" --comments "$UP_DB" \
		<"$LR_SRC/tests/fixtures/schema-api2.sql"
	(
		umask 077
		openssl rand -hex 16 | tr -d '\n' >"$UP/uptest.pw"
		printf '[database]\nsocket = %s\nuser = %s\ndatabase = %s\n' \
			"$LR_SOCKET" "$(lr_admin_user)" "$UP_DB" >"$UP/admin.conf"
	)
	# API 2's documented grant.
	lr_admin_sql "$LR_DB" "CREATE USER 'uptest'@'%' IDENTIFIED BY '$(<"$UP/uptest.pw")';
		GRANT EXECUTE ON $UP_DB.* TO 'uptest'@'%'"
	# More than EXECUTE on the database: not the documented grant, so the
	# upgrade must leave it as it is (an operator's account, say).
	lr_admin_sql "$LR_DB" "CREATE USER 'upmore'@'%' IDENTIFIED BY '$(openssl rand -hex 16)';
		GRANT EXECUTE, SELECT ON $UP_DB.* TO 'upmore'@'%'"
	lr_admin_sql "$LR_DB" "SHOW GRANTS FOR 'upmore'@'%'" >"$UP/upmore-grants.before"
	# The suite's own account, to prove the upgrade of lockrun_up leaves it be.
	lr_admin_sql "$LR_DB" "SHOW GRANTS FOR 'lockrun'@'%'" >"$UP/lockrun-grants.before"

	# The holder: one connection, made before the upgrade, for its whole life.
	# Lines: "acquired ...", "renew N at=MS renewed=R api=A" or
	# "error N at=MS renew: CODE MESSAGE", then "released ...".
	cat >"$UP/holder.py" <<-'EOF'
		import os, sys, time
		import pymysql

		host, port, user, pwfile, db, request, lease, out, stop = sys.argv[1:10]
		log = open(out, "a", buffering=1)
		t0 = time.monotonic()
		open(out + ".pid", "w").write("%d\n" % os.getpid())

		def say(*words):
		    log.write(" ".join(str(w) for w in words) + "\n")

		def ms():
		    return int((time.monotonic() - t0) * 1000)

		def call(cur, sql):
		    """The first result set of a statement, as dicts; the rest drained."""
		    cur.execute(sql)
		    rows = cur.fetchall()
		    while cur.nextset():
		        pass
		    return rows

		conn = pymysql.connect(host=host, port=int(port), user=user,
		                       password=open(pwfile).read().strip(), database=db,
		                       autocommit=True, cursorclass=pymysql.cursors.DictCursor)
		cur = conn.cursor()
		conn_id = call(cur, "SELECT CONNECTION_ID() AS id")[0]["id"]
		try:
		    r = call(cur, "CALL lockrun_acquire('mutex:upm', '%s', '%s', 4000, 0, 'uphost', %d, "
		             "'upuser', '23-upgrade holder')" % (request, lease, os.getpid()))[0]
		except pymysql.MySQLError as e:
		    say("error", 0, "at=%d" % ms(), "acquire:", type(e).__name__, *e.args)
		    sys.exit(1)
		say("acquired", "at=%d" % ms(), "outcome=%s" % r["outcome"], "fence=%s" % r["fence"],
		    "grant=%s" % r["grant_id"], "api=%s" % r["api"], "conn=%s" % conn_id)
		if r["outcome"] != "granted":
		    sys.exit(1)
		n = 0
		while not os.path.exists(stop):
		    time.sleep(0.5)
		    n += 1
		    try:
		        r = call(cur, "CALL lockrun_renew('%s', 4000)" % lease)[0]
		        say("renew", n, "at=%d" % ms(), "renewed=%s" % r["renewed"], "api=%s" % r.get("api"))
		    except pymysql.MySQLError as e:
		        say("error", n, "at=%d" % ms(), "renew:", type(e).__name__, *e.args)
		try:
		    conn_end = call(cur, "SELECT CONNECTION_ID() AS id")[0]["id"]
		    r = call(cur, "CALL lockrun_release('%s', 'exited', 0, NULL)" % lease)[0]
		except pymysql.MySQLError as e:
		    say("error", "release:", type(e).__name__, *e.args)
		    sys.exit(1)
		say("released", "at=%d" % ms(), "released=%s" % r["released"], "api=%s" % r.get("api"),
		    "conn=%s" % conn_end)
	EOF
}

teardown_file() {
	lr_server_is_mysql && return 0
	touch "$UP/stop"
	local pid
	if pid=$(cat "$UP/holder.out.pid" 2>/dev/null) && [[ -n $pid ]]; then
		# Time to release on its own; then it is ours to kill.
		lr_wait_for -t 5 grep -q '^released\|^error .*release' "$UP/holder.out" 2>/dev/null || true
		kill -KILL "$pid" 2>/dev/null || true
	fi
	drop_all
}

# renewals: the renew and error lines of the holder so far.
renewals() {
	grep -cE '^(renew|error) ' "$UP/holder.out" || true
}

# renewals_reach N: true once the holder has tried N renewals.
renewals_reach() {
	(($(renewals) >= $1))
}

# need FILE: fail clearly when an earlier test of this file did not get as
# far as leaving FILE.
need() {
	[[ -e $UP/$1 ]] || fail "an earlier test of this file did not finish ($1 is missing)"
}

holder_field() { # holder_field LINE-KIND KEY: KEY=value of the first such line
	awk -v k="$1" -v key="$2" '$1 == k { for (i = 2; i <= NF; i++)
		if (index($i, key "=") == 1) { print substr($i, length(key) + 2); exit } }' "$UP/holder.out"
}

@test "before the upgrade: the fixture is API 2 and its account holds mutex:upm through the API-2 procedures" {
	assert_equal "$(upsql "SELECT MAX(version) FROM lr_schema")" 5
	assert_equal "$(upsql "SELECT digest FROM lr_routines WHERE name = 'procedures'")" "$API2_DIGEST"
	run lr_admin_sql "$LR_DB" "SHOW GRANTS FOR 'uptest'@'%'"
	assert_line "GRANT EXECUTE ON \`$UP_DB\`.* TO \`uptest\`@\`%\`"

	# 3>&-: bats must not wait for it; the subshell records its exit status.
	: >"$UP/holder.out"
	(
		rc=0 # (errexit is on here too)
		/usr/bin/python3 "$UP/holder.py" 127.0.0.1 "$LR_PORT" uptest "$UP/uptest.pw" "$UP_DB" \
			"$(newid)" "$(newid)" "$UP/holder.out" "$UP/stop" || rc=$?
		echo "$rc" >"$UP/holder.rc"
	) </dev/null >"$UP/holder.err" 2>&1 3>&- &
	lr_wait_for -t 15 grep -q '^acquired\|^error' "$UP/holder.out"
	cat "$UP/holder.out" "$UP/holder.err"
	run cat "$UP/holder.out"
	assert_line --regexp '^acquired at=[0-9]+ outcome=granted fence=[0-9]+ grant=[0-9]+ api=2 conn=[0-9]+$'
	lr_wait_for -t 10 renewals_reach 2
	run cat "$UP/holder.out"
	assert_line --regexp '^renew 2 at=[0-9]+ renewed=1 api=2$'
	refute_line --regexp '^error'
	touch "$UP/holding"
}

@test "lockrunctl init upgrades the API-2 database to the newest schema while the holder runs" {
	need holding
	local latest
	latest=$(latest_version)
	((latest > 5)) || fail "no migration after version 5 in $LR_SRC/sql"
	run "$LOCKRUNCTL" -c "$UP/admin.conf" init
	renewals >"$UP/renewals.after-init"
	echo "$output"
	assert_success
	assert_line "schema upgraded from version 5 to $latest"
	assert_equal "$(upsql "SELECT MAX(version) FROM lr_schema")" "$latest"
	assert_equal "$(upsql "SELECT digest FROM lr_routines WHERE name = 'procedures'")" \
		"$(cat "$LR_SRC"/sql/routines/*.sql | sha256sum | cut -c1-64)"
	assert_equal "$(upsql "SELECT COUNT(*) FROM mysql.user WHERE User = '$UP_ROLE' AND is_role = 'Y'")" 1
	# The holder is still there, and the suite's database's account untouched.
	kill -0 "$(cat "$UP/holder.out.pid")"
	[[ ! -e $UP/holder.rc ]] || fail "the holder exited with $(cat "$UP/holder.rc")"
	assert_equal "$(lr_admin_sql "$LR_DB" "SHOW GRANTS FOR 'lockrun'@'%'")" "$(cat "$UP/lockrun-grants.before")"
	# Idempotent: a second run changes nothing.
	run "$LOCKRUNCTL" -c "$UP/admin.conf" init
	assert_success
	assert_line "schema is up to date (version $latest)"
	touch "$UP/upgraded"
}

@test "the holder's renewals on its connection from before the upgrade kept succeeding (but for one during init), without a pause as long as the ttl" {
	need upgraded
	local mark
	mark=$(cat "$UP/renewals.after-init")
	lr_wait_for -t 15 renewals_reach $((mark + 4))
	cat "$UP/holder.out"
	assert_equal "$(upgrade_errors)" ""
	# renewed=1 every time (and only renew lines after the acquire).
	assert_equal "$(grep -c '^renew ' "$UP/holder.out")" "$(grep -c '^renew .* renewed=1 ' "$UP/holder.out")"
	# Once the routines are replaced, the old session runs the new lockrun_renew.
	assert_equal "$(grep '^renew ' "$UP/holder.out" | tail -n 1 | awk '{ print $NF }')" api=3
	# At most 4 s (the ttl) between the acquire and a renewal, or two renewals.
	local gap
	gap=$(awk '/^error/ { next } { for (i = 2; i <= NF; i++) if ($i ~ /^at=/) { t = substr($i, 4) + 0
			if (seen && t - last > g) g = t - last; last = t; seen = 1 } }
		END { print g + 0 }' "$UP/holder.out")
	((gap < 4000)) || fail "the holder went ${gap} ms without a renewal (ttl 4000 ms)"
	# The hold is live, under the holder's grant.
	assert_equal "$(upsql "SELECT COUNT(*) FROM lr_holds WHERE resource = 'upm'
		AND expires_at > UTC_TIMESTAMP(6) AND grant_id = $(holder_field acquired grant)")" 1
	[[ ! -e $UP/holder.rc ]] || fail "the holder exited with $(cat "$UP/holder.rc")"
}

@test "no double grant: a new connection's acquire of mutex:upm is busy while the holder holds it" {
	need upgraded
	local out
	out=$(upacq mutex:upm "$(newid)" "$(newid)")
	echo "$out"
	assert_equal "$(field outcome "$out")" busy
	assert_equal "$(field api "$out")" 3
	# Who holds it, without the holder's command text.
	[[ $(field holder "$out") =~ ^uphost:$(cat "$UP/holder.out.pid")\ \(uptest@127\.0\.0\.1\),\ held\ [0-9]+s$ ]] ||
		fail "holder: $(field holder "$out")"
	assert_equal "$(upsql "SELECT COUNT(*) FROM lr_holds WHERE resource = 'upm'")" 1
	assert_equal "$(upsql "SELECT COUNT(*) FROM lr_grants g JOIN lr_grant_items i ON i.grant_id = g.id
		WHERE i.resource = 'upm' AND g.ended_at IS NULL")" 1
}

@test "the upgrade moved the account to the role lockrun_up_api and took away its database-wide EXECUTE" {
	need upgraded
	run lr_admin_sql "$LR_DB" "SHOW GRANTS FOR 'uptest'@'%'"
	echo "$output"
	assert_success
	assert_line "GRANT \`$UP_ROLE\` TO \`uptest\`@\`%\`"
	assert_line "SET DEFAULT ROLE \`$UP_ROLE\` FOR \`uptest\`@\`%\`"
	refute_line --partial "ON \`$UP_DB\`.*"
	# The role may execute exactly the thirteen public procedures.
	run lr_admin_sql "$LR_DB" "SHOW GRANTS FOR $UP_ROLE"
	echo "$output"
	assert_success
	local p want=
	for p in $PUBLIC_PROCS; do
		want+="GRANT EXECUTE ON PROCEDURE \`$UP_DB\`.\`$p\` TO \`$UP_ROLE\`"$'\n'
	done
	assert_equal "$(grep -v '^GRANT USAGE ON \*\.\* ' <<<"$output" | sort)" "$(sort <<<"${want%$'\n'}")"
}

@test "an account with more than EXECUTE on the database is left as it was" {
	need upgraded
	run lr_admin_sql "$LR_DB" "SHOW GRANTS FOR 'upmore'@'%'"
	echo "$output"
	assert_success
	assert_equal "$output" "$(cat "$UP/upmore-grants.before")"
	refute_output --partial "$UP_ROLE"
}

@test "a new connection of the account calls the public procedures, gets 1370 for the internal ones" {
	need upgraded
	local lease out
	lease=$(newid)
	out=$(upacq mutex:upx "$(newid)" "$lease")
	echo "$out"
	assert_equal "$(field outcome "$out")" granted
	out=$(uprel "$lease")
	echo "$out"
	assert_equal "$(field released "$out")" 1
	run -1 upapp "CALL lr_sweep('upm')"
	assert_output --partial "ERROR 1370"
	# The account sees the thirteen public procedures and nothing else.
	run upapp "SELECT ROUTINE_NAME FROM information_schema.ROUTINES
		WHERE ROUTINE_SCHEMA = '$UP_DB' ORDER BY ROUTINE_NAME"
	assert_success
	assert_equal "$(tail -n +2 <<<"$output" | paste -sd' ')" "$PUBLIC_PROCS"
	# The holder's lock was not swept by the attempt.
	assert_equal "$(upsql "SELECT COUNT(*) FROM lr_holds WHERE resource = 'upm'")" 1
}

@test "after the holder releases, a new connection is granted mutex:upm with a greater fence" {
	need upgraded
	touch "$UP/stop"
	lr_wait_for -t 10 test -e "$UP/holder.rc" || true
	cat "$UP/holder.out" "$UP/holder.err"
	[[ -e $UP/holder.rc ]] || fail "the holder did not exit within 10 s of the stop file"
	assert_equal "$(cat "$UP/holder.rc")" 0
	assert_equal "$(holder_field released released)" 1
	# Released on the very connection that acquired, before the upgrade.
	assert_equal "$(holder_field released conn)" "$(holder_field acquired conn)"
	assert_equal "$(upgrade_errors)" ""
	assert_equal "$(upsql "SELECT COUNT(*) FROM lr_holds WHERE resource = 'upm'")" 0

	local lease out fence old
	old=$(holder_field acquired fence)
	lease=$(newid)
	out=$(upacq mutex:upm "$(newid)" "$lease")
	echo "$out"
	assert_equal "$(field outcome "$out")" granted
	fence=$(field fence "$out")
	((fence > old)) || fail "fence $fence after the holder's $old"
	out=$(uprel "$lease")
	assert_equal "$(field released "$out")" 1
}
