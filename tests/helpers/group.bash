# shellcheck shell=bash
#
# A throwaway MySQL Group Replication group of three members on this
# machine, for tests/run-group and tests/group/*.bats. MySQL only: the
# members run the server of LR_SERVER_ROOT (serverroot.bash, mysql-9.7).
# Built on server.bash: each member is an ordinary instance directory, so
# its functions work per member. Every function here works on the group in
# $LR_GROUP (tests/run-group exports it).
#
#   LR_GROUP/n1 n2 n3      the members' instance dirs (see server.bash)
#   LR_GROUP/pristine      a data dir as initialised, for gr_rebuild
#   LR_GROUP/group.env     ports, group name, recovery password
#   LR_GROUP/lockrun.pw    password of the 'lockrun'@'%' account
#   LR_GROUP/key.pem       the members' RSA public key (one for all: below)
#   LR_GROUP/nodeN.conf    lockrun config talking to member N only
#   LR_GROUP/all.conf      host = 127.0.0.21, 127.0.0.22, 127.0.0.23
#   LR_GROUP/adminN.conf   root over member N's socket (lockrunctl)
#
# Member N listens on its own loopback address 127.0.0.2N (Linux routes all
# of 127.0.0.0/8 to lo), server_id 2N, every member on the SAME SQL port:
# lockrun's `host` list shares one `port`, so this is how one client config
# names all three. Each member's group communication (XCom) listens on
# 127.0.0.1 and a port of its own (group_replication_local_address; XCom
# refuses an address no interface has, and lo has only 127.0.0.1); every
# member lists all three as seeds. report_host is the member's address:
# MEMBER_HOST in replication_group_members, and the address a joiner's
# distributed recovery connects to, would otherwise be the machine's host
# name for all three.
#
# Apart from what Group Replication requires (GTIDs, the plugin, a group
# name, addresses, a recovery account), the servers keep their defaults:
# single-primary mode, group_replication_consistency
# BEFORE_ON_PRIMARY_FAILOVER, a member suspected after 5 s of silence and
# expelled 5 s later (group_replication_member_expel_timeout), an expelled
# member super_read_only (exit_state_action READ_ONLY) and trying to rejoin
# by itself (autorejoin_tries 3, five minutes apart). Member 1 bootstraps
# the group and is its primary after gr_start and gr_reset.
#
# The members' data dirs are copies of one initialised data dir (without
# its auto.cnf, so each makes a server_uuid of its own): one initialisation
# instead of three, and one RSA key pair, so that one client config can
# name the key of every member (server_public_key) instead of taking it
# from the network.
#
# Keep LR_GROUP short (a socket path must fit in 108 bytes), under /tmp
# (the server root shares only /tmp), and reachable by the mysql user, e.g.
# /tmp/lrq.XXXXXX/g with mode 755.
#
# This file only defines functions and variables: it sets no shell options.

if ! declare -F lr_server_start >/dev/null; then
	# shellcheck source=tests/helpers/server.bash
	source "${BASH_SOURCE[0]%/*}/server.bash"
fi

# The client (this machine's), and python3 for gr_cut.
# shellcheck disable=SC2034 # used by tests/run-group
LR_GROUP_PACKAGES=(mariadb-client python3)

LR_GROUP_MEMBERS=3

# gr_node N: the instance dir of member N.
gr_node() { echo "$LR_GROUP/n$1"; }

# gr_addr N: the loopback address of member N.
gr_addr() { echo "127.0.0.2$1"; }

# gr_addr_node ADDR: the member whose address ADDR is (MEMBER_HOST).
gr_addr_node() { [[ $1 == 127.0.0.2[1-9] ]] && echo "${1#127.0.0.2}"; }

_gr_say() { printf 'lockrun-test: group: %s\n' "$*" >&2; }

_gr_env() {
	# shellcheck source=/dev/null
	source "$LR_GROUP/group.env"
}

# gr_port: the SQL port of every member.
gr_port() {
	_gr_env
	echo "$GR_SQL_PORT"
}

gr_running() { lr_server_running "$(gr_node "$1")"; }

