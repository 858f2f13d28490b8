#!/usr/bin/env bats
#
# The fault campaign's checker (tests/tools/nemesis_check.py) on histories
# made up here: a clean one passes, and each kind of violation it claims to
# find is found, named, and fails it. (The campaign itself is
# tests/run-nemesis: it needs minutes, not a test.)

load helpers/common

bats_require_minimum_version 1.5.0

setup() {
	h=$BATS_TEST_TMPDIR/h
	mkdir -p "$h"
}

# history SPEC: write a made-up campaign directory to $h from SPEC, a
# Python literal: {"runs": [(kind, resource, permits, token, grant,
# lockrun pid, enter, leave or None, op status, quiet)], "faults": [(kind,
# target, start, end[, {more fields}])],
# "store": [(resource, token, grant, high, accepted, at)], "grants":
# [(id, end, reason, status[, lease end[, granted at]])], "items":
# [(grant, resource, fence)], "beats": [(run index, at[, "fork"])]
# (heartbeats of the run's command, or of a process it forked), "stopped":
# [run index] (its leave says SIGTERM stopped it), "opx": {run index:
# {more of its op's fields}}, "stderr": {run index: what its lockrun
# said}}. Wall and monotonic times are the same here.
history() {
	python3 - "$h" "$1" <<-'EOF'
		import ast, json, os, sys
		d, spec = sys.argv[1], ast.literal_eval(sys.argv[2])
		cap = {"nm-mutex": 1, "nm-sem": 3, "nm-rw": 1, "id:nm-key": 1, "id:nm-once": 1}
		json.dump({"seed": 7, "duration": 60, "clients": 2, "hosts": 1, "t0": 0.0,
		           "quiet_at": 60.0, "capacity": cap, "uts": True, "ended": 100.0,
		           "stuck_clients": spec.get("stuck", 0)}, open(f"{d}/meta.json", "w"))
		with open(f"{d}/records.jsonl", "w") as r, open(f"{d}/ops.jsonl", "w") as o:
		    for i, (kind, res, n, tok, g, lr, a, b, st, q) in enumerate(spec.get("runs", [])):
		        base = {"kind": kind, "resource": res, "permits": n, "token": tok, "grant": g,
		                "host": "h", "lockrun": lr, "pid": 1000 + i, "window": spec.get("window"),
		                "run": f"r{i}"}
		        r.write(json.dumps(dict(base, ev="enter", mono=a, wall=a)) + "\n")
		        for j, at, *role in spec.get("beats", []):
		            if j == i:
		                r.write(json.dumps(dict(base, ev="beat", mono=at, wall=at,
		                                        **({"role": "fork", "pid": 2000 + i} if role
		                                           else {}))) + "\n")
		        if b is not None:
		            r.write(json.dumps(dict(base, ev="leave", mono=b, wall=b,
		                                    stopped=i in spec.get("stopped", []))) + "\n")
		        op = {"client": i, "host": "h", "kind": kind, "resource": res,
		              "permits": n, "pid": lr, "start": a - 0.1,
		              "end": (b if b is not None else a) + 0.1,
		              "status": st, "quiet": q, "run": f"r{i}", "on_lost": "kill", "rate": None}
		        op.update(spec.get("opx", {}).get(i, {}))
		        if i in spec.get("stderr", {}):
		            os.makedirs(f"{d}/err", exist_ok=True)
		            with open(f"{d}/err/r{i}.err", "w") as e:
		                e.write(spec["stderr"][i])
		            op["stderr"] = f"err/r{i}.err"
		        o.write(json.dumps(op) + "\n")
		with open(f"{d}/faults.jsonl", "w") as f:
		    for kind, target, a, b, *more in spec.get("faults", []):
		        f.write(json.dumps(dict(*more, kind=kind, target=target, start=a, end=b,
		                                status=0)) + "\n")
		with open(f"{d}/store.jsonl", "w") as f:
		    for res, tok, g, high, ok, at in spec.get("store", []):
		        f.write(json.dumps({"resource": res, "token": tok, "grant": g, "high": high,
		                            "accepted": ok, "mono": at, "wall": at}) + "\n")
		with open(f"{d}/grants.tsv", "w") as f:
		    for g, end, why, st, *lease in spec.get("grants", []):
		        more = "".join(f"\t{x}" for x in lease)
		        f.write(f"{g}\t2026-01-01 00:00:00\t{end}\t{why}\t{st}\tNULL{more}\n")
		with open(f"{d}/items.tsv", "w") as f:
		    for g, res, fence in spec.get("items", []):
		        f.write(f"{g}\t{res}\t{fence}\n")
	EOF
}

