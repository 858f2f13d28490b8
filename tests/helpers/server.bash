# shellcheck shell=bash
#
# Throwaway MariaDB servers for lockrun's tests and demo.
#
# Sourced by tests/run, contrib/demo, tests/helpers/common.bash and the
# fault-injection tests. Everything works on an *instance directory* (INSTDIR)
# so that several servers can run side by side (e.g. a 3-node Galera cluster):
#
#   INSTDIR/data/          datadir               INSTDIR/mysqld.sock  socket
#   INSTDIR/tls/           optional; used when present (see lr_tls_make)
#   INSTDIR/mysqld.err     error log             INSTDIR/server.pid   our pid
#   INSTDIR/server.port    port                  INSTDIR/server.args  extra args
#   INSTDIR/lockrun.conf   unprivileged client   INSTDIR/admin.conf   root client
#
# Keep INSTDIR short: a Unix socket path must fit in 108 bytes, so put
# instances under a short temp dir such as /tmp/lrt.XXXXXX.
#
# As root the server runs as the `mysql` user (INSTDIR is chown'd to it and
# must be reachable by it); otherwise it runs as the calling user, and the
# admin account is that user instead of root (unix_socket authentication).
#
# This file only defines functions and variables: it sets no shell options.

LR_SRC=${LR_SRC:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}

# Packages the demo needs (build + run), and those the test suite needs.
# gcc is listed because a fresh Debian image has no C compiler.
LR_BUILD_PACKAGES=(
	gcc libc6-dev meson ninja-build pkg-config
	libmariadb-dev libssl-dev libuv1-dev libinih-dev scdoc
	mariadb-server mariadb-client openssl
)
# The sanitizer runtime is packaged per clang version (libclang-rt-N-dev)
# and is not installed with clang under --no-install-recommends: name the
# one of this release's default clang, from its package's dependency when
# apt knows it, else from the Debian release (12: clang 14, 13: clang 19).
_lr_clang_rt() {
	local v release=
	v=$(apt-cache depends clang 2>/dev/null |
		sed -n 's/^ *Depends: clang-\([0-9][0-9]*\)$/\1/p' | head -n 1)
	if [[ -z $v && -r /etc/os-release ]]; then
		release=$(. /etc/os-release && echo "${VERSION_ID:-}")
		case $release in
		12) v=14 ;;
		13) v=19 ;;
		esac
	fi
	[[ -n $v ]] && echo "libclang-rt-$v-dev"
}
# Asked once per run: exported, so that every bats test and every shell a
# suite starts (each sources this file) inherits it instead of running
# apt-cache again (about half a second of CPU each time).
_LR_CLANG_RT=${_LR_CLANG_RT-$(_lr_clang_rt)}
export _LR_CLANG_RT
# shellcheck disable=SC2034 # used by tests/run
LR_TEST_PACKAGES=(
	"${LR_BUILD_PACKAGES[@]}"
	bats bats-assert bats-support galera-4 rsync iproute2 python3-yaml
	clang ${_LR_CLANG_RT:+"$_LR_CLANG_RT"} socat python3-pymysql chromium shellcheck
)

_lr_say() { printf 'lockrun-test: %s\n' "$*" >&2; }

# The server's own programs (mariadbd, mariadb-install-db) and the mysql
# user it runs as come from LR_SERVER_ROOT when that is set: another
# Debian release's root file system whose /tmp is ours (serverroot.bash).
# Everything else, clients included, is this machine's.
_lr_in_root() {
	if [[ -n ${LR_SERVER_ROOT:-} ]]; then
		chroot "$LR_SERVER_ROOT" "$@"
	else
		"$@"
	fi
}

_lr_is_root() { [[ $EUID -eq 0 ]]; }

# True when the server programs are MySQL's (a root with mysqld and no
# mariadbd): it is made with mysqld --initialize-insecure, and its admin
# is root with an empty password over the socket (MySQL has no unix_socket
# authentication by default).
lr_server_is_mysql() {
	[[ -n ${LR_SERVER_ROOT:-} && ! -x $LR_SERVER_ROOT/usr/sbin/mariadbd &&
		-x $LR_SERVER_ROOT/usr/sbin/mysqld ]]
}

