# shellcheck shell=bash
#
# Loaded by every Group Replication bats file:   load suite
#
# tests/run-group starts the group and exports LR_GROUP, LR_TMP, LOCKRUN
# and LOCKRUNCTL; run the files through it. The functions are in
# tests/helpers/group.bash (gr_*); a file's setup should begin with
# gr_reset, so that no test inherits the fault of the one before it.

load "${LR_BATS_LIB:-/usr/lib/bats}/bats-support/load"
load "${LR_BATS_LIB:-/usr/lib/bats}/bats-assert/load"

if [[ -z ${LR_GROUP:-} || -z ${LOCKRUN:-} || -z ${LOCKRUNCTL:-} ]]; then
	echo "LR_GROUP/LOCKRUN/LOCKRUNCTL are not set: run the tests with tests/run-group" >&2
	return 1
fi

load ../helpers/group
load ../helpers/wait

# gr_lockrun_sql N "SQL": SQL as lockrun's runtime account ('lockrun', its
# default role active) on member N over TCP, as lockrun connects (the
# client takes TLS, which MySQL offers with a certificate of its own making).
gr_lockrun_sql() {
	MYSQL_PWD=$(<"$LR_GROUP/lockrun.pw") timeout 10 mariadb --no-defaults \
		--skip-ssl-verify-server-cert \
		-h "$(gr_addr "$1")" -P "$(gr_port)" -u lockrun -N -B -e "$2"
}

# gr_seconds_since T: seconds (with a fraction) since $EPOCHREALTIME was T.
gr_seconds_since() {
	local now=${EPOCHREALTIME/[.,]/} then=${1/[.,]/}
	printf '%d.%01d' $(((now - then) / 1000000)) $(((now - then) % 1000000 / 100000))
}
