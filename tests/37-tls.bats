#!/usr/bin/env bats
#
# Connecting as shops do: by host name, with the server's certificate
# verified against that name (as a public or corporate CA issues it: a DNS
# subjectAltName only), or against the address when the config names an
# address; a pinned fingerprint, a client certificate, a lowest TLS
# version, a CA directory. And no password under an RSA key nobody
# verified (MySQL's caching_sha2_password over TCP without TLS).
#
# A server of this file's own presents a certificate that names
# db.lockrun.test only. lockrun resolves names itself, so each run of it
# gets a private mount namespace whose /etc/hosts maps the test names to
# 127.0.0.1; the machine's /etc/hosts is never touched.

load helpers/common

bats_require_minimum_version 1.5.0

setup_file() {
	export TS=$LR_TMP/tls37
	local dir=$TS/tls
	mkdir -p "$TS"
	lr_server_init "$TS" >/dev/null
	lr_tls_make "$dir"
	(
		set -e
		cd "$dir"
		umask 022
		newkey=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
		# The server's: a DNS name only, no address, no meaningful CN.
		openssl req "${newkey[@]}" -subj '/O=lockrun test' -keyout server-key.pem -out s.csr
		printf '%s\n' 'basicConstraints = critical, CA:FALSE' \
			'extendedKeyUsage = serverAuth' 'subjectAltName = DNS:db.lockrun.test' >s.ext
		openssl x509 -req -days 2 -in s.csr -CA ca.pem -CAkey ca-key.pem \
			-CAcreateserial -extfile s.ext -out server.pem
		# A client's, for an account that requires its subject.
		openssl req "${newkey[@]}" -subj '/CN=lockrun-client' -keyout client-key.pem -out c.csr
		printf '%s\n' 'basicConstraints = critical, CA:FALSE' \
			'extendedKeyUsage = clientAuth' >c.ext
		openssl x509 -req -days 2 -in c.csr -CA ca.pem -CAkey ca-key.pem \
			-CAcreateserial -extfile c.ext -out client.pem
		rm -f ./*.csr ./*.ext ca.srl
		# A CA directory as OpenSSL looks names up in it.
		mkdir capath
		cp ca.pem capath/
		openssl rehash capath
	) >"$TS/openssl.log" 2>&1
	chmod 644 "$dir"/*.pem
	chmod 600 "$dir"/*-key.pem
	# The server (in its own root, maybe) runs as mysql and reads its key.
	if [[ $(id -u) == 0 ]]; then
		_lr_in_root chgrp mysql "$dir/server-key.pem" && chmod 640 "$dir/server-key.pem"
	fi
	lr_server_start "$TS" "$(lr_free_port)" >/dev/null
	lr_provision "$TS"
	"$LOCKRUNCTL" -c "$TS/admin.conf" -q init >/dev/null
	"$LOCKRUNCTL" -c "$TS/admin.conf" -q set tls37 1
	printf '127.0.0.1 db.lockrun.test other.lockrun.test\n' >"$TS/hosts"
}

teardown_file() {
	lr_server_stop "$TS"
}

setup() {
	conf=$BATS_TEST_TMPDIR/tls.conf
	port=$(<"$TS/server.port")
}

teardown() {
	[[ -z ${proxy_pid:-} ]] || kill "$proxy_pid" 2>/dev/null || true
}

# conf_with KEY=VALUE...: this file's server's account config, with keys
# replaced or added.
conf_with() {
	cp "$TS/lockrun.conf" "$conf"
	local kv
	for kv in "$@"; do
		sed -i "/^${kv%%=*} *=/d" "$conf"
		printf '%s = %s\n' "${kv%%=*}" "${kv#*=}" >>"$conf"
	done
}

# named CMD...: CMD where the test names resolve to 127.0.0.1.
named() {
	unshare --mount sh -c 'mount --bind "$0" /etc/hosts && exec "$@"' "$TS/hosts" "$@"
}

# runs: lockrun with $conf takes this file's semaphore and runs a command.
runs() {
	run named "$LOCKRUN" -c "$conf" -s tls37 -- echo inside
}

@test "verified TLS by host name: a certificate with that DNS name only is accepted" {
	conf_with "host=db.lockrun.test" "ssl_ca=$TS/tls/ca.pem" "ssl_verify_server_cert=true"
	runs
	assert_success
	assert_output inside
}

@test "a certificate that names another host: refused, one line naming both" {
	conf_with "host=other.lockrun.test" "ssl_ca=$TS/tls/ca.pem" "ssl_verify_server_cert=true"
	runs
	assert_failure 69
	assert_output "lockrun: cannot connect to other.lockrun.test:$port (127.0.0.1): the server's certificate does not name other.lockrun.test; it names DNS:db.lockrun.test (2026)"
}

@test "the name is verified, not the address it resolves to: an IP SAN does not stand for a name" {
	# The suite's server's certificate names localhost and 127.0.0.1.
	cp "$LR_DB/lockrun.conf" "$conf"
	printf 'host = db.lockrun.test\nssl_ca = %s\nssl_verify_server_cert = true\n' "$LR_TLS/ca.pem" >>"$conf"
	run named "$LOCKRUN" -c "$conf" -x tls37 -- true
	assert_failure 69
	assert_output --partial "does not name db.lockrun.test; it names DNS:localhost, IP:127.0.0.1"
	# By address, the IP SAN verifies.
	sed -i 's/^host = db.lockrun.test/host = 127.0.0.1/' "$conf"
	run "$LOCKRUN" -c "$conf" -x tls37 -- true
	assert_success
}

# link CONF: doctor's finding on its connection, as "status|detail".
link() {
	named "$LOCKRUNCTL" -c "$1" --json doctor | python3 -c 'import json, sys
for f in json.load(sys.stdin)["checks"]:
    if f["check"] == "connection": print(f["status"] + "|" + f["detail"])'
}

@test "doctor: the connection's TLS version and cipher, the name the certificate was verified against, the plugin" {
	conf_with "host=db.lockrun.test" "ssl_ca=$TS/tls/ca.pem" "ssl_verify_server_cert=true"
	run link "$conf"
	assert_output --regexp '^ok\|db.lockrun.test \(127.0.0.1\): TLSv1.[23], [A-Z0-9_-]+; certificate verified against db.lockrun.test; plugin [a-z_0-9]+$'
	conf_with "host=db.lockrun.test" "ssl_ca=$TS/tls/ca.pem"
	run link "$conf"
	assert_output --regexp '^warning\|db.lockrun.test \(127.0.0.1\): TLSv1.[23], [A-Z0-9_-]+; certificate not verified \(set ssl_verify_server_cert = true\)'
	conf_with "host=127.0.0.1"
	run link "$conf"
	assert_output --regexp '^ok\|127.0.0.1: TCP, not encrypted; plugin [a-z_0-9]+$'
}

@test "doctor with several hosts: each host's connection on a line of its own, one refused by name" {
	conf_with "host=db.lockrun.test, other.lockrun.test" "ssl_ca=$TS/tls/ca.pem" \
		"ssl_verify_server_cert=true"
	run link "$conf"
	assert_line --index 0 --regexp '^ok\|db.lockrun.test \(127.0.0.1\): TLSv1.[23], [A-Z0-9_-]+; certificate verified against db.lockrun.test; plugin [a-z_0-9]+$'
	assert_line --index 1 --partial "warning|other.lockrun.test: no answer: "
	assert_line --index 1 --partial "the server's certificate does not name other.lockrun.test; it names DNS:db.lockrun.test"
	assert [ "${#lines[@]}" -eq 2 ]
}

@test "a reconnect verifies the name again" {
	conf_with "host=db.lockrun.test" "ssl_ca=$TS/tls/ca.pem" "ssl_verify_server_cert=true"
	# The run's connections are killed while its command runs: lockrun
	# reconnects (by name, verified) to renew, and the command finishes.
	named "$LOCKRUN" -vv -c "$conf" --ttl 3 --kill-after 0 -s tls37 -- sh -c 'sleep 3; echo done' \
		>"$BATS_TEST_TMPDIR/out" 2>&1 3>&- &
	local pid=$! id
	sleep 1
	for id in $(lr_admin_sql "$TS" "SELECT ID FROM information_schema.PROCESSLIST WHERE USER = 'lockrun'"); do
		lr_admin_sql "$TS" "KILL $id" || true
	done
	wait "$pid"
	run cat "$BATS_TEST_TMPDIR/out"
	assert_line done
	[[ $(grep -c "connected to db.lockrun.test:$port" "$BATS_TEST_TMPDIR/out") -ge 2 ]]
}

@test "a connection killed mid-run while answers are slow: the next TLS connection renews, and the command runs on" {
	# Through a proxy that holds every chunk 1 ms each way, so that each
	# wait for an answer is a real wait: what the lost TLS connection left
	# in the thread's OpenSSL error queue made every such wait on the next
	# connection fail as a lost connection too (the lease ran out: 76).
	local fifo=$BATS_TEST_TMPDIR/ctl
	"$LR_TOOLS/lrproxy" --target "$port" --port-file "$BATS_TEST_TMPDIR/proxy.port" \
		--control "$fifo" >/dev/null 3>&- &
	proxy_pid=$!
	lr_wait_for test -s "$BATS_TEST_TMPDIR/proxy.port"
	echo "delay 1" >"$fifo"
	lr_wait_for grep -qx "ok delay 1" "$fifo.log"
	conf_with "host=db.lockrun.test" "port=$(<"$BATS_TEST_TMPDIR/proxy.port")" \
		"ssl_ca=$TS/tls/ca.pem" "ssl_verify_server_cert=true"
	named "$LOCKRUN" -vv -c "$conf" --ttl 3 --kill-after 0.5 -s tls37 -- sh -c 'sleep 4; echo done' \
		>"$BATS_TEST_TMPDIR/out" 2>&1 3>&- &
	local pid=$! id rc=0
	sleep 1
	for id in $(lr_admin_sql "$TS" "SELECT ID FROM information_schema.PROCESSLIST WHERE USER = 'lockrun'"); do
		lr_admin_sql "$TS" "KILL $id" || true
	done
	wait "$pid" || rc=$?
	run cat "$BATS_TEST_TMPDIR/out"
	assert_equal "$rc" 0
	assert_line done
	# Renewed on a new connection. Whether a renewal failed first depends
	# on where the KILL found the connection: in a call, or idle (lockrun
	# then sees it go and reconnects before its next call).
	[[ $(grep -c "connected to db.lockrun.test:" "$BATS_TEST_TMPDIR/out") -ge 2 ]] ||
		fail "no second connection: $(cat "$BATS_TEST_TMPDIR/out")"
}

@test "a waiter's second connection, its doorbell, verifies the name too" {
	conf_with "host=db.lockrun.test" "ssl_ca=$TS/tls/ca.pem" "ssl_verify_server_cert=true"
	"$LOCKRUN" -c "$TS/lockrun.conf" -x tlsbell -- sleep 1.5 3>&- &
	local holder=$!
	sleep 0.5
	run named "$LOCKRUN" -vv -c "$conf" -w 20 -x tlsbell -- echo inside
	wait "$holder"
	assert_success
	assert_line inside
	refute_line --partial "no doorbell connection"
	[[ $(grep -c "connected to db.lockrun.test:$port" <<<"$output") -ge 2 ]]
}

@test "a CA directory (ssl_capath) verifies by name too" {
	conf_with "host=db.lockrun.test" "ssl_capath=$TS/tls/capath" "ssl_verify_server_cert=true"
	runs
	assert_success
}

@test "a pinned certificate fingerprint: the right one connects, another is refused" {
	local fp
	fp=$(openssl x509 -in "$TS/tls/server.pem" -noout -fingerprint -sha1 | sed 's/.*=//')
	conf_with "host=db.lockrun.test" "ssl_fingerprint=$fp"
	runs
	assert_success
	conf_with "host=db.lockrun.test" "ssl_fingerprint=${fp//[0-9]/0}"
	runs
	assert_failure 69
	assert_output --partial "Fingerprint verification of server certificate failed"
}

@test "a client certificate: an account that requires its subject logs in with it, and only with it" {
	lr_admin_sql "$TS" "DROP USER IF EXISTS 'lrx509'@'%';
		CREATE USER 'lrx509'@'%' IDENTIFIED BY 'x509-pw' REQUIRE SUBJECT '/CN=lockrun-client';
		GRANT EXECUTE ON lockrun.* TO 'lrx509'@'%'"
	printf 'x509-pw\n' >"$BATS_TEST_TMPDIR/pw"
	chmod 600 "$BATS_TEST_TMPDIR/pw"
	conf_with "host=db.lockrun.test" "user=lrx509" "password_file=$BATS_TEST_TMPDIR/pw" \
		"ssl_ca=$TS/tls/ca.pem" "ssl_verify_server_cert=true"
	runs
	assert_failure 69
	assert_output --partial "Access denied for user 'lrx509'"
	printf 'ssl_cert = %s\nssl_key = %s\n' "$TS/tls/client.pem" "$TS/tls/client-key.pem" >>"$conf"
	runs
	assert_success
	assert_output inside
}

@test "tls_version: a server without the lowest version allowed is refused" {
	lr_server_stop "$TS"
	lr_server_start "$TS" "$port" --tls-version=TLSv1.2 >/dev/null
	conf_with "host=db.lockrun.test" "ssl_ca=$TS/tls/ca.pem" "ssl_verify_server_cert=true" \
		"tls_version=TLSv1.3"
	runs
	local rc=$status out=$output
	conf_with "host=db.lockrun.test" "ssl_ca=$TS/tls/ca.pem" "ssl_verify_server_cert=true" \
		"tls_version=TLSv1.2"
	runs
	lr_server_stop "$TS"
	lr_server_start "$TS" "$port" >/dev/null
	assert_equal "$rc" 69
	[[ $out == "lockrun: cannot connect to db.lockrun.test:$port (127.0.0.1): "*TLS* ]]
	assert_success
}

# A server that refuses connections without TLS, as managed services can
# be set to: the verified connection works, doctor finds nothing wrong; a
# config without TLS is refused at once, in one line (69). MySQL's answer
# (3159) names the setting, as MariaDB 11.8's does; MariaDB 10.11's is a
# plain 1045, which lockrun cannot tell from a wrong password: its hint
# names the setting too. The
# setting is put back before the assertions, as it is global.
@test "require_secure_transport = ON: verified TLS by name works; without TLS, refused at once in one line (69)" {
	lr_admin_sql "$TS" "SET GLOBAL require_secure_transport = ON"
	conf_with "host=db.lockrun.test" "ssl_ca=$TS/tls/ca.pem" "ssl_verify_server_cert=true"
	runs
	local tls_rc=$status tls_out=$output
	run named "$LOCKRUNCTL" -c "$conf" doctor
	local doc_rc=$status doc_out=$output
	conf_with "host=127.0.0.1"
	local t0=${EPOCHREALTIME/[.,]/}
	run --separate-stderr "$LOCKRUN" -c "$conf" -s tls37 -- echo inside
	local ms=$(((${EPOCHREALTIME/[.,]/} - t0) / 1000))
	lr_admin_sql "$TS" "SET GLOBAL require_secure_transport = OFF"
	assert_equal "$tls_rc" 0
	assert_equal "$tls_out" inside
	assert_equal "$doc_rc" 0
	[[ $doc_out != *FAIL* ]] || fail "doctor: $doc_out"
	assert_failure 69
	assert_equal "$output" ""
	assert_equal "${#stderr_lines[@]}" 1
	if [[ $stderr == *"(3159)"* ]]; then
		# MySQL, and MariaDB 11.8, name the setting themselves.
		assert_regex "$stderr" "^lockrun: cannot connect to 127\.0\.0\.1:$port: .*require_secure_transport.*\(3159\)"
	else
		! lr_server_is_mysql || fail "MySQL answered: $stderr"
		assert_regex "$stderr" "^lockrun: cannot connect to 127\.0\.0\.1:$port: Access denied .*\(1045\).*require_secure_transport = ON refuses a login without TLS the same way: then set ssl_ca and ssl_verify_server_cert = true$"
	fi
	((ms < 5000)) || fail "refused after $ms ms"
}

@test "the new keys are checked when the file is read: one line naming file:line, exit 78" {
	local key
	# A public key the RSA exchange cannot use, and a damaged RSA one.
	openssl ecparam -genkey -name prime256v1 -noout | openssl ec -pubout -out "$BATS_TEST_TMPDIR/ec.pem" 2>/dev/null
	openssl genrsa 2048 2>/dev/null | openssl rsa -pubout 2>/dev/null | sed '3d' >"$BATS_TEST_TMPDIR/cut.pem"
	for key in "ssl_capath=$TS/tls/ca.pem:not a directory" \
		"server_public_key=$BATS_TEST_TMPDIR/ec.pem:holds no RSA public key in PEM" \
		"server_public_key=$BATS_TEST_TMPDIR/cut.pem:holds no RSA public key in PEM" \
		"ssl_ca=$TS/nowhere.pem:No such file or directory" \
		"ssl_fingerprint=12:34:not a SHA-1 digest" \
		"tls_version=TLSv1.1:is not TLSv1.2 or TLSv1.3" \
		"server_public_key=$TS/tls/ca.pem:holds no RSA public key in PEM" \
		"allow_public_key_retrieval=maybe:is not a boolean"; do
		conf_with "${key%:*}"
		run "$LOCKRUN" -c "$conf" -s tls37 -- true
		assert_failure 78
		assert_output --regexp "^lockrun: $conf:[0-9]+: ${key%%=*}: .*${key##*:}"
		assert_equal "${#lines[@]}" 1
	done
}

@test "password_file: the password is the file's first line, without its newline" {
	# lr_provision's file has no newline; this one has, and a second line.
	printf '%s\nnot part of it\n' "$(<"$TS/lockrun.pw")" >"$BATS_TEST_TMPDIR/pw"
	chmod 600 "$BATS_TEST_TMPDIR/pw"
	conf_with "password_file=$BATS_TEST_TMPDIR/pw"
	runs
	assert_success
	conf_with "password_file=$BATS_TEST_TMPDIR/missing"
	runs
	assert_failure 78
	assert_output --regexp "^lockrun: $conf:[0-9]+: password_file $BATS_TEST_TMPDIR/missing: No such file"
}

# The RSA exchange is MySQL's: MariaDB's accounts use mysql_native_password
# (or ed25519), which never expose the password.
mysql_only() {
	lr_server_is_mysql || skip "caching_sha2_password's RSA key exchange is MySQL's; this run's server is MariaDB"
}

# rsa_account: a caching_sha2_password account whose password the server
# has not cached yet, so that the login takes the RSA exchange.
rsa_account() {
	lr_admin_sql "$TS" "DROP USER IF EXISTS 'lrsha'@'%';
		CREATE USER 'lrsha'@'%' IDENTIFIED WITH caching_sha2_password BY 'sha-pw';
		GRANT EXECUTE ON lockrun.* TO 'lrsha'@'%'; FLUSH PRIVILEGES"
	printf 'sha-pw' >"$BATS_TEST_TMPDIR/pw"
	chmod 600 "$BATS_TEST_TMPDIR/pw"
}

@test "MySQL: caching_sha2_password over TCP without TLS is refused, no RSA key asked for, exit 69" {
	mysql_only
	rsa_account
	conf_with "user=lrsha" "password_file=$BATS_TEST_TMPDIR/pw"
	sed -i '/^server_public_key/d' "$conf"
	runs
	assert_failure 69
	assert_output "lockrun: cannot connect to 127.0.0.1:$port: the account logs in with caching_sha2_password, which over TCP without TLS sends the password under an RSA key nobody verified; set ssl_ca (TLS), server_public_key, or allow_public_key_retrieval = true (5010)"
}

@test "MySQL: allow_public_key_retrieval = true opts in" {
	mysql_only
	rsa_account
	conf_with "user=lrsha" "password_file=$BATS_TEST_TMPDIR/pw" "allow_public_key_retrieval=true"
	sed -i '/^server_public_key/d' "$conf"
	runs
	assert_success
}

@test "MySQL: server_public_key is the key used: the server's logs in, another's does not" {
	mysql_only
	rsa_account
	cp "$TS/data/public_key.pem" "$BATS_TEST_TMPDIR/server-key.pem"
	conf_with "user=lrsha" "password_file=$BATS_TEST_TMPDIR/pw" \
		"server_public_key=$BATS_TEST_TMPDIR/server-key.pem"
	runs
	assert_success
	# Another RSA key: the server cannot read the password, and nothing
	# was asked of it.
	openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 2>/dev/null |
		openssl pkey -pubout >"$BATS_TEST_TMPDIR/other-key.pem"
	rsa_account
	conf_with "user=lrsha" "password_file=$BATS_TEST_TMPDIR/pw" \
		"server_public_key=$BATS_TEST_TMPDIR/other-key.pem"
	runs
	assert_failure 69
	assert_output --partial "Access denied for user 'lrsha'"
}

@test "MySQL: caching_sha2_password over verified TLS needs neither" {
	mysql_only
	rsa_account
	conf_with "host=db.lockrun.test" "user=lrsha" "password_file=$BATS_TEST_TMPDIR/pw" \
		"ssl_ca=$TS/tls/ca.pem" "ssl_verify_server_cert=true"
	sed -i '/^server_public_key/d' "$conf"
	runs
	assert_success
}

@test "doctor warns when the password's proof crosses a network in clear (TCP, no TLS, not loopback)" {
	# A test host of its own: a network namespace whose address is not
	# loopback (TEST-NET-1, on its lo). socat carries each connection out
	# through a socket file to the server's TCP port, so the server sees
	# TCP from loopback, as for any other test. Nothing else leaves the
	# namespace.
	local relay=$BATS_TEST_TMPDIR/relay.sock
	socat UNIX-LISTEN:"$relay",fork TCP:127.0.0.1:"$port" 2>/dev/null 3>&- &
	local relay_pid=$!
	lr_wait_for test -S "$relay"
	conf_with host=192.0.2.10 port=3306
	run --separate-stderr unshare --net sh -c 'ip link set lo up && ip addr add 192.0.2.10/32 dev lo || exit 99
		socat TCP-LISTEN:3306,bind=192.0.2.10,reuseaddr,fork UNIX-CONNECT:"$0" 2>/dev/null &
		for i in 1 2 3 4 5 6 7 8 9 10; do
			socat -u OPEN:/dev/null TCP:192.0.2.10:3306 2>/dev/null && break
			sleep 0.1
		done
		"$1" -c "$2" --json doctor
		s=$?
		kill $!
		exit $s' "$relay" "$LOCKRUNCTL" "$conf"
	kill "$relay_pid"
	echo "$output"
	[ "$status" -eq 0 ] || [ "$status" -eq 1 ]
	run findings connection "$output"
	assert_output --regexp "^warning\|192\.0\.2\.10: TCP, not encrypted; plugin [a-z0-9_]+: the password's proof and every statement cross the network in clear; set ssl_ca and ssl_verify_server_cert = true$"
	# The same over loopback: no warning.
	conf_with
	run "$LOCKRUNCTL" -c "$conf" --json doctor
	run findings connection "$output"
	assert_output --regexp "^ok\|127\.0\.0\.1: TCP, not encrypted"
}