check() {
	run python3 "$LR_SRC/tests/tools/nemesis_check.py" "$h"
}

# lockrun's warning when its release never reached the server (src/main.c).
release_warning="could not release grant 1 (Lost connection to server during query); it is free again within 8 s"

# Two mutex runs one after the other, logged as they should be.
clean='"runs": [("mutex", "nm-mutex", 1, 5, 1, 501, 1.0, 2.0, 0, False),
                 ("mutex", "nm-mutex", 1, 6, 2, 502, 2.5, 3.0, 0, True)],
       "grants": [(1, "x", "exited", 0), (2, "x", "exited", 0)],
       "items": [(1, "nm-mutex", 5), (2, "nm-mutex", 6)]'

@test "nemesis_check: a clean history passes, and says what it saw" {
	history "{$clean}"
	check
	assert_success
	assert_line --partial "seed 7"
	assert_line "  runs: 2 (exit status: 0: 2)"
	assert_line "  violations: none"
}

@test "nemesis_check: two runs inside a mutex at once are a capacity violation; a frozen lockrun's run is excused from its freeze on" {
	local two='"runs": [("mutex", "nm-mutex", 1, 5, 1, 501, 1.0, 3.0, 0, False),
	                    ("mutex", "nm-mutex", 1, 6, 2, 502, 2.0, 2.5, 0, False)],
	           "grants": [(1, "x", "exited", 0), (2, "x", "exited", 0)],
	           "items": [(1, "nm-mutex", 5), (2, "nm-mutex", 6)]'
	history "{$two}"
	check
	assert_failure 1
	assert_line --regexp '^    capacity: 1; first: .*"resource": "nm-mutex"'
	assert_line "  replay: tests/run-nemesis --topology single --seed 7 --duration 60"
	history "{$two, \"faults\": [(\"stop-lockrun\", 501, 1.5, 4.0)]}"
	check
	assert_success
}

@test "nemesis_check: a killed command is inside until its last heartbeat, not until its lockrun exits" {
	# Run 0 was killed (no leave) at about 1.6; its lockrun, cut off,
	# retried its release until 4.0. Run 1 entered at 2.0.
	local two='"runs": [("mutex", "nm-mutex", 1, 5, 1, 501, 1.0, None, 76, False),
	                    ("mutex", "nm-mutex", 1, 6, 2, 502, 2.0, 2.5, 0, False)],
	           "opx": {0: {"end": 4.0}},
	           "grants": [(1, "x", "expired", "NULL"), (2, "x", "exited", 0)],
	           "items": [(1, "nm-mutex", 5), (2, "nm-mutex", 6)]'
	history "{$two, \"beats\": [(0, 1.3), (0, 1.6)]}"
	check
	assert_success
	# A heartbeat after the other's enter: both inside.
	history "{$two, \"beats\": [(0, 1.3), (0, 1.6), (0, 2.1)]}"
	check
	assert_failure 1
	assert_line --regexp '^    capacity: 1; first: .*"resource": "nm-mutex"'
}

@test "nemesis_check: a semaphore over its permits, and a writer beside a reader, are capacity violations" {
	history '{"runs": [("semaphore", "nm-sem", 2, 1, 1, 501, 1.0, 3.0, 0, False),
	                   ("semaphore", "nm-sem", 2, 2, 2, 502, 2.0, 4.0, 0, False)],
	          "grants": [(1, "x", "exited", 0), (2, "x", "exited", 0)],
	          "items": [(1, "nm-sem", 1), (2, "nm-sem", 2)]}'
	check
	assert_failure 1
	assert_line --regexp '^    capacity: 1; first: .*"nm-sem"'
	history '{"runs": [("read", "nm-rw", 1, 1, 1, 501, 1.0, 3.0, 0, False),
	                   ("read", "nm-rw", 1, 2, 2, 502, 1.5, 3.0, 0, False),
	                   ("write", "nm-rw", 1, 3, 3, 503, 2.0, 2.5, 0, False)],
	          "grants": [(1, "x", "exited", 0), (2, "x", "exited", 0), (3, "x", "exited", 0)],
	          "items": [(1, "nm-rw", 1), (2, "nm-rw", 2), (3, "nm-rw", 3)]}'
	check
	assert_failure 1
	assert_line --regexp '^    capacity: 1; first: .*"nm-rw"'
}

