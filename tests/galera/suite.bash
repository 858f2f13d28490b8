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
