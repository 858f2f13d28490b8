#!/usr/bin/env bats
#
# A host whose clock runs fast or slow (lrclock's LR_CLOCK_RATE): what a
# program reads and how long its waits last follow the rate, and so does
# lockrun's local deadline, judged from the command's own record of when it
# was stopped.

load helpers/common
load helpers/records
load helpers/proxy

bats_require_minimum_version 1.5.0

setup() {
	setup_records
	pids=()
}

teardown() {
	kill_pids
	[[ -z ${proxy_pid:-} ]] || kill "$proxy_pid" 2>/dev/null || true
}

# now_ms: the true wall clock in ms.
now_ms() {
	echo $((${EPOCHREALTIME/[.,]/} / 1000))
}

# stop_after RATE: runs lockrun with its clocks at RATE through the proxy,
# cuts its renewals off just after one of them, and sets took to how many
# ms after the cut its command noted SIGTERM (true time).
stop_after() {
	local rate=$1 log=$BATS_TEST_TMPDIR/log.$1 stopped=$BATS_TEST_TMPDIR/stopped.$1 a cut
	LD_PRELOAD=$LR_TOOLS/lrclock.so LR_CLOCK_RATE=$rate \
		"$LOCKRUN" -c "$pconf" -v --ttl 3 --kill-after 0.5 -x "rate$rate" -- \
		sh -c "trap 'echo \$((\$(date +%s%N) / 1000000)) >$stopped; exit 0' TERM; sleep 30 & wait" \
		3>&- 2>"$log" &
	a=$!
	pids+=("$a")
	lr_wait_for grep -q "renewed grant" "$log"
	# The proxy's answers from the run before must not count.
	: >"$fifo.log"
	pctl blackhole on
	cut=$(now_ms)
	lr_wait_for -t 15 test -s "$stopped"
	took=$(($(cat "$stopped") - cut))
	grep -q "lock lost (not renewed in time)" "$log" || fail "rate $rate: not stopped by the deadline"
	kill -KILL "$a"
	wait "$a" || true
	: >"$fifo.log"
	pctl reset
}

# within MS LOW HIGH: LOW <= MS <= HIGH, or a failure that says which.
within() {
	(($2 <= $1 && $1 <= $3)) || fail "stopped $1 ms after the cut, not within [$2, $3]"
}

@test "the local deadline follows the host's clock: slow (0.5) stops the command late, fast (2) early" {
	proxy
	# The deadline is the last renewal + 0.99 * 3 s - 0.25 s - 0.5 s =
	# 2.22 s by lockrun's clock: 4.44 s of true time at rate 0.5, 2.22 s
	# at 1, 1.11 s at 2. The cut comes up to ~0.4 s after the renewal
	# (0.15 to 0.35 s measured). Unscaled, the three would all stop
	# about 2 s after the cut.
	local took slow normal fast
	stop_after 0.5
	slow=$took
	stop_after 1
	normal=$took
	stop_after 2
	fast=$took
	within "$slow" 3700 5500
	within "$normal" 1500 2900
	within "$fast" 500 1600
	((slow - normal >= 1200)) || fail "rate 0.5 stopped $slow ms after the cut, rate 1 $normal"
	((normal - fast >= 600)) || fail "rate 1 stopped $normal ms after the cut, rate 2 $fast"
}