@test "nemesis_check: a later holder with a lower token, and a refused write without an excuse, are found" {
	history '{"runs": [("mutex", "nm-mutex", 1, 9, 1, 501, 1.0, 2.0, 0, False),
	                   ("mutex", "nm-mutex", 1, 8, 2, 502, 2.5, 3.0, 0, False)],
	          "store": [("nm-mutex", 9, 1, 0, True, 1.1), ("nm-mutex", 8, 2, 9, False, 2.6)],
	          "grants": [(1, "x", "exited", 0), (2, "x", "exited", 0)],
	          "items": [(1, "nm-mutex", 9), (2, "nm-mutex", 8)]}'
	check
	assert_failure 1
	assert_line --regexp '^    tokens: 1; first: .*"earlier": \[1, 9\], "later": \[2, 8\]'
	assert_line --regexp '^    store: 1; first: .*"grant": 2'
}

@test "nemesis_check: the lock log must have every grant with its token, ended with a true reason" {
	history '{"runs": [("mutex", "nm-mutex", 1, 5, 1, 501, 1.0, 2.0, 0, False),
	                   ("mutex", "nm-mutex", 1, 6, 2, 502, 2.5, 3.0, 0, False),
	                   ("mutex", "nm-mutex", 1, 7, 3, 503, 3.5, 4.0, 0, False)],
	          "grants": [(1, "x", "exited", 0), (2, "x", "lost", 0), (4, "NULL", "NULL", "NULL")],
	          "items": [(1, "nm-mutex", 4), (2, "nm-mutex", 6)]}'
	check
	assert_failure 1
	assert_line --regexp '^    log: 4; first: .*"grant": 1, "why": "token 5, log says 4"'
	history "{$clean, \"grants\": [(1, \"x\", \"expired\", \"NULL\"), (2, \"x\", \"exited\", 0)],
	          \"stderr\": {0: \"lockrun: warning: $release_warning\\n\"}}"
	check
	assert_success
}

@test "nemesis_check: a success whose release never reached the server does not close its window" {
	# Run 1 exited 0 but its grant expired (the release was lost): the
	# window stayed open, and run 2 ran in it, as lockrun(1) says, and
	# as run 1's lockrun said. Without that warning, both count.
	local once='"window": "2026-01-01T00:00:00Z",
	          "runs": [("once", "id:nm-once", 1, 1, 1, 501, 1.0, 2.0, 0, False),
	                   ("once", "id:nm-once", 1, 2, 2, 502, 12.0, 13.0, 0, False)],
	          "grants": [(1, "x", "expired", "NULL"), (2, "x", "exited", 0)],
	          "items": [(1, "id:nm-once", 1), (2, "id:nm-once", 2)]'
	history "{$once, \"stderr\": {0: \"lockrun: warning: $release_warning, and its window stays open: the success was not recorded\\n\"}}"
	check
	assert_success
	assert_line "  violations: none"
	history "{$once}"
	check
	assert_failure 1
	assert_line --regexp '^    once: 1; first: .*"runs": 2'
	assert_line --regexp '^    release: 1; first: .*"grant": 1'
}

@test "nemesis_check: two successful runs in one --once-per window, and a quiet-period run that did not get its lock, are found" {
	history '{"window": "2026-01-01T00:00:00Z",
	          "runs": [("once", "id:nm-once", 1, 1, 1, 501, 1.0, 2.0, 0, False),
	                   ("once", "id:nm-once", 1, 2, 2, 502, 2.5, 3.0, 0, False),
	                   ("mutex", "nm-mutex", 1, 3, 3, 503, 61.0, 62.0, 75, True)],
	          "grants": [(1, "x", "exited", 0), (2, "x", "exited", 0), (3, "x", "exited", 0)],
	          "items": [(1, "id:nm-once", 1), (2, "id:nm-once", 2), (3, "nm-mutex", 3)]}'
	check
	assert_failure 1
	assert_line --regexp '^    once: 1; first: .*"runs": 2'
	assert_line --regexp '^    liveness: 1; first: .*"status": 75'
}

