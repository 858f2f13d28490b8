# shellcheck shell=bash
#
# A throwaway primary and replica (asynchronous GTID replication) on this
# machine, for tests/run-replication and tests/replication/*.bats: MariaDB,
# or MySQL when server.bash runs MySQL's server (lr_server_is_mysql). Built
# on server.bash: each node is an ordinary instance directory, so its
# functions work per node. Every function here works on the pair in
# $LR_REPL (tests/run-replication exports it).
#
# The two servers spell replication differently; each function here speaks
# the spelling of the server it runs against, and the tests use the
# functions, not the statements:
#
#   what                  MariaDB                         MySQL
#   replicate from        CHANGE MASTER TO ...            CHANGE REPLICATION SOURCE TO
#                         MASTER_USE_GTID = slave_pos     ... SOURCE_AUTO_POSITION = 1
#                         or current_pos
#   a replica's status    SHOW SLAVE STATUS, Slave_*,     SHOW REPLICA STATUS, Replica_*,
#                         Master_*                        Source_* (repl_slave_field maps)
#   what a node has       @@gtid_binlog_pos               @@gtid_executed (repl_gtids)
#   semi-sync             built in, *_master_*/*_slave_*  plugins semisync_source and
#                                                         semisync_replica, *_source_*/*_replica_*
#
#   LR_REPL/n1 LR_REPL/n2   the nodes' instance dirs (see server.bash)
#   LR_REPL/snap/n1, n2     their data dirs right after set-up (repl_reset)
#   LR_REPL/repl.env        SQL port and replication password
#   LR_REPL/primary         which node is the primary now: 1 or 2
#   LR_REPL/lockrun.pw      password of the 'lockrun'@'%' account
#   LR_REPL/node1.conf      lockrun config talking to node 1 only
#   LR_REPL/node2.conf      lockrun config talking to node 2 only
#   LR_REPL/both.conf       host = 127.0.0.11, 127.0.0.12
#   LR_REPL/adminN.conf     root over node N's socket (lockrunctl)
#
# Node N listens on its own loopback address 127.0.0.1N (Linux routes all of
# 127.0.0.0/8 to lo) with server_id 1N; both nodes on the SAME SQL port:
# lockrun's `host` list shares one `port`, so this is how one client config
# can name both. Node 1 starts as the primary, node 2 as its read-only
# replica (MASTER_USE_GTID = slave_pos), as a fail-over tool keeps it.
# Roles change with repl_promote and repl_switchover; repl_primary and
# repl_replica say which node is which at the moment ("the replica" is
# simply the node that is not the primary, whatever its state).
#
# Keep LR_REPL short (a socket path must fit in 108 bytes) and reachable by
# the mysql user, e.g. /tmp/lrr.XXXXXX/r with mode 755.
#
# This file only defines functions and variables: it sets no shell options.

if ! declare -F lr_server_start >/dev/null; then
	# shellcheck source=tests/helpers/server.bash
	source "${BASH_SOURCE[0]%/*}/server.bash"
fi

# Nothing beyond the server and its client: semi-synchronous replication is
# built into MariaDB 10.11 (no plugin to install); MySQL's root has its
# plugins.
# shellcheck disable=SC2034 # used by tests/run-replication
LR_REPL_PACKAGES=(mariadb-server mariadb-client)

# repl_node N: the instance dir of node N.
repl_node() { echo "$LR_REPL/n$1"; }

# repl_addr N: the loopback address of node N.
repl_addr() { echo "127.0.0.1$1"; }

# repl_primary / repl_replica: the node that is the primary now, and the
# other one.
repl_primary() { cat "$LR_REPL/primary"; }
repl_replica() { echo $((3 - $(repl_primary))); }

_repl_say() { printf 'lockrun-test: replication: %s\n' "$*" >&2; }

_repl_env() {
	# shellcheck source=/dev/null
	source "$LR_REPL/repl.env"
}

# repl_port: the SQL port of both nodes.
repl_port() {
	_repl_env
	echo "$REPL_SQL_PORT"
}

repl_running() { lr_server_running "$(repl_node "$1")"; }