# The admin account: the one unix_socket authentication maps us to on
# MariaDB, root on MySQL.
lr_admin_user() {
	if _lr_is_root || lr_server_is_mysql; then echo root; else id -un; fi
}

# Absolute path of an existing directory. mariadbd resolves relative paths
# against its datadir, so every path we hand it must be absolute.
_lr_abs() { (cd "$1" && pwd); }

# ---------------------------------------------------------------------------
# TLS material

# lr_tls_make DIR: a throwaway CA, a server certificate for localhost and
# 127.0.0.1 signed by it, and an unrelated CA (other-ca.pem) for negative tests.
lr_tls_make() {
	local dir=$1
	mkdir -p "$dir"
	dir=$(_lr_abs "$dir")
	# EC P-256 keys: generating them takes milliseconds, unlike RSA.
	local -a newkey=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
	if ! (
		set -e
		cd "$dir"
		umask 022
		openssl req -x509 "${newkey[@]}" -days 2 -subj '/CN=lockrun test CA' \
			-keyout ca-key.pem -out ca.pem
		openssl req "${newkey[@]}" -subj '/CN=localhost' \
			-keyout server-key.pem -out server.csr
		printf '%s\n' \
			'basicConstraints = critical, CA:FALSE' \
			'keyUsage = critical, digitalSignature' \
			'extendedKeyUsage = serverAuth' \
			'subjectAltName = DNS:localhost, IP:127.0.0.1' >server.ext
		openssl x509 -req -days 2 -in server.csr -CA ca.pem -CAkey ca-key.pem \
			-CAcreateserial -extfile server.ext -out server.pem
		openssl req -x509 "${newkey[@]}" -days 2 -subj '/CN=unrelated CA' \
			-keyout other-ca-key.pem -out other-ca.pem
		rm -f server.csr server.ext ca.srl
	) >"$dir/openssl.log" 2>&1; then
		_lr_say "lr_tls_make $dir failed:"
		cat "$dir/openssl.log" >&2
		return 1
	fi
	chmod 755 "$dir"
	chmod 644 "$dir"/*.pem
	chmod 600 "$dir"/*-key.pem
	# mariadbd runs as mysql and must read its key; nobody else needs to.
	if _lr_is_root; then
		_lr_in_root chgrp mysql "$dir/server-key.pem" && chmod 640 "$dir/server-key.pem"
	fi
}

# ---------------------------------------------------------------------------
# Ports

_lr_port_in_use() {
	local port=$1
	if command -v ss >/dev/null; then
		# Any TCP socket with that local port, listening or not.
		[[ -n $(ss -Htan "( sport = :$port )" 2>/dev/null) ]] && return 0
	fi
	# Something accepts connections there (also covers a missing ss).
	(exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null
}

# lr_free_port: print a loopback TCP port nobody uses now. Ports handed out
# before in this test run (recorded under $LR_TMP) are skipped too, so that
# servers started one after another get distinct ports before they bind.
# Below the kernel's range for outgoing connections where it leaves room:
# a port that is bound only now and then (a restarted server, Galera's
# IST listener) could otherwise be taken meanwhile by a client's
# connection, as one Galera run found ("bind: Address already in use").
lr_free_port() {
	local port i reg='' lo=20000 span=40001 eph _
	[[ -n ${LR_TMP:-} && -d ${LR_TMP:-} && -w ${LR_TMP:-} ]] && reg=$LR_TMP/.ports
	read -r eph _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || eph=
	[[ $eph =~ ^[0-9]+$ ]] && ((eph > lo + 4000)) && span=$((eph - lo))
	for ((i = 0; i < 500; i++)); do
		port=$((lo + (RANDOM * 32768 + RANDOM) % span))
		if [[ -n $reg && -f $reg ]] && grep -qx "$port" "$reg"; then
			continue
		fi
		_lr_port_in_use "$port" && continue
		[[ -n $reg ]] && echo "$port" >>"$reg"
		echo "$port"
		return 0
	done
	_lr_say "lr_free_port: no free port found"
	return 1
}

# ---------------------------------------------------------------------------
# Server life cycle

# lr_server_init INSTDIR [mariadb-install-db args...]: create the datadir.
# Does nothing if INSTDIR/data is already initialised (the demo reuses it).
lr_server_init() {
	local inst=$1
	shift
	mkdir -p "$inst"
	inst=$(_lr_abs "$inst")
	[[ -d $inst/data/mysql ]] && return 0
	local -a who=()
	if _lr_is_root; then
		who=(--user=mysql)
		_lr_in_root chown mysql: "$inst"
		if ! _lr_in_root runuser -u mysql -- test -w "$inst"; then
			_lr_say "the mysql user cannot write $inst (a parent directory is not" \
				"searchable by it); use an instance dir under /tmp"
			return 1
		fi
	fi
	local -a cmd=(mariadb-install-db --no-defaults --datadir="$inst/data" "${who[@]}"
		--auth-root-authentication-method=socket --skip-test-db "$@")
	lr_server_is_mysql && cmd=(mysqld --no-defaults --initialize-insecure
		--datadir="$inst/data" "${who[@]}" "$@")
	if ! _lr_in_root "${cmd[@]}" >"$inst/install-db.log" 2>&1; then
		_lr_say "${cmd[0]} failed for $inst:"
		tail -n 30 "$inst/install-db.log" >&2
		return 1
	fi
}

# True if PID is a live (not zombie) process. The server may have been started
# by another shell (e.g. tests/run while we are in a bats test), so we cannot
# rely on `wait`, and a killed child of that shell may linger as a zombie.
_lr_pid_alive() {
	local pid=$1 stat
	kill -0 "$pid" 2>/dev/null || return 1
	read -r stat 2>/dev/null <"/proc/$pid/stat" || return 1
	stat=${stat##*) }
	[[ ${stat%% *} != [ZX] ]]
}

# lr_server_pid INSTDIR: print the pid of the instance's running server.
# Checks the process really is mariadbd, so a recycled pid is never signalled.
lr_server_pid() {
	local inst=$1 pid comm
	[[ -f $inst/server.pid ]] || return 1
	pid=$(<"$inst/server.pid")
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	_lr_pid_alive "$pid" || return 1
	read -r comm 2>/dev/null <"/proc/$pid/comm" || return 1
	[[ $comm == mariadbd || $comm == mysqld ]] || return 1
	echo "$pid"
}

lr_server_running() { lr_server_pid "$1" >/dev/null; }

# _lr_wait_dead PID SECONDS: wait until PID is gone; false on timeout.
_lr_wait_dead() {
	local pid=$1 i
	for ((i = 0; i < $2 * 10; i++)); do
		if ! _lr_pid_alive "$pid"; then
			wait "$pid" 2>/dev/null || true # reap it if it is our child
			return 0
		fi
		sleep 0.1
	done
	return 1
}

lr_ping() {
	mariadb-admin --no-defaults --socket="$1/mysqld.sock" --connect-timeout=2 \
		-u"$(lr_admin_user)" ping >/dev/null 2>&1
}

# Length of a string in bytes, not characters.
_lr_bytes() {
	local LC_ALL=C
	echo "${#1}"
}

# Start the server described by INSTDIR/server.port and INSTDIR/server.args
# and wait until it answers.
_lr_server_spawn() {
	local inst=$1 port pid i
	local -a extra=() cmd=(mariadbd --no-defaults)
	lr_server_is_mysql && cmd=(mysqld --no-defaults)
	# chroot execs the server: the pid stays the server's.
	[[ -n ${LR_SERVER_ROOT:-} ]] && cmd=(chroot "$LR_SERVER_ROOT" "${cmd[@]}")
	port=$(<"$inst/server.port")
	if (($(_lr_bytes "$inst/mysqld.sock") >= 108)); then
		_lr_say "socket path $inst/mysqld.sock is too long (limit: 107 bytes);" \
			"use a shorter instance dir"
		return 1
	fi
	[[ -s $inst/server.args ]] && mapfile -d '' -t extra <"$inst/server.args"
	if lr_server_running "$inst"; then
		_lr_say "a server is already running in $inst"
		return 1
	fi
	# MySQL's lock beside its socket names the pid of the server that made
	# it; one killed with SIGKILL leaves it, and while nobody has reaped
	# that server's zombie yet, the next start takes it for alive and
	# refuses to start ("Another process ... is using unix socket file").
	rm -f "$inst/mysqld.sock.lock"
	_lr_is_root && cmd+=(--user=mysql)
	cmd+=(
		--datadir="$inst/data"
		--socket="$inst/mysqld.sock"
		--port="$port"
		--bind-address=127.0.0.1
		--pid-file="$inst/mysqld.pid"
		--log-error="$inst/mysqld.err"
		--skip-name-resolve
		--innodb-buffer-pool-size=64M
		--innodb-flush-log-at-trx-commit=2
		--max-connections=600
	)
	# A small redo log: quick to create, and a Galera cluster of three
	# does not need 300 MB of disk. InnoDB resizes it at startup.
	if lr_server_is_mysql; then
		# No X protocol listener (it would take port 33060), no file
		# directory to check, and the redo log by its MySQL 8.0.30+ name.
		# The binary log stays on, as MySQL's default is, but without an
		# fsync per commit, like the redo log above.
		cmd+=(--mysqlx=OFF --secure-file-priv= --innodb-redo-log-capacity=16M --sync-binlog=0)
	else
		cmd+=(--innodb-log-file-size=16M)
	fi
	if [[ -d $inst/tls ]]; then
		cmd+=(--ssl-ca="$inst/tls/ca.pem" --ssl-cert="$inst/tls/server.pem"
			--ssl-key="$inst/tls/server-key.pem")
	fi
	cmd+=("${extra[@]}")
	# INSTDIR/server.env, if any: NAME=VALUE lines for the server alone (a
	# test's LD_PRELOAD shim, say). env execs the server: its pid stays.
	if [[ -s $inst/server.env ]]; then
		local -a envs
		mapfile -t envs <"$inst/server.env"
		cmd=(env "${envs[@]}" "${cmd[@]}")
	fi
	# stdio goes to a file and fd 3 is closed: bats waits for every process
	# holding its fd 3, so a server started inside a test must not inherit it.
	"${cmd[@]}" </dev/null >>"$inst/mysqld.out" 2>&1 3>&- &
	pid=$!
	echo "$pid" >"$inst/server.pid"
	for ((i = 0; i < ${LR_SERVER_START_TIMEOUT:-30} * 10; i++)); do
		if ! _lr_pid_alive "$pid"; then
			wait "$pid" 2>/dev/null || true
			break
		fi
		if lr_ping "$inst"; then
			return 0
		fi
		sleep 0.1
	done
	_lr_say "the server in $inst did not come up; end of $inst/mysqld.err:"
	tail -n 30 "$inst/mysqld.err" >&2 2>/dev/null || true
	tail -n 10 "$inst/mysqld.out" >&2 2>/dev/null || true
	if _lr_pid_alive "$pid"; then
		kill -KILL "$pid" 2>/dev/null || true
		_lr_wait_dead "$pid" 5 || true
	fi
	return 1
}

# lr_server_start INSTDIR PORT [mariadbd args...]: start in the background and
# wait (bounded) until it answers a ping. PORT and args are remembered for
# lr_server_restart; args come last so they can override ours.
lr_server_start() {
	local inst port=$2
	inst=$(_lr_abs "$1")
	shift 2
	echo "$port" >"$inst/server.port"
	if (($#)); then
		printf '%s\0' "$@" >"$inst/server.args"
	else
		: >"$inst/server.args"
	fi
	_lr_server_spawn "$inst"
}

# lr_server_stop INSTDIR: clean shutdown (SIGTERM), bounded wait, then SIGKILL.
# Fine to call when the server is not running.
lr_server_stop() {
	local inst=$1 pid
	pid=$(lr_server_pid "$inst") || {
		rm -f "$inst/server.pid"
		return 0
	}
	kill -CONT "$pid" 2>/dev/null || true # a paused server cannot shut down
	kill -TERM "$pid" 2>/dev/null || true
	if ! _lr_wait_dead "$pid" "${LR_SERVER_STOP_TIMEOUT:-30}"; then
		_lr_say "the server in $inst ignored SIGTERM; killing it"
		kill -KILL "$pid" 2>/dev/null || true
		_lr_wait_dead "$pid" 10 || return 1
	fi
	rm -f "$inst/server.pid"
}

# lr_server_kill INSTDIR: crash it (SIGKILL) and wait until it is gone.
lr_server_kill() {
	local inst=$1 pid
	pid=$(lr_server_pid "$inst") || return 0
	kill -KILL "$pid" 2>/dev/null || true
	_lr_wait_dead "$pid" 10 || return 1
	rm -f "$inst/server.pid"
}

# lr_server_pause / lr_server_resume INSTDIR: freeze and thaw the server, to
# simulate a hung database (connections stay open; nothing answers).
lr_server_pause() {
	local pid
	pid=$(lr_server_pid "$1") || return 1
	kill -STOP "$pid"
}

lr_server_resume() {
	local pid
	pid=$(lr_server_pid "$1") || return 1
	kill -CONT "$pid"
}

# lr_server_restart INSTDIR: stop, then start with the same port and args.
lr_server_restart() {
	local inst
	inst=$(_lr_abs "$1")
	lr_server_stop "$inst" || return 1
	_lr_server_spawn "$inst"
}

# ---------------------------------------------------------------------------
# Administration

# lr_close_fds: close every fd above 2 of the current shell. For a server
# or helper started from inside a bats test: it must not inherit bats's
# pipes (`cmd 3>&- &` closes only fd 3), or bats, and the `bats | tee`
# around it, wait for it to exit.
lr_close_fds() {
	local fd
	for fd in /proc/"$BASHPID"/fd/*; do
		fd=${fd##*/}
		if [[ $fd =~ ^[0-9]+$ ]] && ((fd > 2 && fd != 255)); then
			eval "exec $fd>&-" 2>/dev/null || true
		fi
	done
}

