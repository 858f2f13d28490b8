# shellcheck shell=bash
#
# Waiting for a condition, for every suite (common.bash, tests/group).
#
# This file only defines functions: it sets no shell options.

# lr_wait_for [-t SECONDS] CMD...: run CMD every 0.1 s until it succeeds;
# fail (with a message naming CMD) after SECONDS (a whole number), default
# $LR_WAIT_TIMEOUT or 10.  Example: lr_wait_for -t 5 test -s "$BATS_TEST_TMPDIR/pid"
lr_wait_for() {
	local timeout=${LR_WAIT_TIMEOUT:-10} deadline
	if [[ ${1:-} == -t ]]; then
		timeout=$2
		shift 2
	fi
	# Wall-clock bound (microseconds), so a slow CMD does not stretch it.
	deadline=$((${EPOCHREALTIME/[.,]/} + timeout * 1000000))
	while :; do
		"$@" && return 0
		if ((${EPOCHREALTIME/[.,]/} >= deadline)); then
			echo "lr_wait_for: gave up after ${timeout}s waiting for: $*" >&2
			return 1
		fi
		sleep 0.1
	done
}

# lr_wait_eq [-t SECONDS] EXPECTED CMD...: run CMD every 0.1 s until its
# output is EXPECTED. (Unlike `lr_wait_for test "$(CMD)" = X`, which would
# run CMD only once, before waiting.)
lr_wait_eq() {
	local opt=()
	if [[ ${1:-} == -t ]]; then
		opt=(-t "$2")
		shift 2
	fi
	lr_wait_for "${opt[@]}" lr_output_is "$@"
}

lr_output_is() {
	local want=$1
	shift
	[[ "$("$@")" == "$want" ]]
}
