# shellcheck shell=bash
#
# Loaded by every Group Replication bats file:   load suite
#
# tests/run-group starts the group and exports LR_GROUP, LR_TMP, LOCKRUN
# and LOCKRUNCTL; run the files through it. The functions are in
# tests/helpers/group.bash (gr_*); a file's setup should begin with
# gr_reset, so that no test inherits the fault of the one before it. The
# setup and teardown below are the clients' tests': a file that defines
# its own after loading this one replaces them.

load "${LR_BATS_LIB:-/usr/lib/bats}/bats-support/load"
load "${LR_BATS_LIB:-/usr/lib/bats}/bats-assert/load"

if [[ -z ${LR_GROUP:-} || -z ${LOCKRUN:-} || -z ${LOCKRUNCTL:-} ]]; then
	echo "LR_GROUP/LOCKRUN/LOCKRUNCTL are not set: run the tests with tests/run-group" >&2
	return 1
fi

load ../helpers/group
load ../helpers/wait
load ../helpers/records

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

# clients_setup: for a test of clients under contention: $work, $rec (the
# children's records), $rcs (the runs' exit statuses), one config per
# order of the members, and $epochs0, the epochs so far.
clients_setup() {
	work=$BATS_TEST_TMPDIR
	rec=$work/rec
	rcs=$work/rcs
	: >"$rec"
	: >"$rcs"
	worker_pids=()
	# Each client tries every member, starting from another one; short
	# timeouts, so that a dead or frozen member costs seconds.
	local orders=("$(gr_addr 1), $(gr_addr 2), $(gr_addr 3)"
		"$(gr_addr 2), $(gr_addr 3), $(gr_addr 1)"
		"$(gr_addr 3), $(gr_addr 1), $(gr_addr 2)") k
	for k in 0 1 2; do
		gr_conf "$work/order$k.conf" "${orders[k]}" \
			"connect_timeout = 2" "read_timeout = 3" "write_timeout = 3"
	done
	# shellcheck disable=SC2034 # read by the test files that source this
	epochs0=$(gr_sql 1 "SELECT COUNT(*) FROM lr_epochs" lockrun)
}

# worker W NAME: runs of `lockrun -x NAME` with a 0.3 s child until
# $work/stop exists, config order(W mod 3); "W RUN STATUS TIME" of each
# run goes to $rcs. The wait (60 s) outlasts an election (about 22 s).
worker() {
	local w=$1 name=$2 r=0 rc
	lr_close_fds
	while [[ ! -e $work/stop ]]; do
		r=$((r + 1))
		rc=0
		timeout -k 10 120 "$LOCKRUN" -vv -c "$work/order$(((w - 1) % 3)).conf" -w 60 --ttl 6 \
			--kill-after 1 -x "$name" -- sh -c "$(fault_cmd "$rec" "$name" "w$w.$r" 0.3)" \
			2>>"$work/stderr.w$w" || rc=$?
		echo "$w $r $rc $(date +%T.%N)" >>"$rcs"
	done
}

start_workers() {
	local w
	for ((w = 1; w <= 15; w++)); do
		worker "$w" "$1" 3>&- &
		worker_pids+=($!)
	done
}

stop_workers() {
	((${#worker_pids[@]})) || return 0
	touch "$work/stop"
	wait "${worker_pids[@]}" || true
	worker_pids=()
}

# "exit STATUS: COUNT, ..." of the runs.
statuses() {
	awk '{ print $3 }' "$rcs" | sort -n | uniq -c |
		awk '{ printf "%sexit %d: %d", (NR > 1 ? ", " : ""), $2, $1 }'
}

# grants_after MS: how many children entered at MS (wall clock) or later.
grants_after() {
	awk -v t="$1" '$1 == "enter" && $6 >= t { c++ } END { print c + 0 }' "$rec"
}

granted_after() { (($(grants_after "$1") > 0)); }

# first_grant_after MS: the first enter time at MS or later.
first_grant_after() {
	awk -v t="$1" '$1 == "enter" && $6 >= t { if (!f || $6 < f) f = $6 } END { print f + 0 }' "$rec"
}

# sessions N: lockrun's sessions on member N (the runtime account's).
sessions() {
	gr_sql "$1" "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = 'lockrun'"
}

test_no_sessions() { (($(sessions "$1") == 0)); }

# proposed N: the transactions member N has proposed to the group itself,
# as its origin (a write there, of any client).
proposed() {
	gr_sql "$1" "SELECT COUNT_TRANSACTIONS_LOCAL_PROPOSED FROM performance_schema.replication_group_member_stats
		WHERE MEMBER_ID = @@server_uuid"
}

now_ms() { echo $(($(date +%s%N) / 1000000)); }

# primary_moved_under_workers NAME: the workers NAME (start_workers) on
# member 1 while group_replication_set_as_primary makes member 2 the
# primary: every session leaves member 1 (now super_read_only), holders at
# their next renewal, waiters at their next call; grants go on, one holder
# at a time. Prints when, and the runs' outcomes; fails the test if not.
primary_moved_under_workers() {
	local name=$1 t0 t_moved first
	start_workers "$name"
	sleep 6
	(($(sessions 1) > 0)) || fail "no client on member 1 before the change"
	t0=$(now_ms)
	gr_set_primary 2
	lr_wait_for -t 20 test_no_sessions 1 || fail "clients still on member 1: $(sessions 1)"
	t_moved=$(now_ms)
	lr_wait_for -t 20 granted_after "$t0" || fail "no grant after the change"
	first=$(first_grant_after "$t0")
	echo "# set_as_primary: no client left on member 1 after $(gr_ms_secs $((t_moved - t0))) s; first grant $(gr_ms_secs $((first - t0))) s after the change" >&3
	sleep 3
	stop_workers
	echo "# runs: $(statuses)" >&3
	run judge_ids "$rec" "$name" 1
	# shellcheck disable=SC2154 # output is set by bats's run
	echo "# $output" >&3
	assert_success
	assert_equal "$(sessions 1)" 0
}

# gr_ms_secs MS: MS milliseconds as seconds with one decimal.
gr_ms_secs() { printf '%d.%d' $(($1 / 1000)) $(($1 % 1000 / 100)); }

setup() {
	gr_reset
	clients_setup
}

teardown() {
	stop_workers
}