# lr_admin_sql INSTDIR [SQL|-] [DATABASE]: run SQL as the admin account over
# the socket, batch mode without column names. With "-" or no SQL, read it
# from stdin.
lr_admin_sql() {
	local inst=$1 sql=${2:--} db=${3:-}
	local -a cmd=(mariadb --no-defaults --socket="$inst/mysqld.sock"
		-u"$(lr_admin_user)" -N -B)
	[[ -n $db ]] && cmd+=(-D "$db")
	if [[ $sql == - ]]; then
		"${cmd[@]}"
	else
		"${cmd[@]}" -e "$sql"
	fi
}

# lr_server_key_conf INSTDIR: on MySQL, the config line that names the
# server's RSA public key, copied from the data directory where the server
# made it (as an operator copies it from the server). MySQL's accounts log
# in with caching_sha2_password, which over TCP without TLS encrypts the
# password with that key, and lockrun will not take the key from the
# network, where anyone in the path could hand it another. Nothing on
# MariaDB, whose accounts use mysql_native_password.
lr_server_key_conf() {
	local inst=$1
	lr_server_is_mysql || return 0
	cp "$inst/data/public_key.pem" "$inst/server-public-key.pem" &&
		chmod 644 "$inst/server-public-key.pem" &&
		printf 'server_public_key = %s\n' "$inst/server-public-key.pem"
}

