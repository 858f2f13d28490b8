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
# lockrun pid, enter, leave or None, op status, quiet)], "faults": [...],
# "store": [(resource, token, grant, high, accepted, at)], "grants":
# [(id, end, reason, status)], "items": [(grant, resource, fence)]}.
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
		                "host": "h", "lockrun": lr, "pid": 1000 + i, "window": spec.get("window")}
		        r.write(json.dumps(dict(base, ev="enter", mono=a, wall=a)) + "\n")
		        if b is not None:
		            r.write(json.dumps(dict(base, ev="leave", mono=b, wall=b)) + "\n")
		        o.write(json.dumps({"client": i, "host": "h", "kind": kind, "resource": res,
		                            "permits": n, "pid": lr, "start": a - 0.1,
		                            "end": (b if b is not None else a) + 0.1,
		                            "status": st, "quiet": q}) + "\n")
		with open(f"{d}/faults.jsonl", "w") as f:
		    for kind, target, a, b in spec.get("faults", []):
		        f.write(json.dumps({"kind": kind, "target": target, "start": a, "end": b,
		                            "status": 0}) + "\n")
		with open(f"{d}/store.jsonl", "w") as f:
		    for res, tok, g, high, ok, at in spec.get("store", []):
		        f.write(json.dumps({"resource": res, "token": tok, "grant": g, "high": high,
		                            "accepted": ok, "mono": at, "wall": at}) + "\n")
		with open(f"{d}/grants.tsv", "w") as f:
		    for g, end, why, st in spec.get("grants", []):
		        f.write(f"{g}\t2026-01-01 00:00:00\t{end}\t{why}\t{st}\tNULL\n")
		with open(f"{d}/items.tsv", "w") as f:
		    for g, res, fence in spec.get("items", []):
		        f.write(f"{g}\t{res}\t{fence}\n")
	EOF
}

check() {
	run python3 "$LR_SRC/tests/tools/nemesis_check.py" "$h"
}

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
	history "{$clean, \"grants\": [(1, \"x\", \"expired\", \"NULL\"), (2, \"x\", \"exited\", 0)]}"
	check
	assert_success
}

@test "nemesis_check: a success whose release never reached the server does not close its window" {
	# Run 1 exited 0 but its grant expired (the release was lost): the
	# window stayed open, and run 2 ran in it, as lockrun(1) says.
	history '{"window": "2026-01-01T00:00:00Z",
	          "runs": [("once", "id:nm-once", 1, 1, 1, 501, 1.0, 2.0, 0, False),
	                   ("once", "id:nm-once", 1, 2, 2, 502, 12.0, 13.0, 0, False)],
	          "grants": [(1, "x", "expired", "NULL"), (2, "x", "exited", 0)],
	          "items": [(1, "id:nm-once", 1), (2, "id:nm-once", 2)]}'
	check
	assert_success
	assert_line "  violations: none"
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
