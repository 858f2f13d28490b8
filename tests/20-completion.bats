#!/usr/bin/env bats
#
# The bash completion (contrib/completion/lockrun.bash), called as bash
# calls it: COMP_WORDS and COMP_CWORD set, the function run, COMPREPLY
# read. Lock names come from whatever lockrunctl is first on PATH: a fake
# one here that prints names, hangs or fails, and the real one.

load helpers/common

bats_require_minimum_version 1.5.0

setup() {
	fake=$BATS_TEST_TMPDIR/bin
	mkdir -p "$fake"
	calls=$BATS_TEST_TMPDIR/calls
}

# fake_ctl SCRIPT: a lockrunctl first on PATH that runs SCRIPT (sh), after
# noting its arguments in $calls.
fake_ctl() {
	printf '#!/bin/sh\necho "$*" >>%q\n%s\n' "$calls" "$1" >"$fake/lockrunctl"
	chmod +x "$fake/lockrunctl"
}

# complete WORD...: what the completion offers for the command line WORD...
# with the cursor at the end of the last word (give "" for a new word):
# COMPREPLY, one per line, sorted. Runs in a fresh bash with the fake
# lockrunctl first on PATH; anything the completion writes to stderr is
# shown too, as it would garble the user's terminal.
complete_line() {
	PATH=$fake:$PATH bash --norc -c '
		source "$1"; shift
		COMP_WORDS=("$@")
		COMP_CWORD=$(($# - 1))
		COMP_LINE="$*" COMP_POINT=${#COMP_LINE}
		"$(complete -p "$1" | sed "s/.*-F \([^ ]*\) .*/\1/")"
		printf "%s\n" "${COMPREPLY[@]}" | sort -u | sed "/^$/d"' \
		bash "$LR_SRC/contrib/completion/lockrun.bash" "$@"
}

# long_options PROGRAM: the long options its --help lists.
long_options() {
	"$1" --help | grep -oE -- '--[a-z][a-z-]+' | sort -u
}

@test "lockrun --<TAB> offers every long option lockrun --help lists" {
	run complete_line lockrun --
	assert_success
	local opt
	for opt in $(long_options "$LOCKRUN"); do
		assert_line -- "$opt"
	done
	refute_line --regexp '^[^-]' # no file or command names
	run complete_line lockrun -s a --ki
	assert_output --kill-after
}

@test "lockrunctl: its commands, and the global options --help lists" {
	run complete_line lockrunctl ""
	assert_success
	local cmd
	for cmd in $("$LOCKRUNCTL" --help | sed -n '/^Commands:/,/^$/s/^  \([a-z-]*\).*/\1/p'); do
		assert_line "$cmd"
	done
	# every option --help lists, before the command or after one
	local offered=
	for cmd in "" $("$LOCKRUNCTL" --help | sed -n '/^Commands:/,/^$/s/^  \([a-z-]*\).*/\1/p'); do
		offered+=$(complete_line lockrunctl $cmd --)$'\n'
	done
	for opt in $(long_options "$LOCKRUNCTL"); do
		grep -qx -- "$opt" <<<"$offered" || fail "$opt is not offered"
	done
	run complete_line lockrunctl st
	assert_output status
	run complete_line lockrunctl status --format=
	assert_output "$(printf 'json\nprometheus\ntext')"
}

@test "lock names come from lockrunctl list KIND --names, by kind" {
	fake_ctl 'case "$*" in
		*semaphore*) printf "backup-slots\n" ;;
		*mutex*) printf "build\n" ;;
		*rwlock*) printf "reports\n" ;;
		*key*) printf "id:nightly\n" ;;
		*) printf "backup-slots\nbuild\nid:nightly\nreports\n" ;;
	esac'
	# After -s only semaphores, after -x only mutexes, after --read or
	# --write only read-write locks.
	run complete_line lockrun -s b
	assert_output backup-slots
	run complete_line lockrun -n --mutex ""
	assert_output build
	run complete_line lockrun --write=re
	assert_output reports
	run complete_line lockrun --read ""
	assert_output reports
	# --id KEY: keys, listed as id:KEY
	run complete_line lockrun --id ""
	assert_output nightly
	# lockrunctl shows the key rows as they are named; bash splits the word
	# at ':' and replaces only what follows it
	run complete_line lockrunctl status id : ""
	assert_output nightly
	run complete_line lockrunctl delete ""
	assert_output "$(printf 'backup-slots\nbuild\nid:nightly\nreports')"
	run complete_line lockrunctl set ""
	assert_output backup-slots
	# a second argument is no name
	run complete_line lockrunctl set build ""
	assert_output ""
	run complete_line lockrunctl list ""
	assert_output "$(printf 'key\nmutex\nrwlock\nsemaphore')"
	assert_equal "$(sort -u "$calls")" "$(printf -- '-q list --names\n-q list key --names\n-q list mutex --names\n-q list rwlock --names\n-q list semaphore --names')"
}

