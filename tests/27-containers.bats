#!/usr/bin/env bats
#
# lockrun as a container's only process: PID 1 of a PID namespace of its
# own (unshare), as in a container without an init. It reaps the orphans
# that are reparented to it, as tini does, and still exits with its
# command's status; outside PID 1 it reaps its command only. And the
# Kubernetes example (contrib/kubernetes/cronjob.yaml): its numbers obey
# the rules of contrib/kubernetes/README.md, and lockrun accepts its
# command line and configuration.
#
# The commands judge from inside what lockrun cannot tell them (their
# parent, the states in /proc) and write it to a record file; the tests
# judge from outside: the record, exit statuses and the lock log.

load helpers/common

bats_require_minimum_version 1.5.0

setup() {
	reset_db
	rec=$BATS_TEST_TMPDIR/rec
}

# as_init CMD...: run CMD as PID 1 of a new PID namespace, with a /proc
# of its own. A lockrun that hangs (it lost its command's status, say) is
# killed after 60 s with all of the namespace, and the status is 124.
as_init() {
	timeout -k 5 60 unshare -p -f --kill-child --mount-proc "$@"
}

# The sh functions the commands below use. state PID: the state letter
# of process PID (Z for a zombie), empty once it is gone. zombies: how
# many zombies there are (with --mount-proc, in the namespace only).
# Builtins only: a command of ours would be one more child to wait for.
# shellcheck disable=SC2016 # expanded by the command's shell
procfns='state() { line=; [ -e "/proc/$1" ] && read -r line 2>/dev/null <"/proc/$1/stat"; s=${line##*) }; echo "${s%% *}"; }
zombies() { n=0; for f in /proc/[0-9]*/stat; do line=; read -r line 2>/dev/null <"$f" || continue; s=${line##*) }; case $s in Z*) n=$((n + 1)) ;; esac; done; echo "$n"; }
'

# A command, run as `sh -c CMD sh RECORD`, that orphans a `sleep 0.3` (its
# parent exits at once), waits up to 5 s for it to be reaped, and records
# its own parent, what became of the orphan (gone, or its state) and the
# zombies left.
# shellcheck disable=SC2016
orphan_cmd="$procfns"'
echo "parent $PPID" >"$1"
sh -c '\''sleep 0.3 & echo $! >"$1"'\'' sh "$1.orphan"
o=$(cat "$1.orphan")
i=0
while [ -n "$(state "$o")" ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
st=$(state "$o")
echo "orphan ${st:-gone}" >>"$1"
echo "zombies $(zombies)" >>"$1"
'

@test "as PID 1: an orphan that exits is reaped, no zombie is left, status 0 passed on" {
	local rc=0
	as_init "$LOCKRUN" -x pid1-orphan -- sh -c "$orphan_cmd" sh "$rec" || rc=$?
	assert_equal "$(cat "$rec")" "parent 1
orphan gone
zombies 0"
	assert_equal "$rc" 0
	assert_equal "$(holds)" 0
	assert_equal "$(sql "SELECT end_reason, exit_status FROM lr_grants")" "$(printf 'exited\t0')"
}

# A command, run as `sh -c CMD sh RECORD PID`, that waits up to 5 s for
# process PID (not its child) to be reaped or become a zombie, records
# what it saw, and exits 7.
# shellcheck disable=SC2016
other_cmd="$procfns"'
i=0
while [ "$(state "$2")" != Z ] && [ -n "$(state "$2")" ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
st=$(state "$2")
echo "other ${st:-gone}" >"$1"
exit 7
'

# other_child [as_init]: lockrun execs from a shell that has a child of
# its own, `sleep 0.3`, which lockrun inherits: a child of lockrun that is
# not its command.
# shellcheck disable=SC2016
other_child() {
	"$@" sh -c 'sleep 0.3 & exec "$1" -x other -- sh -c "$2" sh "$3" $!' \
		sh "$LOCKRUN" "$other_cmd" "$rec"
}

@test "as PID 1: another child of lockrun's is reaped too, the command's status 7 passed on" {
	run -7 other_child as_init
	assert_equal "$(cat "$rec")" "other gone"
	assert_equal "$(sql "SELECT end_reason, exit_status FROM lr_grants")" "$(printf 'exited\t7')"
}

@test "not PID 1: lockrun reaps its command only; another child of its stays a zombie" {
	run -7 other_child
	assert_equal "$(cat "$rec")" "other Z"
	assert_equal "$(sql "SELECT end_reason, exit_status FROM lr_grants")" "$(printf 'exited\t7')"
}

@test "as PID 1: status 7 passed on exactly while orphans exit around the command's end" {
	# 20 orphans that end about when the command does: each SIGCHLD may
	# find the command's exit among theirs, and it must never be taken as
	# an orphan's.
	local i
	for i in 1 2 3; do
		run -7 as_init "$LOCKRUN" -x "pid1-race-$i" -- sh -c \
			'for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
				sh -c "sleep 0.2 &"
			done
			sleep 0.2
			exit 7'
	done
	assert_equal "$(sql "SELECT GROUP_CONCAT(CONCAT(end_reason, ' ', exit_status)) FROM lr_grants")" \
		"exited 7,exited 7,exited 7"
	assert_equal "$(holds)" 0
}

@test "as PID 1: a command killed by SIGKILL gives 137 (128 + 9)" {
	run -137 as_init "$LOCKRUN" -x pid1-kill -- sh -c 'kill -KILL $$'
	assert_equal "$(holds)" 0
	assert_equal "$(sql "SELECT CONCAT(end_reason, ' ', term_signal) FROM lr_grants")" "signaled 9"
}

gone() { ! kill -0 "$1" 2>/dev/null; }

@test "as PID 1: SIGTERM to lockrun (a pod's deletion) reaches the command; 143, lock released" {
	# shellcheck disable=SC2016
	unshare -p -f --kill-child --mount-proc "$LOCKRUN" -x pid1-term -- \
		sh -c 'echo $PPID >"$1"; exec sleep 60' sh "$rec" 3>&- &
	local outer=$! init rc=0
	lr_wait_for test -s "$rec"
	assert_equal "$(cat "$rec")" 1
	# unshare's child, lockrun, is PID 1 inside.
	init=$(<"/proc/$outer/task/$outer/children")
	init=${init%% *}
	[[ -n $init ]] || fail "unshare has no child"
	kill -TERM "$init"
	if ! lr_wait_for -t 10 gone "$outer"; then
		kill -KILL "$init"
		fail "lockrun did not exit after SIGTERM"
	fi
	wait "$outer" || rc=$?
	assert_equal "$rc" 143
	assert_equal "$(holds)" 0
	assert_equal "$(sql "SELECT end_reason, term_signal FROM lr_grants")" "$(printf 'signaled\t15')"
}

# --- the Kubernetes example ---------------------------------------------------

# example_facts: reads contrib/kubernetes/cronjob.yaml (python3-yaml) into
# $BATS_TEST_TMPDIR/k8s/: facts (one "KEY VALUE" a line), argv (the
# container's command, one argument a line) and lockrun.conf (the
# ConfigMap's).
example_facts() {
	local dir=$BATS_TEST_TMPDIR/k8s
	mkdir -p "$dir"
	python3 - "$LR_SRC/contrib/kubernetes/cronjob.yaml" "$dir" <<-'EOF'
		import configparser, os, sys, yaml
		path, out = sys.argv[1], sys.argv[2]
		docs = [d for d in yaml.safe_load_all(open(path)) if d]
		cm = next(d for d in docs if d["kind"] == "ConfigMap")
		cj = next(d for d in docs if d["kind"] == "CronJob")
		job = cj["spec"]["jobTemplate"]["spec"]
		pod = job["template"]["spec"]
		(c,) = pod["containers"]
		argv = c["command"] + c.get("args", [])
		opts = {}
		i = 0
		while argv[i] != "--":
		    a = argv[i]
		    if "=" in a and a.startswith("--"):
		        k, v = a.split("=", 1)
		        opts[k] = v
		    elif a in ("--ttl", "--kill-after", "--wait", "-w"):
		        opts[a], i = argv[i + 1], i + 1
		    i += 1
		conf_text = cm["data"]["lockrun.conf"]
		conf = configparser.ConfigParser(inline_comment_prefixes=(" ;",))
		conf.read_string(conf_text)
		db = conf["database"]
		env = {e["name"]: e.get("value") for e in c.get("env", [])}
		mounts = {m["name"]: m["mountPath"] for m in c.get("volumeMounts", [])}
		vols = {v["name"]: v for v in pod.get("volumes", [])}
		def mount_of(kind):
		    """Where the container mounts the volume of that kind, and its source."""
		    for v, spec in vols.items():
		        if kind in spec:
		            return mounts.get(v), spec[kind]
		    return None, None
		cm_dir, cm_src = mount_of("configMap")
		pw_dir, secret = mount_of("secret")
		facts = {
		    "policy": cj["spec"].get("concurrencyPolicy", "Allow"),
		    "grace": pod.get("terminationGracePeriodSeconds", 30),
		    "deadline": job.get("activeDeadlineSeconds", "none"),
		    "ttl": opts.get("--ttl", "none"),
		    "kill_after": opts.get("--kill-after", "none"),
		    "wait": opts.get("--wait", opts.get("-w", "none")),
		    "connect_timeout": db.get("connect_timeout", "5"),
		    "read_timeout": db.get("read_timeout", "10"),
		    "argv0": os.path.basename(argv[0]),
		    "shared_pid_ns": pod.get("shareProcessNamespace", False),
		    "own_hostname": "hostname" in pod or pod.get("hostNetwork", False),
		    "config_in_configmap": cm_src is not None
		        and cm_src["name"] == cm["metadata"]["name"]
		        and env.get("LOCKRUN_CONFIG") == f"{cm_dir}/lockrun.conf",
		    "password_in_secret": secret is not None
		        and os.path.dirname(db.get("password_file", "")) == pw_dir,
		    "secret_mode": oct(secret.get("defaultMode", 0o644)) if secret else "none",
		}
		with open(f"{out}/facts", "w") as f:
		    for k, v in facts.items():
		        print(k, v, file=f)
		with open(f"{out}/argv", "w") as f:
		    for a in argv:
		        print(a, file=f)
		with open(f"{out}/lockrun.conf", "w") as f:
		    f.write(conf_text)
	EOF
}

# fact KEY: a value example_facts found.
fact() {
	awk -v k="$1" '$1 == k { print $2 }' "$BATS_TEST_TMPDIR/k8s/facts"
}

# at_least A B WHAT: fail unless A >= B (decimals allowed), naming WHAT.
at_least() {
	awk -v a="$1" -v b="$2" 'BEGIN { exit !(a + 0 >= b + 0) }' ||
		fail "$3: $1 is below $2"
}

@test "the Kubernetes example: its numbers obey the rules of its README" {
	example_facts
	local ttl kill_after wait grace release sweep
	ttl=$(fact ttl) kill_after=$(fact kill_after) wait=$(fact wait) grace=$(fact grace)
	[[ $ttl != none && $kill_after != none && $wait != none ]] ||
		fail "--ttl, --kill-after and --wait must be on the command line: $(cat "$BATS_TEST_TMPDIR/k8s/facts")"
	# The sweep grace after a lease runs out, as lockrun has it.
	sweep=$(awk '$2 == "LR_SWEEP_GRACE_MS" { print $3 / 1000 }' "$LR_SRC/src/lease.h")
	[[ -n $sweep ]] || fail "no LR_SWEEP_GRACE_MS in src/lease.h"
	# lockrun's own check: the lease outlasts two renewals and the kill.
	at_least "$ttl" "$(awk -v k="$kill_after" 'BEGIN { print (k + 0.25) / (1 / 3 - 0.01) }')" \
		"--ttl against (--kill-after + 0.25 s) / (1/3 - 0.01)"
	# The grace period: the command's stop, then a release on a new
	# connection.
	release=$(($(fact connect_timeout) + $(fact read_timeout)))
	at_least "$grace" "$(awk -v k="$kill_after" -v r="$release" 'BEGIN { print k + r }')" \
		"terminationGracePeriodSeconds against --kill-after + connect_timeout + read_timeout"
	# A run after a killed pod waits out the lease that pod left.
	at_least "$wait" "$(awk -v t="$ttl" -v s="$sweep" 'BEGIN { print t + s }')" \
		"--wait against --ttl + the sweep grace"
	[[ $(fact deadline) != none ]] || fail "no activeDeadlineSeconds"
	at_least "$(fact deadline)" "$(awk -v w="$wait" 'BEGIN { print w + 1 }')" \
		"activeDeadlineSeconds against --wait"
	assert_equal "$(fact policy)" Forbid
	# lockrun is PID 1 of the container, and its host name the pod's.
	assert_equal "$(fact argv0)" lockrun
	assert_equal "$(fact shared_pid_ns)" False
	assert_equal "$(fact own_hostname)" False
	# The config from the ConfigMap, the password from the Secret's file,
	# readable by its owner only.
	assert_equal "$(fact config_in_configmap)" True
	assert_equal "$(fact password_in_secret)" True
	assert_equal "$(fact secret_mode)" 0o400
}

@test "the Kubernetes example: lockrun takes its command line and config, as PID 1 named like a pod" {
	example_facts
	local dir=$BATS_TEST_TMPDIR/k8s argv=() pod=hourly-report-29411537-x7k2q rc=0
	mapfile -t argv <"$dir/argv"
	# The example's config, pointed at the suite's server and files.
	sed -i -e "s|^host = .*|host = 127.0.0.1|" -e "s|^port = .*|port = $LR_PORT|" \
		-e "s|^password_file = .*|password_file = $LR_DB/lockrun.pw|" \
		-e "s|^ssl_ca = .*|ssl_ca = $LR_TLS/ca.pem|" "$dir/lockrun.conf"
	chmod 600 "$dir/lockrun.conf"
	# Its lockrun, with a command that records its parent instead of the
	# report.
	argv[0]=$LOCKRUN
	local i
	for i in "${!argv[@]}"; do [[ ${argv[i]} == -- ]] && break; done
	# shellcheck disable=SC2016
	argv=("${argv[@]:0:i+1}" sh -c 'echo "parent $PPID fence $LOCKRUN_FENCE" >"$1"' sh "$rec")
	# shellcheck disable=SC2016
	unshare -u -p -f --mount-proc sh -c 'echo "$1" >/proc/sys/kernel/hostname; shift; exec "$@"' \
		sh "$pod" env LOCKRUN_CONFIG="$dir/lockrun.conf" "${argv[@]}" 2>"$dir/err" || rc=$?
	assert_equal "$rc" 0
	assert_equal "$(cat "$dir/err")" ""
	assert_equal "$(cat "$rec")" "parent 1 fence 1"
	assert_equal "$(sql "SELECT host, end_reason, exit_status FROM lr_grants")" \
		"$(printf '%s\texited\t0' "$pod")"
}