# True when the nodes are MySQL's servers (see the table above).
_repl_mysql() { lr_server_is_mysql; }

# The admin client for node N over its socket, bounded in time: a dead or
# frozen node must not hang the caller.
_repl_client() {
	local n=$1
	shift
	timeout 10 mariadb --no-defaults --socket="$(repl_node "$n")/mysqld.sock" \
		--connect-timeout=3 -u"$(lr_admin_user)" "$@"
}

# repl_sql N "SQL" [DATABASE]: SQL as root on node N over its socket. Batch
# mode, no column names. root has READ ONLY ADMIN: it writes on a read-only
# node too (lockrun's account does not).
repl_sql() {
	local n=$1 sql=$2 db=${3:-}
	local -a opts=(-N -B)
	[[ -n $db ]] && opts+=(-D "$db")
	_repl_client "$n" "${opts[@]}" -e "$sql"
}

# repl_slave_field N FIELD: one field of node N's SHOW SLAVE STATUS, e.g.
# Slave_SQL_Running; nothing if node N replicates from nobody. On MySQL,
# the same field of SHOW REPLICA STATUS: Slave_ and Master_ in FIELD are
# read as Replica_ and Source_ there.
repl_slave_field() {
	local stmt="SHOW SLAVE STATUS" f=$2
	if _repl_mysql; then
		stmt="SHOW REPLICA STATUS"
		f=${f/Slave_/Replica_}
		f=${f/Master_/Source_}
	fi
	_repl_client "$1" -E -e "$stmt" 2>/dev/null |
		awk -v f="$f" '{ k = $1; sub(/:$/, "", k) } k == f { sub(/^[^:]*: ?/, ""); print; exit }'
}

# repl_status N NAME: a global status variable of node N. On MySQL, the
# semi-sync names' master and slave are read as source and replica.
repl_status() {
	local name=$2 from=information_schema.GLOBAL_STATUS
	if _repl_mysql; then
		from=performance_schema.global_status
		name=${name/_master_/_source_}
		name=${name/_slave_/_replica_}
	fi
	repl_sql "$1" "SELECT VARIABLE_VALUE FROM $from WHERE VARIABLE_NAME = '$name'"
}

# repl_gtids N: the GTIDs node N has, applied or written, in one line:
# @@gtid_binlog_pos on MariaDB (the newest per domain and server),
# @@gtid_executed on MySQL (every one, as intervals).
repl_gtids() {
	if _repl_mysql; then
		repl_sql "$1" "SELECT REPLACE(@@GLOBAL.gtid_executed, '\\n', '')"
	else
		repl_sql "$1" "SELECT @@GLOBAL.gtid_binlog_pos"
	fi
}

# repl_written N: what node N wrote itself, as a replica would have to
# apply it: on MariaDB the last GTID of its own server_id in each domain
# (gtid_binlog_state, which keeps one per domain and server: the binlog
# position also moves with what it applies, such as a holder's renewals
# on the primary), on MySQL the GTIDs of its own server_uuid. Unchanged
# over a step, the node wrote nothing in it.
repl_written() {
	if _repl_mysql; then
		repl_sql "$1" "SELECT COALESCE(REGEXP_SUBSTR(REPLACE(@@GLOBAL.gtid_executed, '\\n', ''),
			CONCAT(@@server_uuid, '[^,]*')), '')"
	else
		repl_sql "$1" "SELECT TRIM(BOTH ',' FROM REGEXP_REPLACE(CONCAT(',', @@GLOBAL.gtid_binlog_state),
			CONCAT(',[0-9]+-(?!', @@server_id, '-)[0-9]+-[0-9]+(?=,|$)'), ''))"
	fi
}