# gr_frozen N: true if member N's server is stopped by SIGSTOP (gr_freeze).
gr_frozen() {
	local pid stat
	pid=$(lr_server_pid "$(gr_node "$1")") || return 1
	read -r stat <"/proc/$pid/stat" || return 1
	stat=${stat##*) }
	[[ ${stat%% *} == T ]]
}

# gr_sql N "SQL" [DATABASE]: SQL as root on member N over its socket, batch
# mode, no column names, bounded in time: a dead or frozen member must not
# hang the caller: 10 s, or GR_SQL_TIMEOUT. super_read_only, which a
# secondary has, stops root too.
gr_sql() {
	local n=$1 sql=$2 db=${3:-}
	local -a opts=(-N -B)
	[[ -n $db ]] && opts+=(-D "$db")
	timeout "${GR_SQL_TIMEOUT:-10}" mariadb --no-defaults --socket="$(gr_node "$n")/mysqld.sock" \
		--connect-timeout=3 -u"$(lr_admin_user)" "${opts[@]}" -e "$sql"
}

# gr_uuid N: member N's server_uuid (its MEMBER_ID), remembered in its
# instance dir: a frozen or dead member is still named by it.
gr_uuid() {
	local f
	f=$(gr_node "$1")/server.uuid
	[[ -s $f ]] || gr_sql "$1" "SELECT @@server_uuid" >"$f" || return 1
	cat "$f"
}

# gr_view N: the group as member N sees it, one line per member as
# performance_schema.replication_group_members lists it (no ORDER BY):
# "N ROLE STATE", e.g. "2 SECONDARY ONLINE". A member that is in no group
# lists itself alone, OFFLINE, with an empty role (shown as "-").
gr_view() {
	gr_sql "$1" "SELECT MEMBER_HOST, IF(MEMBER_ROLE = '', '-', MEMBER_ROLE), MEMBER_STATE
		FROM performance_schema.replication_group_members" 2>/dev/null |
		while IFS=$'\t' read -r host role state; do
			echo "$(gr_addr_node "$host" || echo "$host") $role $state"
		done
}

# gr_state N: member N's state as it reports itself (ONLINE, RECOVERING,
# ERROR, OFFLINE, ...), or nothing if it does not answer.
gr_state() {
	gr_sql "$1" "SELECT MEMBER_STATE FROM performance_schema.replication_group_members
		WHERE MEMBER_ID = @@server_uuid" 2>/dev/null
}

# gr_primaries [N]: the PRIMARY members as member N sees them, by number,
# one per line (several in multi-primary mode). Without N, as the first
# member that answers and reports itself ONLINE sees them; nothing if none.
gr_primaries() {
	local n
	if (($#)); then
		gr_view "$1" | awk '$3 == "ONLINE" && $2 == "PRIMARY" { print $1 }'
		return 0
	fi
	for ((n = 1; n <= LR_GROUP_MEMBERS; n++)); do
		gr_frozen "$n" && continue
		[[ $(gr_state "$n") == ONLINE ]] || continue
		gr_primaries "$n"
		return 0
	done
}

# gr_primary [N]: the one primary (as gr_primaries sees it); fails if there
# is none or several.
gr_primary() {
	local -a p
	mapfile -t p < <(gr_primaries "$@")
	((${#p[@]} == 1)) || return 1
	echo "${p[0]}"
}

# gr_secondaries: the ONLINE members that are not the primary, by number.
gr_secondaries() {
	local p n
	p=$(gr_primary) || return 1
	for ((n = 1; n <= LR_GROUP_MEMBERS; n++)); do
		[[ $n == "$p" ]] && continue
		gr_frozen "$n" && continue
		[[ $(gr_state "$n") == ONLINE ]] && echo "$n"
	done
	return 0
}

# gr_online N...: true if every member N reports itself ONLINE and all of
# them see the same members in the same roles and states, ONLINE exactly
# these. One round of queries.
gr_online() {
	local n want seen='' v
	want=$(printf '%s\n' "$@" | sort | tr '\n' ' ')
	for n; do
		gr_frozen "$n" && return 1
		v=$(gr_view "$n") || return 1
		[[ $(awk '$3 == "ONLINE" { print $1 }' <<<"$v" | sort | tr '\n' ' ') == "$want" ]] ||
			return 1
		v=$(sort <<<"$v")
		[[ -z $seen || $seen == "$v" ]] || return 1
		seen=$v
	done
	[[ -n $seen ]]
}

# gr_wait_online SECONDS N...: wait until gr_online N...; on timeout, say
# what each member sees.
gr_wait_online() {
	local secs=$1 n end
	shift
	end=$((SECONDS + secs))
	while ((SECONDS < end)); do
		gr_online "$@" && return 0
		sleep 0.2
	done
	_gr_say "members $* are not ONLINE together after ${secs}s"
	for n; do
		_gr_say "member $n sees: $(gr_view "$n" | tr '\n' ';')"
	done
	return 1
}

# gr_wait_new_primary OLD SECONDS: wait until an ONLINE member other than
# OLD sees a primary other than OLD; print its number. Polls every 0.1 s
# plus the queries' time (a second or so on a loaded machine): the error
# logs ("was elected") say when the group decided.
gr_wait_new_primary() {
	local old=$1 secs=$2 n p end
	end=$((SECONDS + secs))
	while ((SECONDS < end)); do
		for ((n = 1; n <= LR_GROUP_MEMBERS; n++)); do
			[[ $n == "$old" ]] && continue
			gr_frozen "$n" && continue
			p=$(gr_primary "$n" 2>/dev/null) || continue
			[[ $p != "$old" ]] && echo "$p" && return 0
		done
		sleep 0.1
	done
	_gr_say "no new primary after ${secs}s (the old one was member $old)"
	return 1
}

# The mysqld arguments of member N (after server.bash's own, so these win),
# one per line: what Group Replication needs, nothing else. Not started at
# boot: gr_bootstrap and gr_join start it, so that a restarted member joins
# only when told to. tmpdir per member, as for Galera (galera.bash).
_gr_args() {
	local n=$1 i seeds=
	_gr_env
	for ((i = 1; i <= LR_GROUP_MEMBERS; i++)); do
		local xp=GR_XCOM_PORT_$i
		seeds+="${seeds:+,}127.0.0.1:${!xp}"
	done
	local xp=GR_XCOM_PORT_$n
	printf '%s\n' \
		--bind-address="$(gr_addr "$n")" \
		--report-host="$(gr_addr "$n")" \
		--server-id="2$n" \
		--tmpdir="$(gr_node "$n")" \
		--gtid-mode=ON \
		--enforce-gtid-consistency=ON \
		--plugin-load-add=group_replication.so \
		--group-replication-group-name="$GR_GROUP_NAME" \
		--group-replication-local-address="127.0.0.1:${!xp}" \
		--group-replication-group-seeds="$seeds" \
		--group-replication-start-on-boot=OFF \
		--group-replication-recovery-get-public-key=ON \
		--super-read-only=ON
	# recovery_get_public_key: distributed recovery logs in to the donor
	# as 'grrepl' with caching_sha2_password over a connection without
	# TLS, which needs the donor's public key. super_read_only: a member
	# starts read-only, as InnoDB Cluster's members do (MySQL Shell
	# persists it), and the group makes its primary writable; a member
	# restarted but not (yet) back in the group would otherwise be a
	# writable server of its own beside the group, which lockrun takes
	# for another server (a new epoch) and grants on (the campaign met it:
	# a killed member whose join failed).
}

# _gr_node_start N: start member N's server (not in the group yet) and wait
# until it answers. In a subshell without our fds above 2, so it is safe
# from inside a test. A killed member may need crash recovery: 60 s.
_gr_node_start() {
	local n=$1
	local -a args
	_gr_env
	mapfile -t args < <(_gr_args "$n")
	(
		lr_close_fds
		LR_SERVER_START_TIMEOUT=${LR_SERVER_START_TIMEOUT:-60} \
			lr_server_start "$(gr_node "$n")" "$GR_SQL_PORT" "${args[@]}"
	)
}

# The START that makes member N join (or bootstrap): with the recovery
# account's credentials, which the server then keeps in memory only.
_gr_start_sql() {
	_gr_env
	echo "START GROUP_REPLICATION USER = 'grrepl', PASSWORD = '$GR_RECOVERY_PASSWORD'"
}

# gr_bootstrap N: member N starts a new group, alone, and is its primary.
# START GROUP_REPLICATION returns once the member is in the group's view,
# which on a loaded machine took more than 10 s: 120 s for it.
gr_bootstrap() {
	GR_SQL_TIMEOUT=120 gr_sql "$1" "SET GLOBAL group_replication_bootstrap_group = ON;
		$(_gr_start_sql);
		SET GLOBAL group_replication_bootstrap_group = OFF" || return 1
	gr_wait_online 30 "$1"
}

# gr_join N [SECONDS]: member N (running, in no group) joins the group and
# recovers what it lacks from a member; waits until it is ONLINE (default
# 60 s). START GROUP_REPLICATION returns once the member is RECOVERING (see
# gr_bootstrap).
gr_join() {
	local n=$1 secs=${2:-60} st='' end
	GR_SQL_TIMEOUT=120 gr_sql "$n" "$(_gr_start_sql)" || return 1
	end=$((SECONDS + secs))
	while ((SECONDS < end)); do
		st=$(gr_state "$n")
		[[ $st == ONLINE ]] && return 0
		[[ $st == ERROR ]] && break
		sleep 0.2
	done
	_gr_say "member $n did not become ONLINE (it says: '${st:-nothing}'); end of its log:"
	tail -n 15 "$(gr_node "$n")/mysqld.err" >&2
	return 1
}

# gr_leave N: member N leaves the group (STOP GROUP_REPLICATION): the others
# see it go at once, as a planned departure; it stays up, super_read_only.
gr_leave() { GR_SQL_TIMEOUT=120 gr_sql "$1" "STOP GROUP_REPLICATION"; }

# Faults on member N: crash (SIGKILL), freeze (SIGSTOP) and thaw (SIGCONT).
gr_kill() { lr_server_kill "$(gr_node "$1")"; }
gr_freeze() { lr_server_pause "$(gr_node "$1")"; }
gr_thaw() { lr_server_resume "$(gr_node "$1")"; }

# gr_cut N / gr_uncut N: cut member N off from the group, and let it back.
# Its group communication threads (gcs_xcom) are stopped by ptrace
# (tests/tools/threadstop.py), so that it neither sends to the others nor
# answers them, while its server goes on answering SQL, as a member on the
# far side of a broken link does; no firewall rule, nothing else touched.
# Unlike a real partition, the member's own view stays as it was at the
# cut (its XCom does not run to mark the others UNREACHABLE). Needs root.
gr_cut() {
	local n=$1 pid out i
	[[ -e $LR_GROUP/cut$n.pid ]] && return 0
	pid=$(lr_server_pid "$(gr_node "$n")") || return 1
	out=$LR_GROUP/cut$n.out
	(
		lr_close_fds
		exec python3 "$LR_SRC/tests/tools/threadstop.py" "$pid" gcs_xcom </dev/null >"$out" 2>&1
	) &
	echo $! >"$LR_GROUP/cut$n.pid"
	for ((i = 0; i < 300; i++)); do
		grep -qx ready "$out" 2>/dev/null && return 0
		kill -0 "$(<"$LR_GROUP/cut$n.pid")" 2>/dev/null || break
		sleep 0.1
	done
	_gr_say "member $n could not be cut off: $(cat "$out")"
	gr_uncut "$n"
	return 1
}

gr_uncut() {
	local f=$LR_GROUP/cut$1.pid
	[[ -e $f ]] || return 0
	kill "$(<"$f")" 2>/dev/null
	rm -f "$f"
}

# gr_restart N: start member N's server again (after gr_kill) and make it
# join; gr_rejoin does whatever member N needs.
gr_restart() {
	_gr_node_start "$1" && gr_join "$1"
}

# gr_rejoin N: bring member N back into the group from whatever state it is
# in: thawed if frozen, let back if cut off, started if down, and STOP then
# START GROUP_REPLICATION if it is not ONLINE (an expelled member stays
# ERROR, or tries to rejoin by itself minutes later).
gr_rejoin() {
	local n=$1
	gr_uncut "$n"
	gr_frozen "$n" && gr_thaw "$n"
	if ! gr_running "$n"; then
		gr_restart "$n"
		return
	fi
	[[ $(gr_state "$n") == ONLINE ]] && return 0
	gr_leave "$n" >/dev/null 2>&1
	gr_join "$n"
}

# gr_set_primary N: make member N the primary (a planned change:
# group_replication_set_as_primary, asked of the primary of the moment).
gr_set_primary() {
	local p
	p=$(gr_primary) || return 1
	[[ $p == "$1" ]] && return 0
	GR_SQL_TIMEOUT=120 gr_sql "$p" "SELECT group_replication_set_as_primary('$(gr_uuid "$1")')" >/dev/null
}

# gr_consistency LEVEL: group_replication_consistency (EVENTUAL,
# BEFORE_ON_PRIMARY_FAILOVER, BEFORE, AFTER, BEFORE_AND_AFTER, or DEFAULT)
# on every member that answers: the setting is each member's own, and what
# counts at a fail-over is the new primary's. A restart resets it.
gr_consistency() {
	local n
	for ((n = 1; n <= LR_GROUP_MEMBERS; n++)); do
		gr_frozen "$n" && continue
		gr_running "$n" || continue
		gr_sql "$n" "SET GLOBAL group_replication_consistency = $1" || return 1
	done
}

# gr_multi_primary: every member a primary (update everywhere). gr_single_primary
# [N]: back to one primary, member N (default 1). Both are the group's own
# actions, asked of an ONLINE member; they return once the group has changed.
gr_multi_primary() {
	local n
	n=$(gr_primaries | head -n 1)
	[[ -n $n ]] || return 1
	GR_SQL_TIMEOUT=120 gr_sql "$n" "SELECT group_replication_switch_to_multi_primary_mode()" >/dev/null
}

gr_single_primary() {
	local n
	n=$(gr_primaries | head -n 1)
	[[ -n $n ]] || return 1
	GR_SQL_TIMEOUT=120 gr_sql "$n" "SELECT group_replication_switch_to_single_primary_mode('$(gr_uuid "${1:-1}")')" >/dev/null
}

# gr_multi: true if the group is in multi-primary mode.
gr_multi() {
	local n
	n=$(gr_primaries | head -n 1)
	[[ $(gr_sql "$n" "SELECT @@group_replication_single_primary_mode") == 0 ]]
}

# gr_conf FILE HOSTS [LINE...]: a lockrun config for the 'lockrun' account
# with `host = HOSTS` and the group's port and key; each LINE (e.g.
# "read_timeout = 3") is added to [database]. Without the host's queue:
# every lockrun here stands for a host of its own.
gr_conf() {
	local file=$1 hosts=$2
	shift 2
	_gr_env
	(
		umask 077
		{
			echo "[lock]"
			echo "local_queue = off"
			echo "[database]"
			echo "host = $hosts"
			echo "port = $GR_SQL_PORT"
			echo "user = lockrun"
			echo "password_file = $LR_GROUP/lockrun.pw"
			echo "database = lockrun"
			echo "server_public_key = $LR_GROUP/key.pem"
			if (($#)); then
				printf '%s\n' "$@"
			else
				echo "connect_timeout = 5"
			fi
		} >"$file"
	)
}

# gr_ctl N ARGS...: lockrunctl as root on member N.
gr_ctl() {
	local n=$1
	shift
	"$LOCKRUNCTL" -c "$LR_GROUP/admin$n.conf" "$@"
}

# gr_start: create the members, start them (super_read_only); member 1
# bootstraps the group and, as its primary, gets lockrun's database and
# accounts (sql/grant.sql) and, with $LOCKRUNCTL set, `lockrunctl init`; then
# the others join, recovering all of that from it. Writes the client
# configs. Returns with all three ONLINE, member 1 the primary.
gr_start() {
	local n i rc=0
	local -a pids=()
	mkdir -p "$LR_GROUP"
	LR_GROUP=$(_lr_abs "$LR_GROUP")
	chmod 755 "$LR_GROUP"
	local pw
	pw=$(openssl rand -hex 16) || return 1 # hex: no quoting trouble
	(
		umask 077
		echo "GR_SQL_PORT=$(lr_free_port)" || exit 1
		for ((n = 1; n <= LR_GROUP_MEMBERS; n++)); do
			echo "GR_XCOM_PORT_$n=$(lr_free_port)" || exit 1
		done
		echo "GR_GROUP_NAME=$(cat /proc/sys/kernel/random/uuid)"
		echo "GR_RECOVERY_PASSWORD=$pw"
	) >"$LR_GROUP/group.env" || return 1

	# One data dir, initialised with the recovery account in it (not
	# binlogged: no member has a transaction of its own before the group
	# starts), then copied. A small redo log: the copies are smaller.
	local init=$LR_GROUP/init.sql pristine=$LR_GROUP/pristine
	printf '%s\n' "CREATE USER 'grrepl'@'127.0.0.%' IDENTIFIED BY '$pw';" \
		"GRANT REPLICATION SLAVE ON *.* TO 'grrepl'@'127.0.0.%';" >"$init"
	_lr_in_root chown mysql: "$init" && chmod 600 "$init" || return 1
	lr_server_init "$pristine" --init-file="$init" --innodb-redo-log-capacity=16M || return 1
	rm -f "$init" "$pristine/data/auto.cnf"
	cp "$pristine/data/public_key.pem" "$LR_GROUP/key.pem" && chmod 644 "$LR_GROUP/key.pem" ||
		return 1
	for ((n = 1; n <= LR_GROUP_MEMBERS; n++)); do
		mkdir -p "$(gr_node "$n")" && cp -a "$pristine/data" "$(gr_node "$n")/data" || return 1
		_lr_in_root chown mysql: "$(gr_node "$n")" || return 1
	done
	# Member 1 first, alone; the others start while it is provisioned.
	# Three starts at once took 30 s on two loaded cores, one alone 7 s.
	_gr_node_start 1 || return 1
	for ((n = 2; n <= LR_GROUP_MEMBERS; n++)); do
		_gr_node_start "$n" 3>&- &
		pids+=($!)
	done

	gr_bootstrap 1 || rc=1
	# Database and accounts on member 1, the group's primary (writable).
	local n1
	n1=$(gr_node 1)
	((rc == 0)) && lr_provision "$n1" || rc=1
	((rc == 0)) && (umask 077 && cp "$n1/lockrun.pw" "$LR_GROUP/lockrun.pw") || rc=1
	for ((n = 1; n <= LR_GROUP_MEMBERS; n++)); do
		(
			umask 077
			cat >"$LR_GROUP/admin$n.conf" <<-EOF
				[database]
				socket = $(gr_node "$n")/mysqld.sock
				user = $(lr_admin_user)
				database = lockrun
			EOF
		) || return 1
		gr_conf "$LR_GROUP/node$n.conf" "$(gr_addr "$n")" || return 1
	done
	gr_conf "$LR_GROUP/all.conf" "$(gr_addr 1), $(gr_addr 2), $(gr_addr 3)" || return 1

	# lockrun's schema on the primary of the group, as an administrator
	# installs it on a running group: its first epoch is the group's.
	if ((rc == 0)) && [[ -n ${LOCKRUNCTL:-} ]]; then
		gr_ctl 1 init >/dev/null || rc=1
	fi
	for i in "${pids[@]}"; do wait "$i" || rc=1; done
	((rc == 0)) || return 1
	for ((n = 2; n <= LR_GROUP_MEMBERS; n++)); do
		gr_join "$n" || return 1
	done
	gr_wait_online 30 1 2 3
}

# gr_rebuild N: member N from scratch: its server stopped, its data dir
# replaced by the pristine one (a new server_uuid), started and joined: it
# recovers everything from a member's binary log. For a member the group
# will not take back (one with transactions the group lacks).
gr_rebuild() {
	local n=$1 inst
	inst=$(gr_node "$n")
	gr_uncut "$n"
	lr_server_stop "$inst" || return 1
	rm -rf "$inst/data" "$inst/server.uuid" &&
		cp -a "$LR_GROUP/pristine/data" "$inst/data" || return 1
	gr_restart "$n"
}

# True if the group is as gr_start left it: all three up, none frozen or
# cut off, ONLINE together, single-primary with member 1 the primary, and
# the consistency level the default on each.
_gr_pristine() {
	local n
	for ((n = 1; n <= LR_GROUP_MEMBERS; n++)); do
		[[ -e $LR_GROUP/cut$n.pid ]] && return 1
		gr_running "$n" && ! gr_frozen "$n" || return 1
		[[ $(gr_sql "$n" "SELECT @@group_replication_consistency,
			@@group_replication_single_primary_mode") == "BEFORE_ON_PRIMARY_FAILOVER	1" ]] ||
			return 1
	done
	gr_online 1 2 3 && [[ $(gr_primary) == 1 ]]
}

# gr_reset: bring the group back to what gr_start left (member 1 primary of
# three ONLINE members, single-primary, default consistency), for a test
# that must not inherit the one before it. Cheap if nothing changed; else
# each member is thawed, let back, started or rejoined as it needs (a member
# that cannot rejoin is rebuilt), the group bootstrapped again by member 1
# if no member is left in it, and member 1 made the primary. lockrun's rows
# stay: clear them yourself.
gr_reset() {
	local n any=
	_gr_pristine && return 0
	for ((n = 1; n <= LR_GROUP_MEMBERS; n++)); do
		gr_uncut "$n"
		gr_frozen "$n" && gr_thaw "$n"
		gr_running "$n" || _gr_node_start "$n" || return 1
		[[ $(gr_state "$n") == ONLINE ]] && any=1
	done
	if [[ -z $any ]]; then
		_gr_say "no member is ONLINE: member 1 bootstraps the group again"
		gr_leave 1 >/dev/null 2>&1
		gr_bootstrap 1 || return 1
	fi
	for ((n = 1; n <= LR_GROUP_MEMBERS; n++)); do
		[[ $(gr_state "$n") == ONLINE ]] && continue
		gr_rejoin "$n" || {
			_gr_say "member $n does not rejoin: rebuilding it"
			gr_rebuild "$n"
		} || return 1
	done
	gr_wait_online 30 1 2 3 || return 1
	gr_multi && { gr_single_primary 1 || return 1; }
	gr_set_primary 1 || return 1
	gr_consistency DEFAULT || return 1
	gr_wait_online 30 1 2 3 && [[ $(gr_primary) == 1 ]]
}

# gr_stop: stop every member (in parallel; a frozen one is thawed first by
# lr_server_stop) and any cut. Fine to call on a group partly or wholly down.
gr_stop() {
	local n i rc=0
	local -a pids=()
	[[ -n ${LR_GROUP:-} && -d $LR_GROUP ]] || return 0
	for ((n = 1; n <= LR_GROUP_MEMBERS; n++)); do
		gr_uncut "$n"
		[[ -d $LR_GROUP/n$n ]] || continue
		lr_server_stop "$(gr_node "$n")" 3>&- &
		pids+=($!)
	done
	for i in "${pids[@]}"; do wait "$i" || rc=1; done
	return "$rc"
}

# --- MySQL Router ----------------------------------------------------------
#
# MySQL Router (Debian's mysql-router, in the server's root) in front of
# the group: its metadata cache follows the group through the InnoDB
# Cluster metadata, which MySQL Shell writes and the tests write instead
# (tests/helpers/group-router.sql); its [routing:rw] section sends each new
# classic connection to the primary of the moment. Router listens on
# 127.0.0.20 and a port of its own, reads the metadata and the members'
# state as 'lrrouter', and runs as mysql in the server's root. Its files
# are in LR_GROUP/router: mysqlrouter.conf, state.json (the metadata
# servers), the keyring with the account's password, mysqlrouter.log, and
# tls/ (a CA, and Router's certificate for 127.0.0.20 signed by it).

# The package, for tests/run-group (lr_server_root_add).
# shellcheck disable=SC2034 # used by tests/run-group
LR_GROUP_ROOT_PACKAGES=(mysql-router)

gr_router_dir() { echo "$LR_GROUP/router"; }
gr_router_addr() { echo 127.0.0.20; }

# gr_router_port: Router's read-write classic port.
gr_router_port() { cat "$(gr_router_dir)/port"; }

# _gr_router_metadata PASSWORD: the metadata, written on the primary (every
# member has it then), naming members 1..3 and router_id 1; Router's
# account 'lrrouter' gets PASSWORD.
_gr_router_metadata() {
	local pw=$1 n members='' p sql
	_gr_env
	for ((n = 1; n <= LR_GROUP_MEMBERS; n++)); do
		members+="${members:+, }('@CLUSTER_ID@', '$(gr_uuid "$n")', '$(gr_addr "$n"):$GR_SQL_PORT')"
	done
	p=$(gr_primary) || return 1
	sql=$(sed -e "s|@MEMBERS@|$members|" -e "s|@CLUSTER_ID@|$GR_GROUP_NAME|g" \
		-e "s|@GROUP_NAME@|$GR_GROUP_NAME|g" -e "s|@ROUTER_ID@|1|g" \
		-e "s|@ROUTER_USER@|lrrouter|g" -e "s|@ROUTER_PASSWORD@|$pw|g" \
		"$LR_SRC/tests/helpers/group-router.sql") || return 1
	GR_SQL_TIMEOUT=60 gr_sql "$p" "$sql"
}

# _gr_router_tls DIR: lr_tls_make's CA and certificates, plus router.pem
# and router-key.pem, a server certificate for Router's address.
_gr_router_tls() {
	local dir=$1
	lr_tls_make "$dir" || return 1
	(
		set -e
		cd "$dir"
		openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
			-subj '/CN=router' -keyout router-key.pem -out router.csr
		printf '%s\n' 'basicConstraints = critical, CA:FALSE' \
			'keyUsage = critical, digitalSignature' 'extendedKeyUsage = serverAuth' \
			"subjectAltName = IP:$(gr_router_addr)" >router.ext
		openssl x509 -req -days 2 -in router.csr -CA ca.pem -CAkey ca-key.pem \
			-CAcreateserial -extfile router.ext -out router.pem
		rm -f router.csr router.ext ca.srl
		chmod 644 router.pem
	) >>"$dir/openssl.log" 2>&1 || {
		_gr_say "Router's certificate: $(tail -n 3 "$dir/openssl.log")"
		return 1
	}
	# Router runs as mysql and reads its keys.
	_lr_in_root chgrp mysql "$dir/router-key.pem" "$dir/server-key.pem" &&
		chmod 640 "$dir/router-key.pem" "$dir/server-key.pem"
}

# The TLS of gr_router_start's [routing:rw] unless told otherwise: clients
# must use TLS, with Router's certificate for its address; Router uses TLS
# to the members and verifies their certificates against their CA (the
# members share one, gr_start).
_gr_router_tls_lines() {
	local dir
	dir=$(gr_router_dir)
	printf '%s\n' "client_ssl_mode = REQUIRED" \
		"client_ssl_cert = $dir/tls/router.pem" "client_ssl_key = $dir/tls/router-key.pem" \
		"server_ssl_mode = REQUIRED" "server_ssl_verify = VERIFY_CA" \
		"server_ssl_ca = $dir/members-ca.pem"
}

# gr_router_start [LINE...]: MySQL Router in front of the group; its
# [routing:rw] section gets the LINEs (e.g. "client_ssl_mode = PASSTHROUGH")
# instead of the TLS settings above, and routes to the primary (or to the
# role GR_ROUTER_ROLE names, e.g. SECONDARY). Waits until Router has read the
# metadata and routes (30 s). Restarts Router if it runs. The metadata,
# account and keyring are made the first time.
gr_router_start() {
	local dir port n servers='' i pw seen=0
	local -a lines
	dir=$(gr_router_dir)
	gr_router_stop
	mkdir -p "$dir" && chmod 755 "$dir" || return 1
	_gr_env
	if [[ ! -s $dir/keyring ]]; then
		lr_free_port >"$dir/port" || return 1
		_gr_router_tls "$dir/tls" || return 1
		cp "$LR_GROUP/pristine/data/ca.pem" "$dir/members-ca.pem" || return 1
		pw=$(openssl rand -hex 16) || return 1
		_gr_router_metadata "$pw" || return 1
		_lr_in_root mysqlrouter_keyring init "$dir/keyring" \
			--master-key-file "$dir/mysqlrouter.key" >/dev/null &&
			_lr_in_root mysqlrouter_keyring set "$dir/keyring" lrrouter password "$pw" \
				--master-key-file "$dir/mysqlrouter.key" >/dev/null || return 1
	fi
	port=$(<"$dir/port")
	for ((n = 1; n <= LR_GROUP_MEMBERS; n++)); do
		servers+="${servers:+, }\"mysql://$(gr_addr "$n"):$GR_SQL_PORT\""
	done
	cat >"$dir/state.json" <<-EOF
		{"version": "1.0.0", "metadata-cache": {"group-replication-id": "$GR_GROUP_NAME",
		 "cluster-metadata-servers": [$servers]}}
	EOF
	if (($#)); then
		lines=("$@")
	else
		mapfile -t lines < <(_gr_router_tls_lines)
	fi
	{
		cat <<-EOF
			[DEFAULT]
			logging_folder = $dir
			runtime_folder = $dir
			data_folder = $dir
			keyring_path = $dir/keyring
			master_key_path = $dir/mysqlrouter.key
			dynamic_state = $dir/state.json
			unknown_config_option = error

			[logger]
			level = INFO

			[metadata_cache:lrgroup]
			cluster_type = gr
			router_id = 1
			user = lrrouter
			metadata_cluster = lrgroup
			ttl = 0.5
			use_gr_notifications = 0

			[routing:rw]
			bind_address = $(gr_router_addr)
			bind_port = $port
			destinations = metadata-cache://lrgroup/?role=${GR_ROUTER_ROLE:-PRIMARY}
			routing_strategy = first-available
			protocol = classic
		EOF
		printf '%s\n' "${lines[@]}"
	} >"$dir/mysqlrouter.conf"
	_lr_in_root chown mysql: "$dir" "$dir/keyring" "$dir/mysqlrouter.key" "$dir/state.json" ||
		return 1
	[[ -e $dir/mysqlrouter.log ]] && seen=$(wc -l <"$dir/mysqlrouter.log")
	(
		lr_close_fds
		exec chroot "$LR_SERVER_ROOT" mysqlrouter --user=mysql -c "$dir/mysqlrouter.conf" \
			</dev/null >>"$dir/stdout" 2>&1
	) &
	echo $! >"$dir/pid"
	# Routing starts with the first metadata that has a primary ("mode=RW").
	for ((i = 0; i < 300; i++)); do
		tail -n +$((seen + 1)) "$dir/mysqlrouter.log" 2>/dev/null | grep -q 'mode=RW' &&
			return 0
		kill -0 "$(<"$dir/pid")" 2>/dev/null || break
		sleep 0.1
	done
	_gr_say "MySQL Router did not read the metadata; end of its log:"
	tail -n 20 "$dir/mysqlrouter.log" >&2
	cat "$dir/stdout" >&2
	gr_router_stop
	return 1
}

# gr_router_conf FILE [LINE...]: a lockrun config (gr_conf) whose one host
# is Router's read-write port, over TLS with Router's certificate verified
# against its address, and each LINE added to [database].
gr_router_conf() {
	local file=$1 dir
	shift
	dir=$(gr_router_dir)
	gr_conf "$file" "$(gr_router_addr)" "ssl_ca = $dir/tls/ca.pem" \
		"ssl_verify_server_cert = true" "${@:-connect_timeout = 5}" || return 1
	sed -i -e "s/^port = .*/port = $(gr_router_port)/" -e '/^server_public_key = /d' "$file"
}

# gr_router_member: the member Router's read-write port leads to now, by
# number (a new connection as 'lockrun', over TLS, whatever certificate
# answers: it only asks @@server_id), or nothing.
gr_router_member() {
	local id
	id=$(MYSQL_PWD=$(<"$LR_GROUP/lockrun.pw") timeout 10 mariadb --no-defaults \
		--ssl --skip-ssl-verify-server-cert --connect-timeout=3 \
		-h "$(gr_router_addr)" -P "$(gr_router_port)" -u lockrun -N -B \
		-e "SELECT @@server_id" 2>/dev/null) || return 1
	[[ $id == 2[1-9] ]] && echo "${id#2}"
}

# gr_router_warm: lockrun's account logs in once to each running member,
# directly and over TLS, so that each has its password cached: a later
# login with caching_sha2_password then needs no RSA exchange, which
# Router cannot forward (see gr_router_start's callers).
gr_router_warm() {
	local n
	for ((n = 1; n <= LR_GROUP_MEMBERS; n++)); do
		{ gr_running "$n" && ! gr_frozen "$n"; } || continue
		MYSQL_PWD=$(<"$LR_GROUP/lockrun.pw") timeout 10 mariadb --no-defaults \
			--ssl --skip-ssl-verify-server-cert --connect-timeout=3 \
			-h "$(gr_addr "$n")" -P "$(gr_port)" -u lockrun -e "SELECT 1" >/dev/null || return 1
	done
}

# gr_router_stop: stop Router (SIGTERM; SIGKILL after 10 s).
gr_router_stop() {
	local f i pid
	f=$(gr_router_dir)/pid
	[[ -s $f ]] || return 0
	pid=$(<"$f")
	kill "$pid" 2>/dev/null || true
	for ((i = 0; i < 100; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -9 "$pid" 2>/dev/null || true
	rm -f "$f"
	return 0
}
