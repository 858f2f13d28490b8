# shellcheck shell=bash
#
# Loaded by every bats file:   load helpers/common
#
# tests/run starts one MariaDB server for the whole suite, provisions it and
# exports where everything is (LR_SRC, LR_BUILD, LOCKRUN, LOCKRUNCTL, LR_TMP,
# LR_DB, LR_PORT, LR_SOCKET, LR_TLS, LOCKRUN_CONFIG, LR_ADMIN_CONFIG,
# LR_TOOLS). Run the suite, or some files of it, through tests/run.
#
# Note for setup_file / teardown_file: they run in their own process, so the
# helpers below work there as well as in tests (all state lives in files and
# the exported variables). Variables a test needs from setup_file must be
# exported. A background process started by a test or by setup_file must not
# keep bats's fd 3 open, or bats waits for it forever: start it as
# `cmd 3>&- &` (lr_server_start already does this).

load "${LR_BATS_LIB:-/usr/lib/bats}/bats-support/load"
load "${LR_BATS_LIB:-/usr/lib/bats}/bats-assert/load"

if [[ -z ${LR_BUILD:-} || -z ${LR_DB:-} ]]; then
	echo "LR_BUILD/LR_DB are not set: run the tests with tests/run" >&2
	return 1
fi

# shellcheck source=tests/helpers/server.bash
source "${BASH_SOURCE[0]%/*}/server.bash"

# sql "SQL": run SQL as the admin account in the lockrun database of the
# suite's server; prints tab-separated rows without a header.
sql() {
	lr_admin_sql "$LR_DB" "$*" lockrun
}

# seq_rows FROM TO: a derived table of one column, seq, FROM to TO (at
# most 100000 rows), for INSERT ... SELECT; MariaDB's seq_1_to_N tables are
# not MySQL's. Use it as: ... FROM $(seq_rows 1 2500) q
seq_rows() {
	local d='(SELECT 0 n UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL
		SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL
		SELECT 8 UNION ALL SELECT 9)'
	echo "(SELECT seq FROM (SELECT $1 + a.n + 10 * b.n + 100 * c.n + 1000 * d.n
		+ 10000 * e.n AS seq FROM $d a, $d b, $d c, $d d, $d e) s WHERE seq <= $2)"
}

# max_ttl_at_once DURATION: lockrunctl max-ttl DURATION, in effect for
# grants at once. On a server with a binary log (MySQL's default) a raise
# reaches grants only a minute later (migration 10, lockrunctl(1)); a test
# that needs the longer lease now takes that delay away.
max_ttl_at_once() {
	"$LOCKRUNCTL" -c "$LR_ADMIN_CONFIG" -q max-ttl "$1" &&
		sql "UPDATE lr_settings SET grant_ms = NULL, grant_until = NULL WHERE name = 'max_ttl_ms'"
}

# quiet_stmt: the statement lockrun's connections start with, which keeps
# them out of the slow query log (src/dbio.c, quiet_session): MySQL has no
# per-session switch, so a longest long_query_time stands for one there;
# and turns autocommit on and the server's statement time limit off.
quiet_stmt() {
	if lr_server_is_mysql; then
		echo 'SET SESSION long_query_time = 31536000, SESSION autocommit = 1, SESSION max_execution_time = 0'
	else
		echo 'SET SESSION log_slow_query = 0, SESSION autocommit = 1, SESSION max_statement_time = 0'
	fi
}

# reset_db: forget every resource, lease, waiter, grant and audit row, so a
# test starts from an empty (but initialised) schema.
reset_db() {
	sql "DELETE FROM lr_holds; DELETE FROM lr_waiters; DELETE FROM lr_grants;
		DELETE FROM lr_grant_items; DELETE FROM lr_fence_floor; DELETE FROM lr_once;
		DELETE FROM lr_resources; DELETE FROM lr_capacity_audit;"
}

# shellcheck source=tests/helpers/wait.bash
source "${BASH_SOURCE[0]%/*}/wait.bash"

# kill_pids: SIGKILL every process in the array pids (a test's background
# runs), for teardown; gone ones are fine.
kill_pids() {
	local p
	# shellcheck disable=SC2154 # pids is each test file's own array
	for p in "${pids[@]}"; do
		kill -KILL "$p" 2>/dev/null || true
	done
}

# findings CHECK JSON: the status and detail of each finding of CHECK in
# doctor's JSON, one per line, as "status|detail".
findings() {
	python3 -c 'import json, sys
for f in json.loads(sys.argv[2])["checks"]:
    if f["check"] == sys.argv[1]: print(f["status"] + "|" + f["detail"])' "$1" "$2"
}

# ctl ARGS...: lockrunctl as the administrator, quietly.
ctl() {
	"$LOCKRUNCTL" -c "$LR_ADMIN_CONFIG" -q "$@"
}

# holds [RESOURCE]: live permits held (of RESOURCE, or of everything).
holds() {
	# shellcheck disable=SC2016 # quotes for SQL, inside double quotes
	sql "SELECT COALESCE(SUM(permits), 0) FROM lr_holds${1:+ WHERE resource = '$1'}"
}

# waiters [RESOURCE]: queued requests (on RESOURCE, or anywhere).
waiters() {
	# shellcheck disable=SC2016 # quotes for SQL, inside double quotes
	sql "SELECT COUNT(DISTINCT request_id) FROM lr_waiters${1:+ WHERE resource = '$1'}"
}