# probe SECONDS: a Python program that waits SECONDS in each way the shim
# covers (time.sleep, which is an absolute clock_nanosleep, and the others
# by name; a relative and an absolute timerfd on CLOCK_BOOTTIME) and
# prints, for each, the true time it took and what CLOCK_MONOTONIC and
# CLOCK_BOOTTIME said it took.
probe() {
	cat <<EOF
import ctypes, os, select, time

d = $1
libc = ctypes.CDLL(None)  # the process's own symbols: a preloaded shim's first


class Ts(ctypes.Structure):
    _fields_ = [("sec", ctypes.c_long), ("nsec", ctypes.c_long)]


class Its(ctypes.Structure):
    _fields_ = [("interval", Ts), ("value", Ts)]


def ts(ns):
    return Ts(ns // 10**9, ns % 10**9)


def timerfd(flags, at):
    fd = libc.timerfd_create(time.CLOCK_BOOTTIME, 0)
    assert libc.timerfd_settime(fd, flags, ctypes.byref(Its(Ts(0, 0), ts(at))), None) == 0
    os.read(fd, 8)
    os.close(fd)


ep = select.epoll()
ev = ctypes.create_string_buffer(16)
ms, span = int(d * 1000), ctypes.byref(ts(int(d * 1e9)))
waits = {
    "sleep": lambda: time.sleep(d),
    "nanosleep": lambda: libc.nanosleep(span, None),
    "clock_nanosleep": lambda: libc.clock_nanosleep(time.CLOCK_MONOTONIC, 0, span, None),
    "poll": lambda: select.poll().poll(ms),
    "ppoll": lambda: libc.ppoll(None, 0, span, None),
    "epoll_wait": lambda: ep.poll(d),
    "epoll_pwait": lambda: libc.epoll_pwait(ep.fileno(), ev, 1, ms, None),
    "epoll_pwait2": lambda: libc.epoll_pwait2(ep.fileno(), ev, 1, span, None),
    "select": lambda: select.select([], [], [], d),
    "pselect": lambda: libc.pselect(0, None, None, None, span, None),
    "timerfd": lambda: timerfd(0, int(d * 1e9)),
    "timerfd-abs": lambda: timerfd(1, time.clock_gettime_ns(time.CLOCK_BOOTTIME) + int(d * 1e9)),
}
for name, wait in waits.items():
    r, m, b = time.time(), time.monotonic(), time.clock_gettime(time.CLOCK_BOOTTIME)
    wait()
    print(name, int((time.time() - r) * 1000), int((time.monotonic() - m) * 1000),
          int((time.clock_gettime(time.CLOCK_BOOTTIME) - b) * 1000))
EOF
}

# waits_take RATE TRUE_MS: runs the probe (0.3 s waits) at RATE; each wait
# must take TRUE_MS (-10 ms, +50 %) of true time and 300 ms (-10, +200) by
# the program's own clocks. Unscaled, each would take 300 ms of both.
waits_take() {
	local py
	# The interpreter itself: a wrapper script in between would drop the
	# shim (it takes LD_PRELOAD out of the environment).
	py=$(python3 -c 'import sys; print(sys.executable)')
	run env LD_PRELOAD="$LR_TOOLS/lrclock.so" LR_CLOCK_RATE="$1" "$py" -c "$(probe 0.3)"
	assert_success
	assert_equal "$(wc -l <<<"$output")" 12
	local name true_ms mono boot
	while read -r name true_ms mono boot; do
		(($2 - 10 <= true_ms && true_ms <= $2 * 3 / 2)) ||
			fail "$name took $true_ms ms of true time at rate $1, not about $2"
		((290 <= mono && mono <= 500 && 290 <= boot && boot <= 500)) ||
			fail "$name took $mono ms by CLOCK_MONOTONIC, $boot by CLOCK_BOOTTIME at rate $1, not about 300"
	done <<<"$output"
}

@test "a program's clocks and timed waits follow the rate: 0.3 s by its clocks is 0.15 s at 2, 0.6 s at 0.5" {
	waits_take 2 150
	waits_take 0.5 600
}

@test "a bad LR_CLOCK_RATE ends the process with a line that names it" {
	local v
	for v in 0.4 2.5 abc .5 1.0000000001 "1 "; do
		run -125 env LD_PRELOAD="$LR_TOOLS/lrclock.so" LR_CLOCK_RATE="$v" "$LOCKRUN" --version
		assert_output "lrclock: LR_CLOCK_RATE must be a decimal from 0.5 to 2 with at most 9 places"
	done
	# The bounds are good, and empty is no rate.
	for v in 0.5 2 ""; do
		run -0 env LD_PRELOAD="$LR_TOOLS/lrclock.so" LR_CLOCK_RATE="$v" "$LOCKRUN" --version
	done
}