# A mutex run from 1.0 to 2.0 whose lease ended at 3.0 (the server's
# record), beating at 1.5 and at AT.
late() {
	history "{\"runs\": [(\"mutex\", \"nm-mutex\", 1, 5, 1, 501, 1.0, 2.0, 0, False)],
	          \"grants\": [(1, \"x\", \"exited\", 0, 3.0, 0.9)], \"items\": [(1, \"nm-mutex\", 5)],
	          \"beats\": [(0, 1.5), (0, $1${2:+, \"fork\"})]${3:+, $3}}"
}

@test "nemesis_check: promise: a command's process alive after its lease's end as the server recorded it is found, whatever ended the lease" {
	late 2.9
	check
	assert_success
	assert_line --regexp '^  commands run: 1; .*leases judged: 1$'
	# Its command, or a process it forked, after the lease's end.
	late 3.2
	check
	assert_failure 1
	assert_line --regexp '^    promise: 1; first: .*"grant": 1, "run": "r0", "pid": 1000, "late": 0.2'
	late 3.2 fork
	check
	assert_failure 1
	assert_line --regexp '^    promise: 1; first: .*"pid": 2000'
	# A force release, a partition, a frozen CLOCK_MONOTONIC are no excuse.
	late 3.2 "" '"faults": [("force-release", 1, 1.2, 1.3), ("partition-host", "h", 1.1, 9.0),
	                        ("freeze-clock", "lockruns", 1.1, 5.0)]'
	check
	assert_failure 1
	assert_line --regexp '^    promise: 1; '
}

@test "nemesis_check: promise: --on-lost ignore, a lockrun stopped or killed, a clock beyond the 1% margin are excused; one inside it is not" {
	late 3.2 "" '"opx": {0: {"on_lost": "ignore"}}'
	check
	assert_success
	late 3.2 "" '"faults": [("stop-lockrun", 501, 1.6, 2.5)]'
	check
	assert_success
	late 3.2 "" '"faults": [("kill-lockrun", 501, 1.8, 1.8)]'
	check
	assert_success
	late 3.2 "" '"opx": {0: {"rate": 0.9}}'
	check
	assert_success
	late 3.2 "" '"opx": {0: {"rate": 0.992}}'
	check
	assert_failure 1
	assert_line --regexp '^    promise: 1; '
}

@test "nemesis_check: tokens: two grants of a semaphore with one token, and a later grant with a smaller token, are found on every kind" {
	# Two holders of the semaphore at once must have different tokens.
	history '{"runs": [("semaphore", "nm-sem", 1, 4, 1, 501, 1.0, 3.0, 0, False),
	                   ("semaphore", "nm-sem", 1, 4, 2, 502, 2.0, 4.0, 0, False)],
	          "grants": [(1, "x", "exited", 0), (2, "x", "exited", 0)],
	          "items": [(1, "nm-sem", 4), (2, "nm-sem", 4)]}'
	check
	assert_failure 1
	assert_line --regexp '^    tokens: 1; first: .*"token": 4, "grants": \[1, 2\], "why": "one token, several grants"'
	# A reader granted (the server's time) after another reader left has
	# the greater token; one granted while it held may have a smaller one.
	local two='"runs": [("read", "nm-rw", 1, 7, 1, 501, 1.0, 2.0, 0, False),
	                    ("read", "nm-rw", 1, 6, 2, 502, 2.5, 3.0, 0, False)],
	           "items": [(1, "nm-rw", 7), (2, "nm-rw", 6)]'
	history "{$two, \"grants\": [(1, \"x\", \"exited\", 0, 5.0, 0.9), (2, \"x\", \"exited\", 0, 6.0, 2.4)]}"
	check
	assert_failure 1
	assert_line --regexp '^    tokens: 1; first: .*"earlier": \[1, 7\], "later": \[2, 6\], "why": "granted after'
	history "{$two, \"grants\": [(1, \"x\", \"exited\", 0, 5.0, 0.9), (2, \"x\", \"exited\", 0, 6.0, 1.5)]}"
	check
	assert_success
}

