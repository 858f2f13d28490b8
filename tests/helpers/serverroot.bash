# shellcheck shell=bash
#
# Other database servers for the suites: a server that this machine's
# Debian release does not ship runs from a root file system of the
# release that does, made once with debootstrap from the archive apt
# already uses, and kept between runs. lockrun, its tests and the
# clients run on this machine; only mariadbd runs inside (chroot), on
# loopback, with its data under the suite's temp dir, which is the same
# path inside: the root's /tmp is this machine's /tmp (a bind mount).
# The server programs are mariadbd or mysqld, whichever the root has.
#
#   lr_server_root_for NAME   print the root of server NAME, making it if needed
#   LR_SERVER_ROOT            set to that root: server.bash runs mariadbd,
#                             mariadb-install-db and the mysql user's checks in it
#   lr_server_root_add ROOT PACKAGE...
#                             install those of the release's PACKAGEs that ROOT
#                             lacks (a suite's extra programs, e.g. mysql-router)
#
# Servers (NAME): mariadb-10.11 (this machine's own on Debian 12: no root),
# mariadb-11.8 (Debian 13 "trixie"), mysql-9.7 (Debian unstable "sid",
# whose Release file may be older than its Valid-Until). The roots live under
# ${LR_SERVER_ROOTS:-/var/tmp/lockrun-servers}; each holds the packages of
# one release. Never delete one with rm -rf while mounted: its tmp is this
# machine's /tmp. lr_server_root_unmount ROOT undoes the mounts.
#
# This file only defines functions: it sets no shell options.

LR_SERVER_ROOTS=${LR_SERVER_ROOTS:-/var/tmp/lockrun-servers}

_lr_root_say() { printf 'lockrun-test: %s\n' "$*" >&2; }

# The Debian suite and packages that provide server NAME, as
# "SUITE PACKAGE...", or nothing for this machine's own server.
_lr_server_release() {
	case $1 in
	mariadb-10.11) [[ $(mariadbd --version 2>/dev/null) == *" 10.11."* ]] ||
		echo "bookworm mariadb-server mariadb-client" ;;
	mariadb-11.8) echo "trixie mariadb-server mariadb-client" ;;
	mysql-9.7) echo "sid mysql-server" ;;
	*) return 1 ;;
	esac
}

# The archive this machine's apt uses (its first deb URI), so a root
# comes from the same mirror and needs no other network.
_lr_apt_mirror() {
	local uri
	uri=$(sed -n 's/^URIs: *\([^ ]*\).*/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null |
		grep -v security | head -n 1)
	[[ -z $uri ]] && uri=$(awk '$1 == "deb" && $0 !~ /security/ { print $2; exit }' \
		/etc/apt/sources.list 2>/dev/null)
	echo "${uri:-http://deb.debian.org/debian}"
}

# lr_server_root_mount ROOT: the bind mounts a server needs (proc, dev, and
# this machine's /tmp), each made once.
lr_server_root_mount() {
	local root=$1 d
	for d in proc dev tmp; do
		mountpoint -q "$root/$d" && continue
		mkdir -p "$root/$d"
		mount --bind "/$d" "$root/$d" || return 1
	done
	cp /etc/hosts "$root/etc/hosts"
}

lr_server_root_unmount() {
	local root=$1 d
	for d in tmp dev proc; do
		mountpoint -q "$root/$d" && umount "$root/$d"
	done
	return 0
}

# lr_server_root_for NAME: print the root of server NAME (empty for this
# machine's own), making it the first time: about a minute for the base
# system, half a minute for the server. Needs root and debootstrap.
lr_server_root_for() {
	local name=$1 rel suite root
	local -a pkgs
	rel=$(_lr_server_release "$name") || {
		_lr_root_say "unknown server '$name' (use mariadb-10.11, mariadb-11.8 or mysql-9.7)"
		return 1
	}
	[[ -z $rel ]] && return 0
	suite=${rel%% *}
	read -r -a pkgs <<<"${rel#* }"
	root=$LR_SERVER_ROOTS/$suite
	if [[ ! -x $root/usr/sbin/mariadbd && ! -x $root/usr/sbin/mysqld ]]; then
		command -v debootstrap >/dev/null || lr_ensure_packages debootstrap || return 1
		mkdir -p "$LR_SERVER_ROOTS"
		if [[ ! -x $root/bin/sh ]]; then
			_lr_root_say "making a Debian $suite root in $root"
			debootstrap --variant=minbase "$suite" "$root" "$(_lr_apt_mirror)" \
				>"$LR_SERVER_ROOTS/$suite.log" 2>&1 || {
				_lr_root_say "debootstrap failed; end of $LR_SERVER_ROOTS/$suite.log:"
				tail -n 20 "$LR_SERVER_ROOTS/$suite.log" >&2
				return 1
			}
		fi
		lr_server_root_mount "$root" || return 1
		# No service may start inside: the suites start their own.
		printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
		chmod 755 "$root/usr/sbin/policy-rc.d"
		_lr_root_install "$root" "${pkgs[@]}" || return 1
	fi
	lr_server_root_mount "$root" || return 1
	echo "$root"
}

# _lr_root_install ROOT PACKAGE...: apt inside ROOT, from its own release,
# logged to ROOT.log. Waits for another run's apt in the same root.
_lr_root_install() {
	local root=$1
	shift
	_lr_root_say "installing $* in $root"
	chroot "$root" env DEBIAN_FRONTEND=noninteractive sh -c \
		'apt-get -o Acquire::Check-Valid-Until=false -o DPkg::Lock::Timeout=300 update -q &&
			apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends "$@"' \
		sh "$@" >>"$root.log" 2>&1 || {
		_lr_root_say "installing $* failed; end of $root.log:"
		tail -n 20 "$root.log" >&2
		return 1
	}
}

# lr_server_root_add ROOT PACKAGE...: install those PACKAGEs that ROOT
# (made by lr_server_root_for) does not have yet; nothing when it has them
# all, so a root made before a suite needed them gets them too.
lr_server_root_add() {
	local root=$1 p
	local -a missing=()
	shift
	for p; do
		# shellcheck disable=SC2016 # dpkg-query's own ${Status}
		[[ $(chroot "$root" dpkg-query -W -f='${Status}' "$p" 2>/dev/null) == *" installed" ]] ||
			missing+=("$p")
	done
	((${#missing[@]} == 0)) || _lr_root_install "$root" "${missing[@]}"
}
