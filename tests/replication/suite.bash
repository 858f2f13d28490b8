# shellcheck shell=bash
#
# Loaded by every replication bats file:   load suite
#
# tests/run-replication starts the primary and its replica and exports
# LR_REPL, LR_TMP, LOCKRUN and LOCKRUNCTL; run the files through it. The
# functions are in tests/helpers/replication.bash (repl_*); a file's setup
# should begin with repl_reset, so that no test inherits the fail-over of
# the one before it:
#
#   setup() {
#       repl_reset
#       repl_clear_lockrun
#       work=$LR_TMP/$(basename "$BATS_TEST_FILENAME" .bats).$BATS_TEST_NUMBER
#       mkdir -p "$work"
#   }

load "${LR_BATS_LIB:-/usr/lib/bats}/bats-support/load"
load "${LR_BATS_LIB:-/usr/lib/bats}/bats-assert/load"

if [[ -z ${LR_REPL:-} || -z ${LOCKRUN:-} || -z ${LOCKRUNCTL:-} ]]; then
	echo "LR_REPL/LOCKRUN/LOCKRUNCTL are not set: run the tests with tests/run-replication" >&2
	return 1
fi

load ../helpers/replication

# rsql N "SQL": SQL as root on node N in the lockrun database. Unlike
# Galera's gsql this is NOT a causal read: on the replica it sees what the
# replica has applied so far (repl_wait_caught_up first for everything).
rsql() {
	local n=$1
	shift
	repl_sql "$n" "$*" lockrun
}

# repl_clear_lockrun: forget every resource, lease, waiter, grant and audit
# row, through the primary, and wait until the replica has applied that too.
repl_clear_lockrun() {
	rsql "$(repl_primary)" "DELETE FROM lr_holds; DELETE FROM lr_waiters;
		DELETE FROM lr_grants; DELETE FROM lr_grant_items; DELETE FROM lr_fence_floor;
		DELETE FROM lr_once; DELETE FROM lr_resources; DELETE FROM lr_capacity_audit;" &&
		repl_wait_caught_up
}
