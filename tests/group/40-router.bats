#!/usr/bin/env bats
#
# lockrun through MySQL Router's read-write port (run with tests/run-group):
# Router in front of the group (tests/helpers/group.bash, gr_router_start),
# following it through metadata the harness writes itself
# (tests/helpers/group-router.sql), and lockrun configured with one host,
# Router's. A lock taken there is taken on the primary; 15 clients keep one
# holder at a time and increasing tokens while the primary is killed, while
# it is frozen and while it is changed by the group; what Router's TLS
# settings make of lockrun's rules on certificates and RSA keys. Not cut
# off: the harness's cut (gr_cut) stops the member's group communication,
# which leaves its own view of the group as it was, and Router, which
# asks a member for the group's view, could be told by it that it is
# still the primary, which a member cut off by a real network would not
# say for long (it loses its majority).
#
# The clients under contention reach Router over verified TLS, as the
# documented set-up has it: Router's certificate for its address, Router's
# own TLS to the members.

bats_require_minimum_version 1.5.0

load suite

setup() {
	gr_reset
	clients_setup
	router_conf=$work/router.conf
}

teardown() {
	stop_workers
}

# router_clients: Router as gr_router_start makes it (TLS ends at Router,
# with a certificate for its address; Router's own TLS to the members),
# and the workers' configs (order0..2, read by worker) naming Router
# alone over verified TLS, with the suite's short timeouts.
router_clients() {
	local k
	gr_router_start
	for k in 0 1 2; do
		gr_router_conf "$work/order$k.conf" "connect_timeout = 2" "read_timeout = 3" \
			"write_timeout = 3" || return 1
	done
}

# router_member_other_than OLD: true once Router's port leads to a member
# other than OLD.
router_member_other_than() {
	local m
	m=$(gr_router_member) && [[ -n $m && $m != "$1" ]]
}

# why_not_zero: the workers' commonest last lines before a run that did
# not exit 0, printed.
why_not_zero() {
	grep -h '^lockrun: ' "$work"/stderr.w* | grep -v -e 'debug:' -e 'acquired' -e 'released' \
		-e 'waiting' | sed 's/[0-9][0-9]*/N/g' | sort | uniq -c | sort -rn | head -n 4 |
		sed 's/^/#   /' >&3
}

@test "through Router's read-write port alone: the lock is taken and released on the primary, never on a secondary" {
	local p1 p2 p3
	gr_router_start
	gr_router_conf "$router_conf"
	p1=$(proposed 1) p2=$(proposed 2) p3=$(proposed 3)
	run --separate-stderr "$LOCKRUN" -c "$router_conf" -x gr1 -- sh -c 'echo inside'
	assert_success
	assert_output inside
	# The grant and its release were the primary's transactions.
	(($(proposed 1) >= p1 + 2)) || fail "member 1 proposed $(($(proposed 1) - p1))"
	assert_equal "$(proposed 2)" "$p2"
	assert_equal "$(proposed 3)" "$p3"
	assert_equal "$(gr_sql 1 "SELECT COUNT(*) FROM lr_epochs" lockrun)" "$epochs0"
	# Routed to a secondary instead (the role Router would pick without
	# the group's view), the same config is refused: read-only there.
	GR_ROUTER_ROLE=SECONDARY gr_router_start
	run --separate-stderr "$LOCKRUN" -c "$router_conf" -n -x gr1 -- touch "$work/ran"
	gr_router_start
	assert_failure 69
	assert_regex "$stderr" "super_read_only\) is ON here \(1290\)$"
	[[ ! -e $work/ran ]]
}