@test "the -c FILE of the line being completed is the one lockrunctl uses" {
	fake_ctl 'echo name-from-conf'
	run complete_line lockrun -c /etc/other.conf -x ""
	assert_output name-from-conf
	run complete_line lockrunctl --config=/etc/third.conf status ""
	assert_output name-from-conf
	assert_equal "$(cat "$calls")" "-c /etc/other.conf -q list mutex --names
-c /etc/third.conf -q list --names"
}

@test "a database that does not answer in a second: no names, no wait, no noise" {
	fake_ctl 'echo early-name; exec sleep 30'
	local t0=$SECONDS
	run --separate-stderr complete_line lockrun -x ""
	assert_success
	assert_output ""
	assert_equal "$stderr" ""
	(((SECONDS - t0) < 5)) || fail "completion took $((SECONDS - t0)) s"
	# and nothing is left running
	run pgrep -f "$fake/lockrunctl"
	assert_failure
}

@test "a failing or missing lockrunctl: no names, nothing on the terminal" {
	fake_ctl 'echo "lockrunctl: cannot connect" >&2; exit 69'
	run --separate-stderr complete_line lockrun -x ""
	assert_success
	assert_output ""
	assert_equal "$stderr" ""
	# no lockrunctl at all
	run --separate-stderr env PATH="$fake:/usr/bin:/bin" bash --norc -c '
		rm -f "$1/lockrunctl"; source "$2"
		COMP_WORDS=(lockrun -x ""); COMP_CWORD=2; _lockrun
		echo "${#COMPREPLY[@]}"' bash "$fake" "$LR_SRC/contrib/completion/lockrun.bash"
	assert_success
	assert_output 0
	assert_equal "$stderr" ""
}

@test "the command after the locks completes as a command" {
	run complete_line lockrun -x a -- ech
	assert_line echo
	run complete_line lockrun -x a ech
	assert_line echo
	refute_line --regexp '^-'
	# an option's value is not taken for the command
	run complete_line lockrun -w 5 --on-lost ""
	assert_output "$(printf 'ignore\nkill')"
}

@test "names from the real lockrunctl and the suite's database" {
	"$LOCKRUNCTL" --help | grep -q '^  list' || skip "lockrunctl has no list command yet"
	ctl set comp-sem 2
	"$LOCKRUN" -x comp-mutex -- true
	ln -s "$LOCKRUNCTL" "$fake/lockrunctl"
	# list reads the tables: the operator's account, named on the line
	run complete_line lockrun -c "$LR_ADMIN_CONFIG" -s comp-
	assert_output comp-sem
	run complete_line lockrun -c "$LR_ADMIN_CONFIG" -x comp-
	assert_output comp-mutex
}

@test "zsh: the completion file loads and defines its functions" {
	command -v zsh >/dev/null || skip "zsh is not installed"
	run zsh -f -c 'fpath=("$1" $fpath); autoload -Uz compinit && compinit -u -D
		autoload -Uz _lockrun && print ok' zsh "$LR_SRC/contrib/completion"
	assert_success
	assert_output ok
	run zsh -n "$LR_SRC/contrib/completion/_lockrun"
	assert_success
}