# repl_has_gtids N SET: true if node N has every GTID of SET (one of
# repl_gtids' lines), applied or, with RECEIVED, at least received into its
# relay log.
repl_has_gtids() {
	local n=$1 want=$2 received=${3:-} have
	if _repl_mysql; then
		have="REPLACE(@@GLOBAL.gtid_executed, '\\n', '')"
		[[ -n $received ]] &&
			have="CONCAT($have, ',', '$(repl_slave_field "$n" Retrieved_Gtid_Set | tr -d '\n')')"
		[[ $(repl_sql "$n" "SELECT GTID_SUBSET('$want', $have)" 2>/dev/null) == 1 ]]
	elif [[ -n $received ]]; then
		[[ $(repl_slave_field "$n" Gtid_IO_Pos) == "$want" ]]
	else
		have=$(repl_sql "$n" "SELECT @@GLOBAL.gtid_slave_pos, @@GLOBAL.gtid_current_pos" 2>/dev/null) ||
			return 1
		[[ $have == "$want	"* || $have == *"	$want" ]]
	fi
}

# The mariadbd arguments of node N (after server.bash's own, so these win),
# one per line. Both nodes get the same set apart from address and id: either
# can become the primary. Relative log names resolve against the datadir, so
# the binlogs and relay logs are part of the snapshot repl_reset restores.
_repl_args() {
	local n=$1
	printf '%s\n' \
		--bind-address="$(repl_addr "$n")" \
		--server-id="1$n" \
		--log-bin=binlog \
		--relay-log=relay-bin \
		--tmpdir="$(repl_node "$n")"
	if _repl_mysql; then
		# GTIDs are off by default there; row-based logging and
		# log_replica_updates are the defaults already. The semi-sync
		# plugins are loaded, switched off.
		printf '%s\n' \
			--gtid-mode=ON \
			--enforce-gtid-consistency=ON \
			--log-replica-updates=ON \
			--plugin-load-add=semisync_source.so \
			--plugin-load-add=semisync_replica.so \
			--rpl-semi-sync-source-enabled=OFF \
			--rpl-semi-sync-replica-enabled=OFF \
			--replica-net-timeout=10
	else
		printf '%s\n' \
			--binlog-format=ROW \
			--log-slave-updates=ON \
			--gtid-strict-mode=ON \
			--rpl-semi-sync-master-enabled=OFF \
			--rpl-semi-sync-slave-enabled=OFF \
			--slave-net-timeout=10
	fi
	# slave_net_timeout 10 (default 60): a replica notices a frozen primary
	# (SIGSTOP) within 10 s; a killed one it notices at once anyway.
	# tmpdir per node: two servers sharing /tmp once clashed on
	# '#sql-temptable-...' files (see galera.bash).
}

# _repl_node_start N [mariadbd args...]: start node N with its arguments and
# these, and wait until it answers. In a subshell without our fds above 2,
# so it is safe from inside a test. A crashed node may need crash recovery:
# 60 s.
_repl_node_start() {
	local n=$1 inst
	shift
	inst=$(repl_node "$n")
	_repl_env
	local -a args
	mapfile -t args < <(_repl_args "$n")
	(
		lr_close_fds
		LR_SERVER_START_TIMEOUT=${LR_SERVER_START_TIMEOUT:-60} \
			lr_server_start "$inst" "$REPL_SQL_PORT" "${args[@]}" "$@"
	)
}

# _repl_node_start_as_set_up N: start node N as repl_start does: node 2,
# the replica, read-only.
_repl_node_start_as_set_up() {
	if [[ $1 == 2 ]]; then
		_repl_node_start 2 --read-only
	else
		_repl_node_start 1
	fi
}