# router_fault_run FAULT NAME: the workers through Router on NAME; after
# 6 s, FAULT on member 1 (the primary); wait for the election, then for
# Router to route to the new primary, then for the first grant after that
# (printed, and at most 10 s later); 4 s more, then everything stops and
# the judge reads the records. Leaves member 1 as the fault left it.
router_fault_run() {
	local fault=$1 name=$2 t0 t_el t_rt first new
	router_clients
	start_workers "$name"
	sleep 6
	(($(grants_after 0) > 0)) || fail "no grant before the fault"
	t0=$(now_ms)
	"gr_$fault" 1
	new=$(gr_wait_new_primary 1 90) || fail "no new primary"
	t_el=$(now_ms)
	lr_wait_for -t 30 router_member_other_than 1 || fail "Router does not route to member $new"
	t_rt=$(now_ms)
	assert_equal "$(gr_router_member)" "$new"
	lr_wait_for -t 30 granted_after "$t_rt" || fail "no grant within 30 s of Router's change"
	first=$(first_grant_after "$t_rt")
	echo "# $fault: member $new elected $(gr_ms_secs $((t_el - t0))) s after the fault, routed to by Router $(gr_ms_secs $((t_rt - t_el))) s later; first grant $(gr_ms_secs $((first - t_rt))) s after that" >&3
	(((first - t_rt) <= 10000)) || fail "first grant $((first - t_rt)) ms after Router's change"
	sleep 4
	stop_workers
	echo "# runs: $(statuses)" >&3
	why_not_zero
	run judge_ids "$rec" "$name" 1
	echo "# $output" >&3
	assert_success
	assert_equal "$(gr_sql "$new" "SELECT COUNT(*) FROM lr_epochs" lockrun)" "$epochs0"
}

@test "the primary killed under 15 clients through Router: one holder at a time, tokens increasing, grants again soon after Router routes to the new primary" {
	router_fault_run kill grk
}

# Frozen, the old primary answers nothing, Router's metadata refresh
# included: Router asks another member, and the clients whose statements
# hang there give up after their read_timeout and reconnect through it.
@test "the primary frozen under 15 clients through Router: one holder at a time, tokens increasing, grants again soon after Router routes to the new primary" {
	router_fault_run freeze grz
	gr_thaw 1
}

# Router drops its connections to a member that is no longer the primary
# at its next metadata refresh (ttl 0.5 s): holders and waiters reconnect
# through it and reach the new one.
@test "set_as_primary under 15 clients through Router: Router cuts the old primary's connections, clients move, one holder at a time" {
	local p3
	router_clients
	p3=$(proposed 3)
	primary_moved_under_workers grs
	why_not_zero
	assert_equal "$(proposed 3)" "$p3"
	grep -q "Disconnecting client .* from server $(gr_addr 1):" "$(gr_router_dir)/mysqlrouter.log"
	assert_equal "$(gr_sql 2 "SELECT COUNT(*) FROM lr_epochs" lockrun)" "$epochs0"
}

# What Router's TLS settings make of lockrun's rules: TLS ends at Router
# (client_ssl_mode REQUIRED), so the certificate lockrun verifies is
# Router's, for the name in `host`; Router cannot forward a password that
# lockrun encrypted with the member's key (server_public_key) whenever the
# member asks for the whole exchange (its password cache is empty: after
# FLUSH PRIVILEGES or a restart).
@test "TLS through Router: Router's certificate is verified against its address; a key-encrypted password is not forwarded" {
	local dir n
	dir=$(gr_router_dir)
	gr_router_start
	gr_router_conf "$router_conf"
	for n in 1 2 3; do gr_sql "$n" "FLUSH PRIVILEGES"; done
	# Verified TLS to Router, and Router's own TLS to the member: works
	# with nothing cached.
	run "$LOCKRUN" -c "$router_conf" -x grt -- true
	assert_success
	# Without TLS, Router refuses before the password is sent.
	gr_conf "$work/plain.conf" "$(gr_router_addr)"
	sed -i "s/^port = .*/port = $(gr_router_port)/" "$work/plain.conf"
	run -69 "$LOCKRUN" -c "$work/plain.conf" -x grt -- true
	# A certificate that names another address (127.0.0.1) is refused.
	gr_router_start "client_ssl_mode = REQUIRED" "client_ssl_cert = $dir/tls/server.pem" \
		"client_ssl_key = $dir/tls/server-key.pem" "server_ssl_mode = REQUIRED"
	run -69 "$LOCKRUN" -c "$router_conf" -x grt -- true
	# PASSTHROUGH: lockrun's RSA exchange with the member's key does not
	# get through Router while the member has no cached password.
	gr_router_start "client_ssl_mode = PASSTHROUGH"
	for n in 1 2 3; do gr_sql "$n" "FLUSH PRIVILEGES"; done
	run -69 --separate-stderr "$LOCKRUN" -c "$work/plain.conf" -x grt -- true
	assert_regex "$stderr" "Lost connection to server at 'reading authorization packet'"
	gr_router_warm
	run "$LOCKRUN" -c "$work/plain.conf" -x grt -- true
	assert_success
}