@test "nemesis_check: the fenced store refuses an equal token from another grant, and the checker finds the refusal" {
	run python3 - "$h" "$LR_SRC/tests/tools" <<-'EOF'
		import json, os, sys
		sys.path.insert(0, sys.argv[2])
		import nemesis
		os.makedirs(f"{sys.argv[1]}/store", exist_ok=True)
		for tok, g in ((5, 1), (5, 1), (5, 2), (4, 3), (6, 3)):
		    nemesis.store_write(sys.argv[1], "nm-mutex", tok, g)
		print(" ".join(str(json.loads(ln)["accepted"])
		               for ln in open(f"{sys.argv[1]}/store.jsonl")))
	EOF
	assert_success
	assert_output "True True False False True"
	history '{"runs": [("mutex", "nm-mutex", 1, 5, 1, 501, 1.0, 2.0, 0, False),
	                   ("mutex", "nm-mutex", 1, 5, 2, 502, 2.5, 3.0, 0, False)],
	          "store": [("nm-mutex", 5, 1, 0, True, 1.1), ("nm-mutex", 5, 2, 5, False, 2.6)],
	          "grants": [(1, "x", "exited", 0), (2, "x", "exited", 0)],
	          "items": [(1, "nm-mutex", 5), (2, "nm-mutex", 5)]}'
	check
	assert_failure 1
	assert_line --regexp '^    store: 1; first: .*"grant": 2, "token": 5'
}

@test "nemesis_check: once counts the commands' own successes, not the lock log's" {
	# The log says run 1 was stopped ('lost'), but its command finished
	# its work and lockrun exited 0: two successes in the window.
	local once='"window": "2026-01-01T00:00:00Z",
	          "runs": [("once", "id:nm-once", 1, 1, 1, 501, 1.0, 2.0, 0, False),
	                   ("once", "id:nm-once", 1, 2, 2, 502, 12.0, 13.0, 0, False)],
	          "items": [(1, "id:nm-once", 1), (2, "id:nm-once", 2)]'
	history "{$once, \"grants\": [(1, \"x\", \"lost\", \"NULL\"), (2, \"x\", \"exited\", 0)]}"
	check
	assert_failure 1
	assert_line --regexp '^    once: 1; first: .*"runs": 2'
	# A command stopped by SIGTERM did not finish its work.
	history "{$once, \"grants\": [(1, \"x\", \"lost\", \"NULL\"), (2, \"x\", \"exited\", 0)],
	          \"stopped\": [0]}"
	check
	refute_line --regexp '^    once: '
}

@test "nemesis_check: release: a run that exited 0 as if released while its grant expired must have said so" {
	local r='"runs": [("mutex", "nm-mutex", 1, 5, 1, 501, 1.0, 2.0, 0, False)],
	         "grants": [(1, "x", "expired", "NULL")], "items": [(1, "nm-mutex", 5)]'
	history "{$r}"
	check
	assert_failure 1
	assert_line --regexp '^    release: 1; first: .*"grant": 1, "run": "r0", "why": "expired, lockrun exited 0 without warning"'
	history "{$r, \"stderr\": {0: \"lockrun: warning: $release_warning\\n\"}}"
	check
	assert_success
	# A lockrun stopped meanwhile is not held to it; one under --on-lost
	# ignore has said that it lost the lock.
	history "{$r, \"faults\": [(\"stop-lockrun\", 501, 1.5, 4.0)]}"
	check
	assert_success
	# A later fail-over to a replica that lagged lost the release with the
	# old primary; one that had caught up lost nothing.
	history "{$r, \"faults\": [(\"failover\", \"node 1 -> node 2\", 9.0, 9.5, {\"caught_up\": False})]}"
	check
	assert_success
	history "{$r, \"faults\": [(\"failover\", \"node 1 -> node 2\", 9.0, 9.5, {\"caught_up\": True})]}"
	check
	assert_failure 1
	assert_line --regexp '^    release: 1; first: .*"grant": 1, "run": "r0"'
	history "{$r, \"opx\": {0: {\"on_lost\": \"ignore\"}},
	          \"stderr\": {0: \"lockrun: lock lost (not renewed); --on-lost=ignore: the command keeps running\\n\"}}"
	check
	assert_success
}
