# shellcheck shell=bash
#
# A throwaway 3-node MariaDB Galera cluster on this machine, for
# tests/run-galera and tests/galera/*.bats. Built on server.bash: every node
# is an ordinary instance directory, so its functions work per node.
#
#   CDIR/n1 CDIR/n2 CDIR/n3   the nodes' instance dirs (see server.bash)
#   CDIR/cluster.env          ports, sourced by the functions below
#   CDIR/lockrun.pw           password of the 'lockrun'@'%' account
#   CDIR/nodeN.conf           lockrun config talking to node N only
#   CDIR/localN.conf          every node, node N first: a client set up beside
#                             node N (lockrun sends its calls to the writer node)
#   CDIR/all.conf             host = 127.0.0.1, 127.0.0.2, 127.0.0.3
#   CDIR/admin.conf           root over node 1's socket (for lockrunctl init)
#
# Node N listens on its own loopback address 127.0.0.N (Linux routes all of
# 127.0.0.0/8 to lo), all nodes on the SAME SQL port: lockrun's `host` list
# shares one `port`, so this is how one client config can name every node.
# Each node has its own group communication (gcomm), IST and SST ports.
# State transfers use rsync (wsrep_sst_method=rsync), which refuses to run as
# root: like every server.bash instance, mariadbd runs as `mysql` when we are
# root. Keep CDIR short (a socket path must fit in 108 bytes) and reachable
# by the mysql user, e.g. /tmp/lrg.XXXXXX with mode 755.
#
# This file only defines functions and variables: it sets no shell options.

if ! declare -F lr_server_start >/dev/null; then
	# shellcheck source=tests/helpers/server.bash
	source "${BASH_SOURCE[0]%/*}/server.bash"
fi

# What a Galera node with rsync state transfers needs besides the server:
# the provider, rsync, ss (iproute2) for the SST script's port checks (lsof
# would do too), ps (procps) and hostname, which the SST scripts call; and
# socat, a proxy the tests put in front of a node to cut it off.
# shellcheck disable=SC2034 # used by tests/run-galera
LR_GALERA_PACKAGES=(galera-4 rsync iproute2 procps hostname socat)

LR_GALERA_PROVIDER=${LR_GALERA_PROVIDER:-/usr/lib/galera/libgalera_smm.so}
LR_GALERA_NODES=3

# lr_galera_node CDIR N: the instance dir of node N.
lr_galera_node() { echo "$1/n$2"; }

# lr_galera_addr N: the loopback address of node N.
lr_galera_addr() { echo "127.0.0.$1"; }

_lr_galera_env() {
	# shellcheck source=/dev/null
	source "$1/cluster.env"
}

# Run SQL on node N as root over its socket, bounded in time: a paused node
# must not hang the caller. Batch mode, no column names.
lr_galera_sql() {
	local cdir=$1 n=$2 sql=$3 db=${4:-}
	local -a cmd=(timeout 10 mariadb --no-defaults
		--socket="$(lr_galera_node "$cdir" "$n")/mysqld.sock"
		--connect-timeout=3 -u"$(lr_admin_user)" -N -B)
	[[ -n $db ]] && cmd+=(-D "$db")
	"${cmd[@]}" -e "$sql"
}

# lr_galera_state CDIR N: "STATE SIZE", e.g. "Synced 3", or nothing.
lr_galera_state() {
	lr_galera_sql "$1" "$2" "SELECT
		(SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS
		 WHERE VARIABLE_NAME = 'WSREP_LOCAL_STATE_COMMENT'),
		(SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS
		 WHERE VARIABLE_NAME = 'WSREP_CLUSTER_SIZE')" 2>/dev/null | tr '\t' ' '
}

# lr_galera_wait_synced CDIR N SIZE [SECONDS]: wait until node N is Synced in
# a primary component of SIZE nodes; default 60 s.
lr_galera_wait_synced() {
	local cdir=$1 n=$2 size=$3 secs=${4:-60} i st=
	for ((i = 0; i < secs * 5; i++)); do
		st=$(lr_galera_state "$cdir" "$n")
		[[ $st == "Synced $size" ]] && return 0
		sleep 0.2
	done
	_lr_say "node $n of $cdir is not 'Synced $size' after ${secs}s (it says: '${st:-nothing}')"
	return 1
}

