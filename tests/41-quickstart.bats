#!/usr/bin/env bats
#
# The README's quick start, followed literally: its commands are read from
# README.md (the indented lines of its section) and run one by one, as
# root, against a fresh server of this file's own, with only the
# documented placeholders (the two passwords, the installed SQL directory)
# filled in and the built programs in place of the installed ones. They run
# in a mount namespace whose /etc and /run are copy-on-write views of the
# machine's, so the files they write (/etc/lockrun.conf,
# /etc/lockrun/operator.conf) and the default socket
# (/run/mysqld/mysqld.sock, here this server's) are the real paths, and
# nothing reaches the machine. Then the packaged sweep unit's and cron
# file's commands run there as well.

load helpers/common

bats_require_minimum_version 1.5.0

SECTION='## Quick start with your own MariaDB or MySQL'

setup_file() {
	export QS=$LR_TMP/qs
	lr_server_init "$QS" >/dev/null
	lr_server_start "$QS" "$(lr_free_port)" >/dev/null
}

teardown_file() {
	lr_server_stop "$QS"
}

# The commands of the README's quick start, one a line.
quickstart_commands() {
	awk -v s="$SECTION" '/^## /{ in_s = ($0 == s) } in_s && /^    +[^ ]/{ sub(/^ +/, ""); print }' \
		"$LR_SRC/README.md"
}

@test "the README's quick start, command by command: a lock held, status shows it, the packaged sweep runs green" {
	local w=$BATS_TEST_TMPDIR cmds
	cmds=$(quickstart_commands)
	echo "$cmds"
	[[ -n $cmds ]]
	# Ten commands or fewer, from an empty server to status.
	(($(wc -l <<<"$cmds") <= 10))
	mkdir -p "$w/bin" "$w/etc-up" "$w/etc-work" "$w/run-up" "$w/run-work"
	ln -s "$LOCKRUN" "$w/bin/lockrun"
	ln -s "$LOCKRUNCTL" "$w/bin/lockrunctl"
	printf '#!/bin/sh\nexec "$@"\n' >"$w/bin/sudo" # we are root already
	chmod 755 "$w/bin/sudo"
	# The placeholders the README names, and where a clone keeps the SQL.
	sed -e "s/LOCKRUN_PASSWORD/$(openssl rand -hex 12)/g" \
		-e "s/OPERATOR_PASSWORD/$(openssl rand -hex 12)/g" \
		-e "s|/usr/share/lockrun/sql/|$LR_SRC/sql/|g" <<<"$cmds" >"$w/commands"
	# What the packaged units run (the timer's service, the cron line).
	unit=$LR_SRC/contrib/systemd/lockrun-sweep.service.in
	sed -n 's/^ExecStart=@bindir@\///p' "$unit" >"$w/unit-command"
	[[ -s $w/unit-command ]]
	# The unit names no other configuration file than lockrunctl's default.
	! grep -q '^Environment=LOCKRUN_CONFIG' "$unit"
	grep -v '^#' "$LR_SRC/contrib/lockrun-sweep.cron" | grep -v = |
		awk 'NF { for (i = 7; i <= NF; i++) printf "%s%s", $i, i < NF ? " " : "\n" }' >"$w/cron-command"
	[[ $(<"$w/cron-command") == "lockrunctl -q sweep" ]]
	cat >"$w/run.sh" <<-EOF
		set -u
		mount -t overlay overlay -o lowerdir=/etc,upperdir=$w/etc-up,workdir=$w/etc-work /etc
		mount -t overlay overlay -o lowerdir=/run,upperdir=$w/run-up,workdir=$w/run-work /run
		# A machine with the package's files, whose server listens on the
		# default socket: the sample configuration, 0640 (root:lockrun there).
		rm -rf /etc/lockrun.conf /etc/lockrun /run/mysqld
		install -m 640 "$LR_SRC/contrib/lockrun.conf.example" /etc/lockrun.conf
		mkdir /run/mysqld && ln -s "$QS/mysqld.sock" /run/mysqld/mysqld.sock
		unset LOCKRUN_CONFIG
		export PATH=$w/bin:\$PATH
		n=0 bg=
		while IFS= read -r cmd; do
			n=\$((n + 1))
			echo "step \$n: \$cmd"
			if [[ \$cmd == *'&' ]]; then
				eval "\$cmd" >"$w/bg.out" 2>&1 3>&-
				bg=\$!
				# What a reader does before the next step: wait for the grant.
				for _ in \$(seq 100); do
					[[ \$(mariadb -N -B -e 'SELECT COUNT(*) FROM lockrun.lr_holds') == 1 ]] && break
					sleep 0.1
				done
				continue
			fi
			eval "\$cmd" || { echo "step \$n failed (\$?)"; exit 1; }
		done <"$w/commands"
		echo "unit: \$(<"$w/unit-command")"
		RETENTION=7d eval "\$(<"$w/unit-command")" || echo "unit failed (\$?)"
		echo "cron: \$(<"$w/cron-command")"
		eval "\$(<"$w/cron-command")" || echo "cron failed (\$?)"
		echo "files: \$(stat -c '%n %a %U' /etc/lockrun/operator.conf)"
		# The documented way to run init later, with both files in place.
		lockrunctl -c /dev/null init
		# lockrun's own account, from /etc/lockrun.conf (the README: group
		# lockrun without sudo), reads status through its procedures,
		# without the command, and is refused the table commands, with the
		# account they need.
		lockrunctl -c /etc/lockrun.conf status || echo "runtime status: \$?"
		lockrunctl -c /etc/lockrun.conf sweep || echo "runtime sweep: \$?"
		# A user who may not read the operator's file gets /etc/lockrun.conf.
		setpriv --reuid=nobody --regid=nogroup --clear-groups lockrunctl status ||
			echo "nobody's status: \$?"
		kill -TERM "\$bg"
		wait "\$bg"
		echo "lockrun: \$? \$(<"$w/bg.out")"
	EOF
	run unshare -m bash "$w/run.sh"
	echo "$output"
	assert_success
	refute_output --partial failed
	assert_output --partial "backup-slots: created with capacity 1"
	# status: the semaphore, held by the sleep of step 9.
	assert_output --regexp $'backup-slots +semaphore 1/1 used\n  holder [^ ]+:[0-9]+ [a-z]+, held [^\n]*token 1, lease [0-9]+s left\n    since [^ ]+  sleep 60'
	assert_output --partial $'unit: lockrunctl sweep --retention ${RETENTION}\nended 0 expired grants'
	assert_output --partial $'cron: lockrunctl -q sweep\nfiles: /etc/lockrun/operator.conf 600 root'
	assert_output --partial "schema is up to date"
	assert_output --regexp $'\n  holder [^ ]+:[0-9]+ [a-z]+, held [^\n]*token 1, lease [0-9]+s left\n    since [^ ]+  \\(command hidden: operator account only\\)\n'
	refute_output --partial "runtime status"
	assert_output --partial "; 'sweep' needs the operator account, not user 'lockrun' of /etc/lockrun.conf"
	assert_output --partial "runtime sweep: 69"
	assert_output --partial "lockrunctl: /etc/lockrun.conf: Permission denied"
	assert_output --partial "nobody's status: 78"
	assert_output --regexp $'lockrun: 143 ?$'
	refute_output --partial "readable by others"
	# Nothing reached the machine's own /etc.
	[[ $(<"$w/etc-up/lockrun.conf") == *"user = lockrun"* ]]
}
