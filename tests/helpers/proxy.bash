# shellcheck shell=bash
#
# lrproxy in front of the suite's server, for tests that inject faults:
#   load helpers/proxy
# A test that calls proxy must stop it in teardown:
#   [[ -z ${proxy_pid:-} ]] || kill "$proxy_pid" 2>/dev/null || true

# proxy: start lrproxy in front of the suite's server; sets proxy_pid,
# proxy_port, fifo (its control FIFO) and pconf (a config that goes
# through it).
proxy() {
	fifo=$BATS_TEST_TMPDIR/ctl
	"$LR_TOOLS/lrproxy" --target "$LR_PORT" --port-file "$BATS_TEST_TMPDIR/proxy.port" \
		--control "$fifo" >/dev/null 3>&- &
	# shellcheck disable=SC2034 # for the test that sourced this file
	proxy_pid=$!
	lr_wait_for test -s "$BATS_TEST_TMPDIR/proxy.port"
	proxy_port=$(cat "$BATS_TEST_TMPDIR/proxy.port")
	pconf=$BATS_TEST_TMPDIR/proxy.conf
	sed "s/^port = .*/port = $proxy_port/" "$LR_DB/lockrun.conf" >"$pconf"
	printf 'connect_timeout = 1\n' >>"$pconf"
	chmod 600 "$pconf"
}

# pctl COMMAND: tell the proxy, and wait until it has done it.
pctl() {
	echo "$*" >"$fifo"
	lr_wait_for grep -qx "ok $*" "$fifo.log"
}
