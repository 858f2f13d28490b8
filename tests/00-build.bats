#!/usr/bin/env bats
#
# The build: both programs report the project's version, and `meson install`
# puts the programs and the SQL migrations where the docs say; the modules
# of src/ keep to the layering their headers declare, and every shell script
# passes shellcheck.

load helpers/common

# The version from meson.build, as meson itself understands it.
project_version() {
	meson introspect --projectinfo "$LR_BUILD" |
		python3 -c 'import json, sys; print(json.load(sys.stdin)["version"])'
}

setup_file() {
	LR_VERSION=$(project_version)
	export LR_VERSION
	[[ -n $LR_VERSION ]]
}

@test "lockrun --version prints the project version" {
	run "$LOCKRUN" --version
	assert_success
	assert_output --partial "$LR_VERSION"
}

@test "lockrunctl --version prints the project version" {
	run "$LOCKRUNCTL" --version
	assert_success
	assert_output --partial "$LR_VERSION"
}

@test "meson install installs both programs, the SQL migrations and the routines" {
	local root=$BATS_TEST_TMPDIR/root
	run meson install -C "$LR_BUILD" --destdir "$root" --no-rebuild --quiet
	assert_success

	local prog
	for prog in lockrun lockrunctl; do
		assert [ -f "$root/usr/local/bin/$prog" ]
		assert [ -x "$root/usr/local/bin/$prog" ]
	done
	assert [ -s "$root/usr/local/share/lockrun/sql/001-initial.sql" ]
	local f
	for f in "$LR_SRC"/sql/routines/*.sql; do
		cmp "$f" "$root/usr/local/share/lockrun/sql/routines/${f##*/}"
	done

	# The installed copy runs (no dependence on the build tree's rpath).
	run "$root/usr/local/bin/lockrun" --version
	assert_success
	assert_output --partial "$LR_VERSION"
}

# The layering rule of src/ (each header says which modules it may use; no
# circle of files): tests/tools/layers.py checks it from the includes.
@test "every module of src/ keeps to what its header says it may use, with no circle" {
	run python3 "$LR_SRC/tests/tools/layers.py" "$LR_SRC/src"
	assert_success
	assert_output --partial "no circle"
}

@test "the layering check catches a module that calls back up" {
	local src=$BATS_TEST_TMPDIR/src
	cp -r "$LR_SRC/src" "$src"
	# request is below lock: making it include lock.h closes a circle and
	# breaks request's own declaration.
	sed -i 's/#include "item.h"/#include "item.h"\n#include "lock.h"/' "$src/request.h"
	run python3 "$LR_SRC/tests/tools/layers.py" "$src"
	assert_failure
	assert_line --partial "src/request: includes lock.h but its 'May use:' does not name lock"
	assert_line --regexp '^circle: .*src/request.*src/lock|^circle: .*src/lock.*src/request'
}

@test "every shell script of the project passes shellcheck" {
	cd "$LR_SRC"
	local f files=()
	# By name or by #! line; bats files are not plain shell.
	while IFS= read -r f; do
		[[ -f $f && $f != *.bats ]] || continue
		if [[ $f == *.bash || $f == *.sh ]] || head -n 1 "$f" | grep -qE '^#!.*[/ ](ba)?sh( |$)'; then
			files+=("$f")
		fi
	done < <(git ls-files 2>/dev/null || find . -type f -not -path './build/*' -not -path './.git/*')
	((${#files[@]} >= 20)) || fail "only ${#files[@]} shell scripts found"
	# In batches on every core: with -x each file re-reads what it
	# sources, and one process took half a minute.
	run xargs -0 -n 10 -P "$(nproc)" shellcheck -x < <(printf '%s\0' "${files[@]}")
	assert_success
}
