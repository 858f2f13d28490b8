#!/usr/bin/env bats
#
# The documentation a newcomer follows: the README reaches the demo within
# one screen and gives exactly two set-up commands (contrib/demo and
# tests/run, which .ci/run also runs), and every link and repository path in
# README.md and doc/ resolves (tests/tools/doclinks.py); the man pages open
# with examples, and the README leads to the page of examples.

load helpers/common

bats_require_minimum_version 1.5.0

@test "docs: every link, anchor and repository path in the documentation resolves" {
	run python3 "$LR_SRC/tests/tools/doclinks.py" "$LR_SRC"
	echo "$output"
	[ "$status" -eq 0 ]
	[ -z "$output" ]
}

@test "docs: the README reaches its two commands, the demo and the tests, within one screen" {
	# The commands are the indented lines of the section "Try it".
	run awk '/^## /{ s = ($0 == "## Try it") } s && /^    [^ ]/{ sub(/^ +/, ""); print }' "$LR_SRC/README.md"
	[ "$status" -eq 0 ]
	[ "$output" = $'contrib/demo\ntests/run' ]
	[ -x "$LR_SRC/contrib/demo" ]
	[ -x "$LR_SRC/tests/run" ]
	# One screen: the section starts within the first 25 lines.
	line=$(grep -n '^## Try it$' "$LR_SRC/README.md" | cut -d: -f1)
	[ "$line" -le 25 ]
}

@test "docs: the checker reports a broken link, a missing anchor and the old docs/ folder" {
	root=$BATS_TEST_TMPDIR/tree
	mkdir -p "$root/doc"
	printf '# Top\n\n## A part\n' >"$root/doc/page.md"
	printf '# R\n[ok](doc/page.md#a-part) [gone](doc/none.md)\n[bad](doc/page.md#nowhere) `src/none.c` docs/x\n' \
		>"$root/README.md"
	run python3 "$LR_SRC/tests/tools/doclinks.py" "$root"
	[ "$status" -eq 1 ]
	[[ $output == *"README.md:2: no such file: doc/none.md"* ]]
	[[ $output == *"README.md:3: no heading for #nowhere in doc/page.md"* ]]
	[[ $output == *"README.md:3: no such path: src/none.c"* ]]
	[[ $output == *"README.md:3: names the old docs/ folder"* ]]
	[[ $output != *"#a-part"* ]]
}

@test "docs: the README's option tables name every long option lockrun --help lists" {
	run "$LOCKRUN" --help
	[ "$status" -eq 0 ]
	opts=$(grep -o -- '--[a-z][a-z-]*' <<<"$output" | sort -u)
	[ -n "$opts" ]
	# Only the table rows of the README count, not its prose.
	rows=$(grep '^| `' "$LR_SRC/README.md")
	missing=
	for o in $opts; do
		grep -qE -- "[\` ]$o[\` \\]" <<<"$rows" || missing+=" $o"
	done
	echo "not in the README's tables:$missing"
	[ -z "$missing" ]
}

@test "docs: the man pages of the two programs start with EXAMPLES, and the README leads to the page of examples" {
	# The top-level headings outside code blocks, in order.
	for page in lockrun.1.scd lockrunctl.1.scd; do
		run awk '/^```/{ f = !f; next } !f && /^# [A-Z]/{ print }' "$LR_SRC/doc/$page"
		assert_equal "${lines[0]} ${lines[1]} ${lines[2]}" "# NAME # SYNOPSIS # EXAMPLES"
	done
	# Within the README's first screen, and short: a page, not a manual.
	run grep -n -m1 '(doc/examples.md)' "$LR_SRC/README.md"
	assert_success
	((${output%%:*} <= 25))
	(($(wc -l <"$LR_SRC/doc/examples.md") <= 100))
}

@test "docs: the README's first paragraph names both servers lockrun supports" {
	first=$(awk 'NR > 1 && /^$/ && seen { exit } NR > 1 && /[^ ]/ { seen = 1; print }' "$LR_SRC/README.md")
	echo "$first"
	[[ $first == *MariaDB* ]]
	[[ $first == *MySQL* ]]
}

@test "docs: every password_file under /etc that the docs show is the same path" {
	run sh -c "grep -rhoE 'password_file *= *[^ ;]+' '$LR_SRC/README.md' '$LR_SRC/doc' '$LR_SRC/contrib' |
		sed 's/^password_file *= *//' | grep '^/etc/' | sort -u"
	assert_success
	assert_output /etc/lockrun/password
}

@test "docs: sql-api.md's lockrun_renew example shows the columns the procedure returns" {
	cols=$(mariadb --no-defaults --socket="$LR_SOCKET" -u"$(lr_admin_user)" -B -D lockrun \
		-e "CALL lockrun_renew('00000000000000000000000000000000', 30000)" | head -n 1 | tr '\t' ' ')
	example=$(grep -A1 '^> CALL lockrun_renew(' "$LR_SRC/doc/sql-api.md" | sed -n 2p | tr -s ' ')
	[ -n "$cols" ]
	assert_equal "$example" "$cols"
}
