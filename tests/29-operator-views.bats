#!/usr/bin/env bats
#
# What an operator reads agrees with what the locks do: status, list and
# history count a hold past its lease (by more than the sweep grace) as
# over, before any sweep, as every acquirer does; and the output format
# options mean the same for every command. Judged from what lockrunctl
# prints and its exit status. Resource names start with ov-.

load helpers/common

bats_require_minimum_version 1.5.0

setup() {
	pids=()
}

teardown() {
	kill_pids
}

c() {
	"$LOCKRUNCTL" -c "$LR_ADMIN_CONFIG" "$@"
}

@test "after a kill -9 of lockrun: status, list and history all say the lease is over, then the sweep records it" {
	"$LOCKRUN" --ttl 2 --kill-after 0.2 -x ov-kill -- sleep 60 3>&- &
	local pid=$!
	pids+=("$pid")
	lr_wait_eq 1 holds ov-kill
	local g
	g=$(sql "SELECT MAX(g.id) FROM lr_grants g JOIN lr_holds h ON h.grant_id = g.id WHERE h.resource = 'ov-kill'")
	kill -KILL "$pid"
	# Running while the lease (2 s) and the grace (5 s) last.
	run c history ov-kill --limit 1
	assert_line --index 0 --regexp "^grant $g .* running$"
	lapsed() { [[ $(sql "SELECT COUNT(*) FROM lr_holds WHERE resource = 'ov-kill'
		AND expires_at <= UTC_TIMESTAMP(6) - INTERVAL 5 SECOND") == 1 ]]; }
	lr_wait_for -t 15 lapsed
	run c status ov-kill
	assert_output --partial "EXPIRED"
	run c list
	assert_line --regexp '^ov-kill +mutex +1 +0 +[0-9]+  \(1 expired, not swept yet\)$'
	run c list --json
	assert_output --regexp '"name":"ov-kill","kind":"mutex","capacity":1,"used":0,.*"expired_holds":1'
	run c history ov-kill --limit 1
	assert_line --index 0 --regexp "^grant $g .* held [0-9.]+s  expired, not swept yet$"
	run c history ov-kill --limit 1 --json
	assert_output --regexp '"end_reason":"expired".*"not_swept":true'
	# The end shown is the lease's end, as the sweep will record it.
	local shown
	shown=$(c history ov-kill --limit 1 --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["runs"][0]["ended"])')
	c -q sweep
	assert_equal "$(sql "SELECT CONCAT(end_reason, ' ', DATE_FORMAT(ended_at, '%Y-%m-%dT%H:%i:%S.%fZ'))
		FROM lr_grants WHERE id = $g")" "expired $shown"
	run c history ov-kill --limit 1 --json
	assert_output --regexp '"end_reason":"expired".*"not_swept":false'
	run c list
	assert_line --regexp '^ov-kill +mutex +1 +0 +[0-9]+$'
}

@test "--format=json is --json for list, history and the others; prometheus is for status only; disagreeing options are 64" {
	"$LOCKRUN" -x ov-fmt -- true
	local a b
	a=$(c list --json) b=$(c list --format=json)
	assert_equal "$b" "$a"
	a=$(c history ov-fmt --json) b=$(c history ov-fmt --format=json)
	assert_equal "$b" "$a"
	a=$(c list) b=$(c list --format=text)
	assert_equal "$b" "$a"
	run c list --format=prometheus
	assert_failure 64
	assert_output "lockrunctl: --format=prometheus applies to 'status' only; 'list' prints text or json"
	run c status --json --format=prometheus
	assert_failure 64
	assert_output "lockrunctl: --json and --format=prometheus disagree; give one of them"
	run c history --format=text --json
	assert_failure 64
	assert_output "lockrunctl: --json and --format=text disagree; give one of them"
	run c status --json --format=json
	assert_success
	run c status --format=prometheus
	assert_success
	assert_output --partial "lockrun_"
	# list KIND: one kind only; an unknown kind is 64.
	"$LOCKRUNCTL" -c "$LR_ADMIN_CONFIG" -q set ov-sem 2
	run c list semaphore --names
	assert_line ov-sem
	refute_line ov-fmt
	run c list mutex --names
	assert_line ov-fmt
	refute_line ov-sem
	run -64 c list bogus
	assert_output "lockrunctl: list: unknown kind 'bogus': use semaphore, mutex, rwlock or key"
}

@test "lockrun's own account: status, list, history and check show holder, waiter, token and lease left through its procedures, never the command nor a secret; set still needs the operator" {
	"$LOCKRUN" -x ov-rt -- sh -c 'sleep 30 # ov-marker-hold' 3>&- &
	local hpid=$!
	pids+=("$hpid")
	lr_wait_eq 1 holds ov-rt
	"$LOCKRUN" -w 30 -x ov-rt -- sh -c 'true # ov-marker-wait' 3>&- &
	local wpid=$!
	pids+=("$wpid")
	lr_wait_eq 1 waiters ov-rt
	local g tok secrets s
	g=$(sql "SELECT grant_id FROM lr_holds WHERE resource = 'ov-rt'")
	tok=$(sql "SELECT fence FROM lr_holds WHERE resource = 'ov-rt'")
	secrets=$(sql "SELECT request_id FROM lr_grants WHERE id = $g
		UNION ALL SELECT request_id FROM lr_waiters WHERE resource = 'ov-rt'")
	# The operator sees the commands; lockrun's own account ($LOCKRUNCTL
	# without -c: the suite's runtime configuration) does not.
	run c status ov-rt
	assert_output --partial ov-marker-hold
	nothing_secret() {
		refute_output --partial ov-marker
		for s in $secrets; do refute_output --partial "$s"; done
	}
	run "$LOCKRUNCTL" status ov-rt
	assert_success
	assert_line --regexp "^ov-rt +mutex +held$"
	assert_line --regexp "^  holder .*:$hpid .*, held [0-9.]+[a-z]+, token $tok, lease [0-9.]+[a-z]+ left$"
	assert_line --regexp "^  waiter 1: .*:$wpid .*, waiting [0-9.]+[a-z]+, 1 permit$"
	assert_line --regexp '^    since .*  \(command hidden: operator account only\)$'
	nothing_secret
	run "$LOCKRUNCTL" status --json ov-rt
	assert_success
	assert_output --regexp '^\{"hidden":\["command","request"\],"resources":\[\{"name":"ov-rt"'
	assert_output --regexp "\"holders\":\[\{\"grant\":$g,\"permits\":1,\"token\":$tok,\"host\":.*\"pid\":$hpid,.*\"remaining_s\":[0-9.]+"
	assert_output --regexp "\"waiters\":\[\{\"position\":1,.*\"pid\":$wpid,"
	refute_output --partial '"command":'
	nothing_secret
	run "$LOCKRUNCTL" status --format prometheus ov-rt
	assert_success
	assert_line 'lockrun_resource_holders{resource="ov-rt",kind="mutex"} 1'
	assert_line 'lockrun_resource_waiters{resource="ov-rt",kind="mutex"} 1'
	run "$LOCKRUNCTL" list mutex
	assert_success
	assert_line --regexp "^ov-rt +mutex +1 +1 +$tok$"
	run "$LOCKRUNCTL" history ov-rt --limit 1
	assert_success
	assert_line --index 0 --regexp "^grant $g .* running$"
	assert_line --index 1 --regexp ":$hpid  \(command hidden: operator account only\)$"
	assert_line --index 2 --regexp "ov-rt.*$tok"
	nothing_secret
	run "$LOCKRUNCTL" history ov-rt --limit 1 --json --since 1h
	assert_success
	assert_output --regexp "^\{\"hidden\":\[\"command\"\],\"runs\":\[\{\"grant\":$g,"
	refute_output --partial '"command":'
	nothing_secret
	run "$LOCKRUNCTL" check "$g" "ov-rt=$tok"
	assert_success
	run "$LOCKRUNCTL" check "$g" "ov-rt=$((tok + 1))"
	assert_equal "$status" 1
	# What changes things says in one line that it needs the operator.
	run "$LOCKRUNCTL" set ov-rt2 2
	assert_equal "$status" 69
	assert_output --partial "'set' needs the operator account"
}

@test "lockrun's own account before the init that brings its procedures: status says in one line that an administrator runs init, or to use the operator account" {
	sql "UPDATE lr_routines SET digest = REPEAT('0', 64); DROP PROCEDURE lockrun_status"
	run -69 "$LOCKRUNCTL" status
	assert_equal "${#lines[@]}" 1
	# (The server says 1370, not 1305, to an account that may not see it.)
	assert_output --regexp '\((1305|1370)\); '
	assert_output --partial "; user 'lockrun' of $LOCKRUN_CONFIG reads through procedures that 'lockrunctl init' of this version installs and grants to the role lockrun_api: an administrator runs it; or use the operator account (/etc/lockrun/operator.conf)"
	ctl init
	run "$LOCKRUNCTL" status
	assert_success
}