# lr_provision INSTDIR: database `lockrun`, account 'lockrun'@'%' with a fresh
# random password and exactly the documented grant (sql/grant.sql), and the
# client config files lockrun.conf (that account, TCP) and admin.conf (admin,
# socket). Safe to repeat: the account is re-created with a new password.
lr_provision() {
	local inst pw port admin
	inst=$(_lr_abs "$1")
	port=$(<"$inst/server.port")
	admin=$(lr_admin_user)
	pw=$(openssl rand -hex 16) # hex: no quoting trouble in SQL or INI
	lr_admin_sql "$inst" "CREATE DATABASE IF NOT EXISTS lockrun;
		DROP USER IF EXISTS 'lockrun'@'%';
		CREATE USER 'lockrun'@'%' IDENTIFIED BY '$pw';" || return 1
	# Feed the repository's file itself, so the tests prove it is enough.
	lr_admin_sql "$inst" - lockrun <"$LR_SRC/sql/grant.sql" || return 1
	(
		umask 077
		# No trailing newline: the file holds exactly the password.
		printf '%s' "$pw" >"$inst/lockrun.pw"
		cat >"$inst/lockrun.conf" <<-EOF
			[database]
			host = 127.0.0.1
			port = $port
			user = lockrun
			password_file = $inst/lockrun.pw
			database = lockrun
			connect_timeout = 5
		EOF
		lr_server_key_conf "$inst" >>"$inst/lockrun.conf"
		cat >"$inst/admin.conf" <<-EOF
			[database]
			socket = $inst/mysqld.sock
			user = $admin
			database = lockrun
		EOF
	) || return 1
	chmod 600 "$inst/lockrun.pw" "$inst/lockrun.conf" "$inst/admin.conf"
}