# repl_make_replica N [slave_pos|current_pos]: make node N a replica of the
# other node (GTID, through the replication account) and start replicating.
# slave_pos (default): N replicates from where its gtid_slave_pos says, as
# a fresh replica does. current_pos: from the newest GTID N has, applied or
# written itself: what an old primary needs to follow the new one. Waits
# until both replication threads run, or fails with the replica's errors.
# MASTER_CONNECT_RETRY 1 (default 60): a replica whose primary was down
# reconnects within a second of its return. MySQL has one mode for both,
# SOURCE_AUTO_POSITION: the replica sends every GTID it has, and gets the
# rest. Its replication account authenticates with caching_sha2_password,
# which over a connection without TLS needs the source's public key.
repl_make_replica() {
	local n=$1 mode=${2:-slave_pos} src i io sql
	src=$((3 - n))
	_repl_env
	local stmt
	stmt="CHANGE MASTER TO MASTER_HOST = '$(repl_addr "$src")',
		MASTER_PORT = $REPL_SQL_PORT, MASTER_USER = 'repl',
		MASTER_PASSWORD = '$REPL_PASSWORD', MASTER_USE_GTID = $mode,
		MASTER_CONNECT_RETRY = 1;
		START SLAVE"
	_repl_mysql && stmt="CHANGE REPLICATION SOURCE TO SOURCE_HOST = '$(repl_addr "$src")',
		SOURCE_PORT = $REPL_SQL_PORT, SOURCE_USER = 'repl',
		SOURCE_PASSWORD = '$REPL_PASSWORD', SOURCE_AUTO_POSITION = 1,
		SOURCE_CONNECT_RETRY = 1, GET_SOURCE_PUBLIC_KEY = 1;
		START REPLICA"
	repl_sql "$n" "$stmt" || return 1
	for ((i = 0; i < 150; i++)); do
		io=$(repl_slave_field "$n" Slave_IO_Running)
		sql=$(repl_slave_field "$n" Slave_SQL_Running)
		[[ $io == Yes && $sql == Yes ]] && return 0
		# A thread that stopped on an error (e.g. a diverged old primary,
		# which GTID strict mode refuses) will not start by waiting.
		[[ $io == No && $(repl_slave_field "$n" Last_IO_Errno) != 0 ]] && break
		[[ $sql == No && $(repl_slave_field "$n" Last_SQL_Errno) != 0 ]] && break
		sleep 0.2
	done
	_repl_say "node $n does not replicate from node $src" \
		"(IO thread: '$io', SQL thread: '$sql')"
	_repl_say "IO error: $(repl_slave_field "$n" Last_IO_Error)"
	_repl_say "SQL error: $(repl_slave_field "$n" Last_SQL_Error)"
	return 1
}

# repl_caught_up: true if the replica has applied everything the primary has
# binlogged: the replica's gtid_slave_pos equals the primary's
# gtid_binlog_pos. An old primary that follows the new one after a
# switchover has applied nothing yet, and its gtid_slave_pos says nothing
# about what it has; its gtid_current_pos (its own binlog, for a domain
# whose newest GTID it wrote itself) does, so that counts too. On MySQL:
# the primary's gtid_executed is a subset of the replica's.
repl_caught_up() {
	local want
	want=$(repl_gtids "$(repl_primary)" 2>/dev/null) || return 1
	[[ -n $want ]] || return 1
	repl_has_gtids "$(repl_replica)" "$want"
}

# repl_wait_caught_up [SECONDS]: wait until repl_caught_up; default 30 s.
# On timeout, says where both stand and why the replica does not move.
repl_wait_caught_up() {
	local secs=${1:-30} i p r
	for ((i = 0; i < secs * 10; i++)); do
		repl_caught_up && return 0
		sleep 0.1
	done
	p=$(repl_primary)
	r=$(repl_replica)
	_repl_say "node $r has not caught up with node $p after ${secs}s:" \
		"primary has '$(repl_gtids "$p" 2>&1)', replica has '$(repl_gtids "$r" 2>&1)'"
	_repl_say "replica: IO thread '$(repl_slave_field "$r" Slave_IO_Running)'," \
		"SQL thread '$(repl_slave_field "$r" Slave_SQL_Running)'," \
		"IO error '$(repl_slave_field "$r" Last_IO_Error)'," \
		"SQL error '$(repl_slave_field "$r" Last_SQL_Error)'"
	return 1
}

# repl_stop_applier / repl_start_applier: stop (start) the replica's SQL
# thread. Stopped, the replica still receives the primary's binlog into its
# relay log but applies none of it: it lags, and a promotion (which throws
# the relay log away) loses what it had not applied.
repl_stop_applier() { repl_sql "$(repl_replica)" "STOP $(_repl_slave) SQL_THREAD"; }
repl_start_applier() { repl_sql "$(repl_replica)" "START $(_repl_slave) SQL_THREAD"; }