# lr_galera_wait_cluster CDIR SIZE SECONDS N...: wait until every node N is
# Synced in the same primary component of SIZE nodes (same configuration id),
# seen in one round of queries. Unlike lr_galera_wait_synced this is not
# fooled by a node just thawed from SIGSTOP, which still reports the
# component it was in before it was evicted.
lr_galera_wait_cluster() {
	local cdir=$1 size=$2 secs=$3 i n st seen
	shift 3
	for ((i = 0; i < secs * 5; i++)); do
		((i == 0)) || sleep 0.2
		seen=
		for n; do
			st=$(lr_galera_sql "$cdir" "$n" "SELECT
				(SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS
				 WHERE VARIABLE_NAME = 'WSREP_LOCAL_STATE_COMMENT'),
				(SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS
				 WHERE VARIABLE_NAME = 'WSREP_CLUSTER_SIZE'),
				(SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS
				 WHERE VARIABLE_NAME = 'WSREP_CLUSTER_CONF_ID')" 2>/dev/null | tr '\t' ' ')
			[[ $st == "Synced $size "* ]] || continue 2
			[[ -z $seen || $seen == "${st##* }" ]] || continue 2
			seen=${st##* }
		done
		return 0
	done
	_lr_say "nodes $* of $cdir are not all Synced in one cluster of $size after ${secs}s"
	for n; do
		_lr_say "node $n: $(lr_galera_state "$cdir" "$n")"
	done
	return 1
}

# The mariadbd arguments of node N (after server.bash's own): what a
# Galera node needs, and the servers' defaults for everything else,
# innodb_lock_wait_timeout (50 s) among them, as lockrun asks nothing more
# of a cluster (doc/production.md, Galera).
_lr_galera_args() {
	local cdir=$1 n=$2 i addr members=
	_lr_galera_env "$cdir"
	addr=$(lr_galera_addr "$n")
	for ((i = 1; i <= LR_GALERA_NODES; i++)); do
		local gp=GALERA_GCOMM_PORT_$i
		members+="${members:+,}$(lr_galera_addr "$i"):${!gp}"
	done
	local gp=GALERA_GCOMM_PORT_$n ip=GALERA_IST_PORT_$n sp=GALERA_SST_PORT_$n
	printf '%s\n' \
		--bind-address="$addr" \
		--wsrep-on=ON \
		--wsrep-provider="$LR_GALERA_PROVIDER" \
		--wsrep-cluster-name=lockrun-test \
		--wsrep-cluster-address="gcomm://$members" \
		--wsrep-node-name="node$n" \
		--wsrep-node-address="$addr" \
		--wsrep-node-incoming-address="$addr:$GALERA_SQL_PORT" \
		--wsrep-provider-options="gmcast.listen_addr=tcp://$addr:${!gp};ist.recv_addr=$addr:${!ip};gcache.size=32M" \
		--wsrep-sst-method=rsync \
		--wsrep-sst-receive-address="$addr:${!sp}" \
		--wsrep-slave-threads=2 \
		--binlog-format=ROW \
		--innodb-autoinc-lock-mode=2 \
		--default-storage-engine=InnoDB \
		--innodb-buffer-pool-size=32M
}

# lr_galera_node_start CDIR N [--wsrep-new-cluster]: start node N (join the
# cluster, or bootstrap it) and wait until it is Synced. The arguments saved
# for lr_server_restart never include --wsrep-new-cluster, so a restarted
# node 1 joins the others instead of forming a cluster of its own.
lr_galera_node_start() {
	local cdir=$1 n=$2 inst
	shift 2
	inst=$(lr_galera_node "$cdir" "$n")
	_lr_galera_env "$cdir"
	local -a args
	mapfile -t args < <(_lr_galera_args "$cdir" "$n")
	# A joiner answers its socket only after the state transfer.
	LR_SERVER_START_TIMEOUT=${LR_SERVER_START_TIMEOUT:-60} \
		lr_server_start "$inst" "$GALERA_SQL_PORT" "${args[@]}" "$@" || return 1
	if (($#)); then
		printf '%s\0' "${args[@]}" >"$inst/server.args"
	fi
	local st i
	for ((i = 0; i < 300; i++)); do
		st=$(lr_galera_state "$cdir" "$n")
		[[ $st == Synced\ * ]] && return 0
		sleep 0.2
	done
	_lr_say "node $n did not reach Synced (it says: '${st:-nothing}'); end of its log:"
	tail -n 30 "$inst/mysqld.err" >&2
	return 1
}

# _lr_galera_tls CDIR: one CA (CDIR/tls/ca.pem) and, per node, a server
# certificate that names node N as a public CA would, by a DNS name only:
# nodeN.lockrun.test (the tests map it to the node's address in a
# /etc/hosts of their own). Clients that ask for no TLS do not use it.
_lr_galera_tls() {
	local cdir=$1 n inst dir
	lr_tls_make "$cdir/tls" || return 1
	for ((n = 1; n <= LR_GALERA_NODES; n++)); do
		inst=$(lr_galera_node "$cdir" "$n")
		dir=$inst/tls
		mkdir -p "$dir"
		if ! (
			set -e
			cd "$dir"
			umask 022
			cp "$cdir/tls/ca.pem" .
			openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
				-subj "/O=lockrun test node $n" -keyout server-key.pem -out s.csr
			printf '%s\n' 'basicConstraints = critical, CA:FALSE' \
				'extendedKeyUsage = serverAuth' "subjectAltName = DNS:node$n.lockrun.test" >s.ext
			openssl x509 -req -days 2 -in s.csr -CA "$cdir/tls/ca.pem" \
				-CAkey "$cdir/tls/ca-key.pem" -CAcreateserial -CAserial s.srl \
				-extfile s.ext -out server.pem
			rm -f s.csr s.ext s.srl
		) >"$dir/openssl.log" 2>&1; then
			_lr_say "the TLS certificate of node $n could not be made:"
			cat "$dir/openssl.log" >&2
			return 1
		fi
		chmod 755 "$dir"
		chmod 644 "$dir"/*.pem
		chmod 600 "$dir/server-key.pem"
		if _lr_is_root; then
			_lr_in_root chgrp mysql "$dir/server-key.pem" && chmod 640 "$dir/server-key.pem"
		fi
	done
}

# lr_galera_start CDIR: create, start and provision the cluster, and write
# the client configs. Node 1 bootstraps it; nodes 2 and 3 join with an rsync
# SST from it, one after the other. Returns when every node is Synced in a
# cluster of 3 and the schema is visible on every node.
lr_galera_start() {
	local cdir=$1 n i
	mkdir -p "$cdir"
	cdir=$(_lr_abs "$cdir")
	chmod 755 "$cdir"
	# The provider is loaded by the server, so it is looked for in the
	# server's root (server.bash: LR_SERVER_ROOT).
	if [[ ! -r ${LR_SERVER_ROOT:-}$LR_GALERA_PROVIDER ]]; then
		_lr_say "no Galera provider at ${LR_SERVER_ROOT:-}$LR_GALERA_PROVIDER (install galera-4)"
		return 1
	fi

	# Ports: one SQL port for all nodes (each on its own address), and per
	# node a gcomm, an IST and an SST port.
	local port
	port=$(lr_free_port) || return 1
	{
		echo "GALERA_SQL_PORT=$port"
		for ((n = 1; n <= LR_GALERA_NODES; n++)); do
			for i in GCOMM IST SST; do
				port=$(lr_free_port) || return 1
				echo "GALERA_${i}_PORT_$n=$port"
			done
		done
	} >"$cdir/cluster.env"

	# Data dirs, created in parallel. A joiner's is replaced by the SST, but
	# mariadbd wants a valid one to start with. Each bootstrap server gets
	# its own tmpdir: three at once in /tmp once failed with "Could not
	# remove temporary table: '/tmp/#sql-temptable-...'".
	local -a pids=()
	local inst
	for ((n = 1; n <= LR_GALERA_NODES; n++)); do
		inst=$(lr_galera_node "$cdir" "$n")
		lr_server_init "$inst" --tmpdir="$inst" 3>&- &
		pids+=($!)
	done
	local rc=0
	for i in "${pids[@]}"; do wait "$i" || rc=1; done
	((rc == 0)) || return 1

	_lr_galera_tls "$cdir" || return 1
	lr_galera_node_start "$cdir" 1 --wsrep-new-cluster || return 1
	for ((n = 2; n <= LR_GALERA_NODES; n++)); do
		lr_galera_node_start "$cdir" "$n" || return 1
	done
	lr_galera_wait_cluster "$cdir" "$LR_GALERA_NODES" 30 1 2 3 || return 1

	# Database and account, once: CREATE DATABASE, CREATE USER and GRANT
	# replicate to every node (DDL, under total order isolation).
	local n1
	n1=$(lr_galera_node "$cdir" 1)
	lr_provision "$n1" || return 1
	(umask 077 && cp "$n1/lockrun.pw" "$cdir/lockrun.pw") || return 1
	(
		umask 077
		cat >"$cdir/admin.conf" <<-EOF
			[database]
			socket = $n1/mysqld.sock
			user = $(lr_admin_user)
			database = lockrun
		EOF
	) || return 1
	local k hosts
	for ((n = 1; n <= LR_GALERA_NODES; n++)); do
		lr_galera_conf "$cdir" "$cdir/node$n.conf" "$(lr_galera_addr "$n")" || return 1
		hosts=
		for ((k = 0; k < LR_GALERA_NODES; k++)); do
			hosts+="${hosts:+, }$(lr_galera_addr $(((n - 1 + k) % LR_GALERA_NODES + 1)))"
		done
		lr_galera_conf "$cdir" "$cdir/local$n.conf" "$hosts" || return 1
	done
	lr_galera_conf "$cdir" "$cdir/all.conf" \
		"$(lr_galera_addr 1), $(lr_galera_addr 2), $(lr_galera_addr 3)" || return 1

	if [[ -n ${LOCKRUNCTL:-} ]]; then
		"$LOCKRUNCTL" -c "$cdir/admin.conf" init || return 1
		# The DDL ran on node 1; wait (causal read) until every node has it.
		for ((n = 1; n <= LR_GALERA_NODES; n++)); do
			lr_galera_sql "$cdir" "$n" "SET SESSION wsrep_sync_wait = 15;
				SELECT MAX(version) FROM lockrun.lr_schema" >/dev/null || {
				_lr_say "node $n does not see the lockrun schema"
				return 1
			}
		done
	fi
}

# lr_galera_conf CDIR FILE HOSTS [LINE...]: a lockrun config for the
# cluster's 'lockrun' account with `host = HOSTS` and the cluster's port;
# each LINE (e.g. "read_timeout = 3") is added to [database]. Without the
# host's queue: every lockrun here stands for a host of its own, so that
# all of them contend at the cluster.
lr_galera_conf() {
	local cdir=$1 file=$2 hosts=$3
	shift 3
	_lr_galera_env "$cdir"
	(
		umask 077
		{
			echo "[lock]"
			echo "local_queue = off"
			echo "[database]"
			echo "host = $hosts"
			echo "port = $GALERA_SQL_PORT"
			echo "user = lockrun"
			echo "password_file = $cdir/lockrun.pw"
			echo "database = lockrun"
			if (($#)); then
				printf '%s\n' "$@"
			else
				echo "connect_timeout = 5"
			fi
		} >"$file"
	)
}

# lr_galera_stop CDIR: stop every node (in parallel; a paused one is resumed
# first by lr_server_stop). Fine to call on a cluster that is partly down.
lr_galera_stop() {
	local cdir=$1 n i rc=0
	local -a pids=()
	[[ -d $cdir ]] || return 0
	for ((n = 1; n <= LR_GALERA_NODES; n++)); do
		[[ -d $cdir/n$n ]] || continue
		lr_server_stop "$(lr_galera_node "$cdir" "$n")" 3>&- &
		pids+=($!)
	done
	for i in "${pids[@]}"; do wait "$i" || rc=1; done
	return "$rc"
}

# Node-level faults: crash (SIGKILL), freeze (SIGSTOP), thaw (SIGCONT), and
# a restart that rejoins the cluster (a crashed node gets a full rsync SST).
lr_galera_kill() { lr_server_kill "$(lr_galera_node "$1" "$2")"; }
lr_galera_pause() { lr_server_pause "$(lr_galera_node "$1" "$2")"; }
lr_galera_resume() { lr_server_resume "$(lr_galera_node "$1" "$2")"; }
lr_galera_running() { lr_server_running "$(lr_galera_node "$1" "$2")"; }

# A node restarted from inside a bats test must not inherit bats's pipes
# (server.bash closes only fd 3): bats, and a `bats | tee` around it, would
# wait for the node to exit. So every fd above 2 is closed in a subshell.
lr_galera_restart() {
	(
		lr_close_fds
		lr_galera_node_start "$1" "$2"
	)
}

