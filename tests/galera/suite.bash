# shellcheck shell=bash
#
# Loaded by every Galera bats file:   load suite
#
# tests/run-galera starts the cluster and exports LR_GALERA, LOCKRUN and
# LOCKRUNCTL; run the files through it.

load "${LR_BATS_LIB:-/usr/lib/bats}/bats-support/load"
load "${LR_BATS_LIB:-/usr/lib/bats}/bats-assert/load"

if [[ -z ${LR_GALERA:-} || -z ${LOCKRUN:-} || -z ${LOCKRUNCTL:-} ]]; then
	echo "LR_GALERA/LOCKRUN/LOCKRUNCTL are not set: run the tests with tests/run-galera" >&2
	return 1
fi

load ../helpers/galera

# gsql N "SQL": SQL as root on node N in the lockrun database, as a causal
# read (wsrep_sync_wait): it sees every write committed anywhere before.
gsql() {
	local n=$1
	shift
	lr_galera_sql "$LR_GALERA" "$n" "SET SESSION wsrep_sync_wait = 15; $*" lockrun
}

# fresh_cluster DIR: waits until every node is up and synced (a test must
# not inherit the damage of one before it), empties the lock tables, and
# makes the test's work dir DIR (under LR_TMP, which tests/run-galera
# keeps when a test failed: records and logs go there).
fresh_cluster() {
	lr_galera_wait_cluster "$LR_GALERA" 3 90 1 2 3
	gsql 1 "DELETE FROM lr_holds; DELETE FROM lr_waiters; DELETE FROM lr_grants;
		DELETE FROM lr_resources; DELETE FROM lr_capacity_audit;"
	rm -rf "$1"
	mkdir -p "$1"
}

# The nodes that are up (the fault test restarts the one it kills, but a
# failed run may leave one down).
up_nodes() {
	local n
	for n in 1 2 3; do
		lr_galera_running "$LR_GALERA" "$n" && echo "$n"
	done
}

# Conflicts Galera resolved so far, summed over the nodes that are up:
# certification failures and brute-force aborts.
conflicts() {
	local n sum=0 v
	for n in $(up_nodes); do
		v=$(lr_galera_sql "$LR_GALERA" "$n" "SELECT SUM(VARIABLE_VALUE)
			FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME IN
			('WSREP_LOCAL_CERT_FAILURES', 'WSREP_LOCAL_BF_ABORTS')")
		sum=$((sum + ${v:-0}))
	done
	echo "$sum"
}