# The word for a replica in STOP/START/RESET: SLAVE (MariaDB 10.11 knows
# REPLICA too, but not in every statement), REPLICA (MySQL 8.4 and later
# have dropped SLAVE).
_repl_slave() { if _repl_mysql; then echo REPLICA; else echo SLAVE; fi; }

# repl_kill_primary: crash the primary (SIGKILL) and wait until it is gone.
# It stays the primary (repl_primary) until repl_promote.
repl_kill_primary() {
	lr_server_kill "$(repl_node "$(repl_primary)")"
}

# repl_promote: what a fail-over tool does to the replica: forget the old
# primary (its relay log, applied or not, goes too) and accept writes. It
# becomes repl_primary. Nothing checks that the old primary is down or
# read-only: promoting next to a writable primary is a split brain.
repl_promote() {
	local r
	r=$(repl_replica)
	repl_sql "$r" "STOP $(_repl_slave); RESET $(_repl_slave) ALL; SET GLOBAL read_only = OFF" ||
		return 1
	echo "$r" >"$LR_REPL/primary"
}

# repl_detach N: node N replicates from nobody any more, read-only: what
# is left of an old primary that cannot follow the new one.
repl_detach() {
	repl_sql "$1" "STOP $(_repl_slave); RESET $(_repl_slave) ALL; SET GLOBAL read_only = ON"
}

# repl_switchover: a planned change of primary, nothing lost: the primary
# turns read-only (lockrun's writes there fail from now on), the replica
# catches up and is promoted, and the old primary replicates from the new
# one (MASTER_USE_GTID = current_pos: from what it wrote itself).
repl_switchover() {
	local p
	p=$(repl_primary)
	repl_sql "$p" "SET GLOBAL read_only = ON" || return 1
	repl_wait_caught_up || return 1
	repl_promote || return 1
	repl_make_replica "$p" current_pos || return 1
	repl_wait_caught_up
}

# repl_restart_old_primary_read_only: start the node that is not the
# primary (the killed old primary, after repl_promote) again, read-only, as
# a fail-over tool would keep it until someone looks at it. It replicates
# from nobody: after a crash it may hold transactions the new primary never
# got (GTID strict mode would refuse them); repl_make_replica N current_pos
# tries anyway.
repl_restart_old_primary_read_only() {
	local n
	n=$(repl_replica)
	if repl_running "$n"; then
		_repl_say "node $n (the old primary) is still running"
		return 1
	fi
	_repl_node_start "$n" --read-only
}

# repl_semisync_on / repl_semisync_off: semi-synchronous replication from
# the primary to the replica (MariaDB 10.11 has it built in; MySQL's nodes
# load its plugins, _repl_args). The replica's
# IO thread must reconnect to announce itself as semi-sync. On, it checks
# that the primary really waits for the replica's acknowledgements:
# Rpl_semi_sync_master_status ON with one semi-sync client. (A commit then
# waits up to rpl_semi_sync_master_timeout, 10 s, for the ack, after which
# the primary falls back to asynchronous; rpl_semi_sync_master_wait_point
# is AFTER_COMMIT unless a test sets AFTER_SYNC.)
repl_semisync_on() {
	_repl_semisync ON
}

repl_semisync_off() {
	_repl_semisync OFF
}

# _repl_semisync ON|OFF: both nodes' semi-sync variables, by the names of
# their server, and the replica's IO thread reconnected; ON waits as above.
_repl_semisync() {
	local on=$1 p r i st='' src=master rep=slave
	p=$(repl_primary)
	r=$(repl_replica)
	_repl_mysql && src=source rep=replica
	repl_sql "$p" "SET GLOBAL rpl_semi_sync_${src}_enabled = $on" || return 1
	repl_sql "$r" "SET GLOBAL rpl_semi_sync_${rep}_enabled = $on;
		STOP $(_repl_slave) IO_THREAD; START $(_repl_slave) IO_THREAD" || return 1
	[[ $on == ON ]] || return 0
	for ((i = 0; i < 150; i++)); do
		st="$(repl_status "$p" Rpl_semi_sync_master_clients 2>/dev/null) $(repl_status "$p" \
			Rpl_semi_sync_master_status 2>/dev/null)"
		[[ $st == "1 ON" ]] && return 0
		sleep 0.2
	done
	_repl_say "semi-sync is not on after 30 s (node $p's clients and status: '${st:-nothing}')"
	return 1
}

