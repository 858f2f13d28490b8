#!/usr/bin/env bats
#
# tests/run-mutants on its own side: every mutation of tests/mutants/list
# applies to this tree and builds, one that does not build is named, and
# one that does not apply is refused by name before anything is built or
# run. (The campaigns it runs
# take minutes each; doc/testing.md, "Proof by mutation", has what they
# found.)

load helpers/common

bats_require_minimum_version 1.5.0

@test "run-mutants: every mutation of the list builds; one that does not is named" {
	d=$BATS_TEST_TMPDIR/m
	mkdir -p "$d/a/src" "$d/b/src"
	cp "$LR_SRC"/tests/mutants/* "$d/"
	# One more, which applies but leaves a warning (an error here).
	cp "$LR_SRC/src/supervisor.c" "$d/a/src/"
	{
		cat "$LR_SRC/src/supervisor.c"
		echo 'static int lr_never_used;'
	} >"$d/b/src/supervisor.c"
	(cd "$d" && diff -u a/src/supervisor.c b/src/supervisor.c >warns.diff) || true
	echo "warns single 1 60 a mutation that does not build" >>"$d/list"
	n=$(grep -cv '^\(#\|$\)' "$LR_SRC/tests/mutants/list")
	run --separate-stderr "$LR_SRC/tests/run-mutants" --build --list "$d/list"
	[ "$status" -eq 3 ]
	[[ $stderr == *"mutation warns does not build (warnings are errors)"* ]]
	# Every one was built, the unmutated tree first; only that one failed.
	[ "$(grep -c '^== building' <<<"$stderr")" -eq $((n + 2)) ]
	[ "$(grep -c 'does not build' <<<"$stderr")" -eq 1 ]
	[ -z "$output" ]
}

@test "run-mutants: a mutation that no longer applies is named, and nothing is built" {
	d=$BATS_TEST_TMPDIR/m
	mkdir -p "$d"
	cp "$LR_SRC/tests/mutants/sweep-live-holds.diff" "$d/"
	# A diff whose context is not in the tree (as after the code moved on).
	cat >"$d/moved-on.diff" <<-'EOF'
		diff --git a/src/supervisor.c b/src/supervisor.c
		--- a/src/supervisor.c
		+++ b/src/supervisor.c
		@@ -1,3 +1,3 @@
		-#include "no-such-header.h"
		+#include "another-header.h"
		 
		 #include <errno.h>
	EOF
	printf '%s\n' "sweep-live-holds single 1 60 a sweep of live holds" \
		"moved-on single 1 60 a mutation written for an older tree" >"$d/list"
	run --separate-stderr "$LR_SRC/tests/run-mutants" --build --list "$d/list"
	[ "$status" -eq 3 ]
	[[ $stderr == *"mutation moved-on (moved-on.diff) does not apply to this tree"* ]]
	[[ $stderr != *"sweep-live-holds"* ]]
	[[ $stderr != *"== building"* ]]
	[ -z "$output" ]
}

@test "run-mutants: a list entry without its diff, or an unknown name, is a usage error" {
	d=$BATS_TEST_TMPDIR/m
	mkdir -p "$d"
	echo "gone single 1 60 a mutation whose diff was deleted" >"$d/list"
	run --separate-stderr "$LR_SRC/tests/run-mutants" --check --list "$d/list"
	[ "$status" -eq 2 ]
	[[ $stderr == *"mutation gone: no $d/gone.diff"* ]]
	run --separate-stderr "$LR_SRC/tests/run-mutants" --check no-such-mutation
	[ "$status" -eq 2 ]
	[[ $stderr == *"no mutation 'no-such-mutation' in"* ]]
}