# ---------------------------------------------------------------------------
# Host setup, shared by tests/run and contrib/demo

# Run a command as root: directly, or through sudo.
lr_as_root() {
	if _lr_is_root; then
		"$@"
	else
		sudo "$@"
	fi
}

_LR_POLICY=/usr/sbin/policy-rc.d
_LR_POLICY_MARK='# lockrun: keep apt from starting services (removed afterwards)'

# lr_ensure_packages PKG...: apt-get install the Debian packages not installed
# yet; a prepared machine never touches apt. Package scripts must not start
# a system-wide MariaDB (we never use one), so unless the machine already has
# a policy-rc.d we install a temporary one that forbids starting services.
lr_ensure_packages() {
	local p rc=0
	local -a missing=()
	if ! command -v dpkg-query >/dev/null; then
		_lr_say "not a Debian system: make sure these are installed: $*"
		return 0
	fi
	for p; do
		dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null |
			grep -q '^install ok installed$' || missing+=("$p")
	done
	((${#missing[@]})) || return 0
	_lr_say "installing: ${missing[*]}"
	# A leftover of ours (an earlier run was interrupted) is ours to remove.
	if [[ ! -e $_LR_POLICY ]] || grep -qxF "$_LR_POLICY_MARK" "$_LR_POLICY"; then
		# shellcheck disable=SC2016 # $1 and $2 are the inner shell's
		lr_as_root sh -c 'printf "#!/bin/sh\n%s\nexit 101\n" "$2" >"$1" &&
			chmod 755 "$1"' sh "$_LR_POLICY" "$_LR_POLICY_MARK" || return 1
	fi
	lr_as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q || rc=$?
	if ((rc == 0)); then
		lr_as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
			--no-install-recommends "${missing[@]}" || rc=$?
	fi
	if grep -qxF "$_LR_POLICY_MARK" "$_LR_POLICY" 2>/dev/null; then
		lr_as_root rm -f "$_LR_POLICY"
	fi
	return "$rc"
}

# lr_meson_tree DIR [meson setup options...]: configure DIR unless it already
# is with the same compiler ($CC) and options, then compile it. A changed
# compiler needs a wiped tree; changed options only a reconfigure.
lr_meson_tree() {
	local dir=$1 want_cc=${CC:-} want_opts
	shift
	want_opts="$*"
	local stamp=$dir/.lockrun-setup had_cc had_opts
	if [[ -f $dir/meson-private/coredata.dat ]]; then
		if [[ -f $stamp ]]; then
			{
				IFS= read -r had_cc
				IFS= read -r had_opts
			} <"$stamp"
			if [[ $had_cc != "$want_cc" ]]; then
				meson setup --wipe "$dir" "$@" || return 1
			elif [[ $had_opts != "$want_opts" ]]; then
				meson setup --reconfigure "$dir" "$@" || return 1
			fi
		else
			meson setup --reconfigure "$dir" "$@" || return 1
		fi
	else
		meson setup "$dir" "$@" || return 1
	fi
	printf '%s\n%s\n' "$want_cc" "$want_opts" >"$stamp"
	meson compile -C "$dir"
}