# repl_conf FILE HOSTS [LINE...]: a lockrun config for the 'lockrun' account
# with `host = HOSTS` and the pair's port; each LINE (e.g. "read_timeout =
# 3") is added to [database]. Without the host's queue: every lockrun here
# stands for a host of its own, so that all of them contend at the database.
repl_conf() {
	local file=$1 hosts=$2
	shift 2
	_repl_env
	(
		umask 077
		{
			echo "[lock]"
			echo "local_queue = off"
			echo "[database]"
			echo "host = $hosts"
			echo "port = $REPL_SQL_PORT"
			echo "user = lockrun"
			echo "password_file = $LR_REPL/lockrun.pw"
			echo "database = lockrun"
			# MySQL's accounts use caching_sha2_password: over TCP
			# without TLS its RSA exchange needs the server's key, and
			# lockrun takes it from the server only when told to. Each
			# node made its own key pair, and a config that lists both
			# could name only one key file: the pair runs on loopback,
			# where nobody sits in the path, so these configs opt in.
			lr_server_is_mysql && echo "allow_public_key_retrieval = true"
			if (($#)); then
				printf '%s\n' "$@"
			else
				echo "connect_timeout = 5"
			fi
		} >"$file"
	)
}

# repl_ctl ARGS...: lockrunctl as root through the primary of the moment.
repl_ctl() {
	"$LOCKRUNCTL" -c "$LR_REPL/admin$(repl_primary).conf" "$@"
}

# repl_start: create both nodes, start them, set up replication, provision
# lockrun through the primary (and, with $LOCKRUNCTL set, `lockrunctl init`
# it), write the client configs, and keep a snapshot of both data dirs for
# repl_reset. Returns with both nodes up and the replica caught up.
repl_start() {
	local n i rc=0
	local -a pids=()
	mkdir -p "$LR_REPL"
	LR_REPL=$(_lr_abs "$LR_REPL")
	chmod 755 "$LR_REPL"
	local port pw
	port=$(lr_free_port) || return 1
	pw=$(openssl rand -hex 16) || return 1 # hex: no quoting trouble
	(
		umask 077
		printf 'REPL_SQL_PORT=%s\nREPL_PASSWORD=%s\n' "$port" "$pw" >"$LR_REPL/repl.env"
	) || return 1
	echo 1 >"$LR_REPL/primary"

	# Data dirs and servers, both at once (each ~2 s). Identical fresh
	# data dirs: the replica needs nothing of the primary's but its binlog.
	for n in 1 2; do
		(
			lr_server_init "$(repl_node "$n")" --tmpdir="$(repl_node "$n")" &&
				_repl_node_start_as_set_up "$n"
		) 3>&- &
		pids+=($!)
	done
	for i in "${pids[@]}"; do wait "$i" || rc=1; done
	((rc == 0)) || return 1

	# The replication account, as the primary's first binlogged event: it
	# reaches the replica too, which needs it once it is a primary itself.
	repl_sql 1 "CREATE USER 'repl'@'127.0.0.%' IDENTIFIED BY '$pw';
		GRANT REPLICATION SLAVE ON *.* TO 'repl'@'127.0.0.%'" || return 1
	repl_make_replica 2 slave_pos || return 1

	# Database and accounts through the primary: they replicate.
	local n1
	n1=$(repl_node 1)
	lr_provision "$n1" || return 1
	(umask 077 && cp "$n1/lockrun.pw" "$LR_REPL/lockrun.pw") || return 1
	for n in 1 2; do
		(
			umask 077
			cat >"$LR_REPL/admin$n.conf" <<-EOF
				[database]
				socket = $(repl_node "$n")/mysqld.sock
				user = $(lr_admin_user)
				database = lockrun
			EOF
		) || return 1
		repl_conf "$LR_REPL/node$n.conf" "$(repl_addr "$n")" || return 1
	done
	repl_conf "$LR_REPL/both.conf" "$(repl_addr 1), $(repl_addr 2)" || return 1

	if [[ -n ${LOCKRUNCTL:-} ]]; then
		"$LOCKRUNCTL" -c "$LR_REPL/admin1.conf" init || return 1
	fi
	repl_wait_caught_up || return 1
	if [[ -n ${LOCKRUNCTL:-} ]]; then
		repl_sql 2 "SELECT MAX(version) FROM lockrun.lr_schema" >/dev/null || {
			_repl_say "node 2 does not see the lockrun schema"
			return 1
		}
	fi

	# The snapshot: both nodes stopped cleanly, so that the copies are
	# consistent (the replica's position is in its InnoDB tables and
	# relay-log.info, the binlogs are closed).
	repl_stop || return 1
	mkdir -p "$LR_REPL/snap"
	for n in 1 2; do
		cp -a "$(repl_node "$n")/data" "$LR_REPL/snap/n$n" || return 1
	done
	_repl_start_pristine
}

# Start both nodes as set up, node 1 first: node 2 resumes replicating by
# itself (its master.info survives a restart) and catches up.
_repl_start_pristine() {
	local n
	echo 1 >"$LR_REPL/primary"
	for n in 1 2; do
		_repl_node_start_as_set_up "$n" || return 1
	done
	repl_wait_caught_up
}

# True if the pair is as repl_start left it: node 1 the writable primary
# replicating from nobody, node 2 its read-only replica with both threads
# running, semi-sync off on both, both started with the set-up arguments,
# the replica caught up and without writes of its own (its binlog, which
# with log_slave_updates holds what it applied, equals the primary's).
_repl_pristine() {
	local n
	local -a args
	[[ $(repl_primary) == 1 ]] || return 1
	for n in 1 2; do
		repl_running "$n" || return 1
		mapfile -t args < <(_repl_args "$n")
		[[ $n == 2 ]] && args+=(--read-only)
		printf '%s\0' "${args[@]}" | cmp -s - "$(repl_node "$n")/server.args" || return 1
	done
	local semi=@@rpl_semi_sync_master_enabled,@@rpl_semi_sync_slave_enabled
	_repl_mysql && semi=@@rpl_semi_sync_source_enabled,@@rpl_semi_sync_replica_enabled
	[[ $(repl_sql 1 "SELECT @@read_only, $semi") == "0	0	0" ]] || return 1
	[[ $(repl_sql 2 "SELECT @@read_only, $semi") == "1	0	0" ]] || return 1
	[[ -z $(repl_slave_field 1 Master_Host) ]] || return 1
	[[ $(repl_slave_field 2 Slave_IO_Running) == Yes ]] || return 1
	[[ $(repl_slave_field 2 Slave_SQL_Running) == Yes ]] || return 1
	repl_wait_caught_up 10 2>/dev/null || return 1
	[[ $(repl_gtids 1) == "$(repl_gtids 2)" ]]
}

# repl_reset: bring the pair back to what repl_start left, for a test that
# must not inherit the damage of one before it. Cheap if nothing changed
# (then lockrun's tables keep their rows: clear them yourself); otherwise
# both nodes are stopped and their data dirs replaced by the snapshot
# (lockrun initialised, no resources), about 5 s.
repl_reset() {
	if _repl_pristine; then
		return 0
	fi
	_repl_say "restoring both nodes from the snapshot"
	repl_stop || return 1
	local n inst
	for n in 1 2; do
		inst=$(repl_node "$n")
		rm -rf "$inst/data" && cp -a "$LR_REPL/snap/n$n" "$inst/data" || return 1
	done
	_repl_start_pristine
}

# repl_stop: stop both nodes (in parallel; a paused one is resumed first by
# lr_server_stop). Fine to call when they are partly or wholly down.
repl_stop() {
	local n i rc=0
	local -a pids=()
	[[ -n ${LR_REPL:-} && -d $LR_REPL ]] || return 0
	for n in 1 2; do
		[[ -d $LR_REPL/n$n ]] || continue
		lr_server_stop "$(repl_node "$n")" 3>&- &
		pids+=($!)
	done
	for i in "${pids[@]}"; do wait "$i" || rc=1; done
	return "$rc"
}
