#!/usr/bin/env bats
#
# The build: both programs report the project's version, and `meson install`
# puts the programs and the SQL migrations where the docs say.

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

@test "meson install installs both programs and the SQL migrations" {
	local root=$BATS_TEST_TMPDIR/root
	run meson install -C "$LR_BUILD" --destdir "$root" --no-rebuild --quiet
	assert_success

	local prog
	for prog in lockrun lockrunctl; do
		assert [ -f "$root/usr/local/bin/$prog" ]
		assert [ -x "$root/usr/local/bin/$prog" ]
	done
	assert [ -s "$root/usr/local/share/lockrun/sql/001-initial.sql" ]

	# The installed copy runs (no dependence on the build tree's rpath).
	run "$root/usr/local/bin/lockrun" --version
	assert_success
	assert_output --partial "$LR_VERSION"
}
