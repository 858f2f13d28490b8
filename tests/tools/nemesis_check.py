#!/usr/bin/env python3
"""The fault campaign's checker: nemesis_check.py DIR

Reads only what the campaign left in DIR: the children's records (enter,
a heartbeat every 0.1 s from each of a command's processes, leave), the
fenced store's answers, each lockrun run's options, exit status and
stderr, the faults, and the lock log dumped after the run (grants.tsv:
id, request time, end, end reason, exit status, released_by, the lease's
end as the server recorded it (its grant, claim or last renewal plus the
ttl) and the grant's time, both in seconds since the epoch; items.tsv:
grant id, resource, fence). Shares no code with lockrun or with the workload.
Prints a summary (operations, faults by kind, violations by kind with
the first example of each, the seed) and exits 1 if anything was
violated.

What it holds the history to:
  promise    no process of a command left a record later than the end of
             its lease as the server recorded it (plus SLACK for the
             time stamps), as lockrun(1) SAFETY promises: the command is
             dead by t0 + 0.99 * ttl - 0.25 s, the lease lasts until
             t0 + ttl at least. Excused: a run that said --on-lost
             ignore, one whose lockrun the nemesis stopped or killed, one
             whose clock ran beyond the 1% margin (its rate logged in
             ops). Not excused: a force release, a sweep, a partition, a
             lost answer, a frozen CLOCK_MONOTONIC. On a primary and its
             replica the lease end of a grant node 2 served is corrected
             for its clock (90 s behind); a run with a fail-over between
             its start and its lease's end is not judged (the grant, or
             its renewals, may be lost with the old primary);
  capacity   never more inside a resource than it allows (a semaphore its
             permits, a mutex or key one, a read-write lock one writer or
             any readers), counting each child from its enter to its
             leave, except from the moment its lockrun was stopped or
             killed, or its grant force-released: lockrun cannot stop a
             command while frozen or dead, and a force release is the
             operator's (the fenced store must catch those);
  tokens     on every kind, as lockrun(1) promises: no two grants of a
             resource share a token ("two holders of the same semaphore
             at the same time have different tokens"), and a grant made
             (the server's time) after every process of another run of
             the resource had left has the greater token ("a later grant
             of the same name always carries a greater token"); on an
             exclusive resource (mutex, key, write side) also a holder
             that entered after another left;
  store      the fenced store (which refuses a lower token, and an equal
             one from another grant: unique on a mutex, a write lock and
             an --id key) never refused the write of a holder that had
             no excuse;
  log        every child's grant is in the lock log with its token (on a
             primary and its replica, unless a failed primary took it), and
             every grant in the log has ended with a reason; a run whose
             lockrun exited 0 after its child ran ended 'exited' with
             status 0, or 'expired' (its release did not reach the server);
  release    a run that exited 0, was neither stopped nor killed, and whose
             grant the log ended 'expired' (its release never reached the
             server) said so on its stderr ("could not release grant", or
             under --on-lost ignore "lock lost", "lock may be lost");
  once       at most one run that succeeded per --once-per window, counted
             from the commands' own records (the command finished its
             work, was not stopped, and lockrun exited 0), except those
             lockrun(1) says leave the window open and that said so on
             their stderr: a release that never reached the server ("could
             not release grant"), a lease lost under --on-lost ignore
             ("lock lost", "lock may be lost"); a fail-over between them
             may lose the record;
  liveness   every run started in the quiet period got its lock (exit 0;
             an --id run may find the key held: 75), and no client hung.
"""

import collections
import json
import os
import sys


def lines(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(ln) for ln in f if ln.strip()]


def tsv(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [ln.rstrip("\n").split("\t") for ln in f if ln.strip()]


# Seconds a record may be later than the lease's end: the time stamps'
# precision (the server's microseconds, the records' clock reads). Not
# --kill-after: the bound lockrun(1) documents already subtracts it.
SLACK = 0.05
# Replication: node 2's server clock is this far behind (its server.env).
REPL_SHIFT = 90.0
# Every process of a command writes a heartbeat every 0.1 s: one killed
# (its leave never written) was gone within this long of its last record.
GONE_AFTER = 0.25
TOPOLOGY = ("failover", "rejoin", "lag", "catch-up", "writable-replica")


class Violations:
    def __init__(self, faults, t0):
        self.by_kind = collections.OrderedDict()
        self.topo = sorted((f["start"] - t0, f) for f in faults if f["kind"] in TOPOLOGY)

    def add(self, kind, example):
        # What the topology went through last before it: where to look.
        at = example.get("at")
        if at is not None and self.topo:
            last = [f for t, f in self.topo if t <= at]
            if last:
                f = last[-1]
                example = dict(example, after=f"{f['kind']} {f['target']} at "
                                           f"{f['start'] - self.topo[0][1]['start'] + self.topo[0][0]:.1f}"
                                           + (" (caught up)" if f.get("caught_up") else
                                              " (lagging)" if f["kind"] == "failover" else ""))
        self.by_kind.setdefault(kind, []).append(example)

    def total(self):
        return sum(len(v) for v in self.by_kind.values())


def main(d):
    meta = json.load(open(os.path.join(d, "meta.json")))
    recs = lines(os.path.join(d, "records.jsonl"))
    store = lines(os.path.join(d, "store.jsonl"))
    ops = lines(os.path.join(d, "ops.jsonl"))
    faults = lines(os.path.join(d, "faults.jsonl"))
    grants = {int(r[0]): r for r in tsv(os.path.join(d, "grants.tsv"))}
    items = collections.defaultdict(dict)
    for r in tsv(os.path.join(d, "items.tsv")):
        items[int(r[0])][r[1]] = int(r[2]) if r[2] not in ("", "NULL") else None
    v = Violations(faults, meta["t0"])
    cap = meta["capacity"]

    # --- runs: each child's enter and leave, matched by its pid ---------
    runs = {}
    # Every record of a run's processes (the command and what it forked),
    # by (grant, lockrun pid): the evidence of when it was still alive.
    alive = collections.defaultdict(list)
    for r in recs:
        alive[(r["grant"], r["lockrun"])].append(r)
        if r.get("role", "main") != "main":
            continue
        key = (r["pid"], r["grant"])
        run = runs.setdefault(key, dict(r, enter=None, leave=None, stopped=None))
        if r["ev"] in ("enter", "leave"):
            run[r["ev"]] = r["mono"]
        if r["ev"] == "leave":
            run["stopped"] = r.get("stopped", False)
    ops_by_pid = collections.defaultdict(list)
    ops_by_run = {}
    for o in ops:
        ops_by_pid[o["pid"]].append(o)
        if o.get("run"):
            ops_by_run[o["run"]] = o

    def op_of(run):
        if run.get("run") in ops_by_run:
            return ops_by_run[run["run"]]
        for o in ops_by_pid.get(run["lockrun"], []):
            if o["start"] <= run["enter"] <= o["end"]:
                return o
        return None

    def said(op, text):
        """Whether the run's lockrun wrote TEXT on its stderr."""
        if not op or not op.get("stderr"):
            return False
        try:
            with open(os.path.join(d, op["stderr"]), errors="replace") as f:
                return text in f.read()
        except OSError:
            return False

    def said_lost(op):
        """--on-lost ignore, and lockrun said the lock was (or may be) lost."""
        return op.get("on_lost") == "ignore" and (said(op, "lock lost") or
                                                  said(op, "lock may be lost"))

    def beyond_margin(op):
        # lockrun(1): 1% for the rate difference between the clocks.
        return bool(op and op.get("rate") and abs(op["rate"] - 1) > 0.01)

    def frozen_or_killed(run, until):
        return any(f["kind"] in ("stop-lockrun", "kill-lockrun") and f["target"] == run["lockrun"]
                   and f["end"] >= run["enter"] and f["start"] <= until for f in faults)

    for run in runs.values():
        run["op"] = op_of(run) if run["enter"] is not None else None
        if run["leave"] is None:
            # Killed (its leave never written): inside until shortly after
            # the last record (enter or heartbeat) of any of its processes,
            # not until its lockrun ended, which may be long after (a
            # lockrun cut off retries its release); capped by that end.
            end = run["op"]["end"] if run["op"] else meta.get("ended", 1e18)
            last = max((x["mono"] for x in alive[(run["grant"], run["lockrun"])]), default=None)
            run["leave"] = end if last is None else min(end, last + GONE_AFTER)
        # Excused from this moment on.
        ex = 1e18
        for f in faults:
            if f["kind"] in ("stop-lockrun", "kill-lockrun") and f["target"] == run["lockrun"] \
                    and f["end"] >= run["enter"] and f["start"] <= run["leave"]:
                ex = min(ex, max(f["start"], run["enter"]))
            if f["kind"] == "force-release" and f["target"] == run["grant"] and f.get("status") == 0:
                ex = min(ex, max(f["start"], run["enter"]))
        # Told to run on without the lock, or its clock beyond the margin:
        # from the start.
        if run["op"] and (run["op"].get("on_lost") == "ignore" or beyond_margin(run["op"])):
            ex = run["enter"]
        run["excused_at"] = ex

    # --- capacity -------------------------------------------------------
    by_res = collections.defaultdict(list)
    for run in runs.values():
        if run["enter"] is None:
            continue
        end = min(run["leave"], run["excused_at"])
        if end > run["enter"]:
            by_res[run["resource"]].append((run["enter"], end, run))
    for res, ivs in by_res.items():
        ev = []
        for a, b, run in ivs:
            ev.append((a, 1, run))
            ev.append((b, -1, run))
        # Leaves before enters at the same instant.
        ev.sort(key=lambda e: (e[0], e[1]))
        inside = {}
        for t, d_, run in ev:
            k = (run["pid"], run["grant"])
            if d_ < 0:
                inside.pop(k, None)
                continue
            inside[k] = run
            kinds = [x["kind"] for x in inside.values()]
            if res == "nm-rw":
                writers = kinds.count("write")
                bad = writers > 1 or (writers and len(kinds) > writers)
            else:
                bad = sum(x["permits"] for x in inside.values()) > cap.get(res, 1)
            if bad:
                v.add("capacity", {"resource": res, "at": round(t - meta["t0"], 3),
                                   "inside": sorted((x["kind"], x["grant"], x["token"], x["host"])
                                                    for x in inside.values())})

    # --- tokens ---------------------------------------------------------
    for res, ivs in by_res.items():
        excl = [(a, b, r) for a, b, r in ivs if r["kind"] in ("mutex", "key", "once", "write")]
        alls = sorted(ivs, key=lambda x: x[0])
        for a, b, r in excl:
            for a2, b2, r2 in alls:
                if r2 is r:
                    continue
                # r2 left (its counted part) before r entered.
                if b2 <= a and r2["token"] >= r["token"]:
                    v.add("tokens", {"resource": res, "earlier": (r2["grant"], r2["token"]),
                                     "later": (r["grant"], r["token"]),
                                     "at": round(a - meta["t0"], 3)})
                    break
    # Unique per resource, on every kind: from the children's records (a
    # grant lost with a failed primary included) and from the log.
    holders = collections.defaultdict(set)
    for run in runs.values():
        if run["enter"] is not None and run["grant"]:
            holders[(run["resource"], run["token"])].add(run["grant"])
    for gid, its in items.items():
        for res, fence in its.items():
            if fence is not None:
                holders[(res, fence)].add(gid)
    for (res, tok), gids in sorted(holders.items(), key=str):
        if len(gids) > 1:
            v.add("tokens", {"resource": res, "token": tok, "grants": sorted(gids),
                             "why": "one token, several grants"})
    # A grant made after every process of another run of the resource
    # had left has the greater token, on every kind (server time against
    # this machine's: the grant's acquired_at, the records' wall time).
    last_wall = {k: max(x["wall"] for x in rs) for k, rs in alive.items()}
    per_res = collections.defaultdict(list)
    for run in runs.values():
        g = grants.get(run["grant"])
        if run["enter"] is None or g is None or len(g) < 8 or g[7] in ("", "NULL"):
            continue
        if items.get(run["grant"], {}).get(run["resource"]) != run["token"]:
            continue  # not this grant's (an id given again after a fail-over)
        per_res[run["resource"]].append(
            (float(g[7]), last_wall[(run["grant"], run["lockrun"])], run))
    for res, rs in per_res.items():
        gone = sorted(rs, key=lambda x: x[1])
        top, k = None, 0
        for acq, _, r in sorted(rs, key=lambda x: x[0]):
            while k < len(gone) and gone[k][1] < acq - SLACK:
                if top is None or gone[k][2]["token"] > top["token"]:
                    top = gone[k][2]
                k += 1
            if top is not None and top is not r and top["token"] >= r["token"]:
                v.add("tokens", {"resource": res, "earlier": (top["grant"], top["token"]),
                                 "later": (r["grant"], r["token"]),
                                 "why": "granted after the other had left, not a greater token"})

    # --- the fenced store -----------------------------------------------
    refused = 0
    for s in store:
        if s["accepted"]:
            continue
        refused += 1
        run = next((r for r in runs.values() if r["grant"] == s["grant"]
                    and r["resource"] == s["resource"]), None)
        if run is None or s["mono"] < run["excused_at"]:
            v.add("store", {"resource": s["resource"], "grant": s["grant"], "token": s["token"],
                            "high": s["high"], "high_grant": s.get("high_grant"),
                            "at": round(s["mono"] - meta["t0"], 3)})

    # --- the lock log ---------------------------------------------------
    repl = meta.get("topology") == "replication"
    failovers = sorted(f["start"] for f in faults if f["kind"] == "failover")
    lagging_failovers = [f["start"] for f in faults
                         if f["kind"] == "failover" and not f.get("caught_up")]
    lost = 0
    for run in runs.values():
        g = grants.get(run["grant"])
        if g is None and repl:
            # Granted by a primary that failed before its replica had it:
            # gone from the log with it (the token order above still
            # holds it to account).
            lost += 1
            run["lost"] = True
            continue
        if g is None:
            v.add("log", {"grant": run["grant"], "why": "a child ran under it; the log lacks it"})
            continue
        fence = items.get(run["grant"], {}).get(run["resource"])
        if fence != run["token"] and repl:
            # Its grant id was lost with a failed primary and given again
            # by the new one (AUTO_INCREMENT): another grant's.
            lost += 1
            run["lost"] = True
            continue
        if fence != run["token"]:
            v.add("log", {"grant": run["grant"], "why": f"token {run['token']}, log says {fence}"})
        op = run["op"]
        # Exited 0: released as 'exited' with status 0, or, when the
        # release could not reach the server, left to expire.
        if op and op["status"] == 0 and run["excused_at"] > 1e17 and not (
                (g[3] == "exited" and g[4] == "0") or g[3] == "expired"):
            v.add("log", {"grant": run["grant"], "why": f"lockrun exited 0, log says {g[3]} {g[4]}"})
        # Expired, yet lockrun exited 0 as if released: it must have said
        # that it could not release (or, under --on-lost ignore, that it
        # lost the lock). Not after a fail-over to a replica that lagged:
        # it lost what the old primary committed since it stopped
        # applying, a release that lockrun had the answer to included.
        if op and op["status"] == 0 and g[3] == "expired" and not frozen_or_killed(
                run, op["end"]) and not any(run["enter"] <= t <= op["end"] for t in failovers) \
                and not any(t >= run["enter"] for t in lagging_failovers) \
                and not said(op, "could not release grant") and not said_lost(op):
            v.add("release", {"grant": run["grant"], "run": run.get("run"),
                              "why": "expired, lockrun exited 0 without warning"})
    for gid, g in grants.items():
        if g[2] in ("", "NULL") or g[3] in ("", "NULL"):
            v.add("log", {"grant": gid, "why": "still live (or ended without a reason) after the quiet period"})

    # --- the promise ----------------------------------------------------
    # Which node was the primary when (replication: node 2's clock is 90
    # s behind, and so are the times it recorded).
    primary_at = []  # (mono, node) from then on
    for f in sorted((f for f in faults if f["kind"] == "failover"), key=lambda f: f["start"]):
        primary_at.append((f["start"], None))  # unsure during a fail-over
        primary_at.append((f["end"], int(f["target"].split()[-1])))

    def primary(t):
        node = 1
        for at, n in primary_at:
            if at <= t:
                node = n
        return node

    judged = 0
    for run in runs.values():
        g = grants.get(run["grant"])
        if run["enter"] is None or run.get("lost") or g is None or len(g) < 7 \
                or g[6] in ("", "NULL"):
            continue
        lease_end = float(g[6])
        evidence = alive[(run["grant"], run["lockrun"])]
        kills = [f["start"] for f in faults if f["kind"] == "kill-child"
                 and f["target"] == run["lockrun"]]
        # What it forked notices its parent killed (kill-child) within a
        # heartbeat: not lockrun's to stop.
        evidence = [x for x in evidence if x.get("role", "main") == "main"
                    or not any(x["mono"] >= k for k in kills)]
        last = max(evidence, key=lambda x: x["wall"])
        if repl:
            # A fail-over from before its grant to after its lease could
            # end: not judged.
            if any(run["enter"] - 10 <= t <= last["mono"] + 10 for t, _ in primary_at):
                continue
            node = primary(run["enter"])
            if node is None:
                continue
            if node == 2:
                lease_end += REPL_SHIFT
        judged += 1
        if last["wall"] <= lease_end + SLACK:
            continue
        op = run["op"]
        if op and op.get("on_lost") == "ignore":
            continue
        if beyond_margin(op) or frozen_or_killed(run, last["mono"]):
            continue
        v.add("promise", {"grant": run["grant"], "run": run.get("run"), "pid": last["pid"],
                          "late": round(last["wall"] - lease_end, 3),
                          "at": round(last["mono"] - meta["t0"], 3)})

    # --- once -----------------------------------------------------------
    wins = collections.defaultdict(list)
    for run in runs.values():
        op = run["op"]
        # The command's own word: it finished its work (its leave, not
        # stopped), and lockrun exited 0.
        done = run["stopped"] is False and op and op["status"] == 0
        if run["kind"] != "once" or not done:
            continue
        # lockrun(1): these leave the window open, and lockrun says so.
        if said(op, "could not release grant") or said_lost(op):
            continue
        wins[run["window"]].append(run["enter"])
    for w, ts in wins.items():
        # A fail-over in between may have lost the first run's record, and
        # the new primary's clock names windows its own way.
        if len(ts) > 1 and not any(min(ts) <= f <= max(ts) for f in failovers):
            v.add("once", {"window": w, "runs": len(ts)})

    # --- liveness -------------------------------------------------------
    for o in ops:
        if not o["quiet"]:
            continue
        okay = o["status"] == 0 or (o["kind"] == "key" and o["status"] == 75)
        if not okay:
            v.add("liveness", {"client": o["client"], "kind": o["kind"], "status": o["status"],
                               "took": round(o["end"] - o["start"], 2)})
    if meta.get("stuck_clients"):
        v.add("liveness", {"why": f"{meta['stuck_clients']} clients still waiting at the end"})

    # --- summary --------------------------------------------------------
    status = collections.Counter(o["status"] for o in ops)
    fk = collections.Counter(f["kind"] for f in faults if f["kind"] != "healed")
    print(f"nemesis: {meta.get('topology', 'single')}, seed {meta['seed']}, "
          f"{meta['duration']:.0f} s of faults, "
          f"{meta['clients']} clients on {meta['hosts']} hosts"
          f"{'' if meta.get('uts') else ' (one host name: no UTS namespaces)'}")
    print(f"  runs: {len(ops)} (exit status: "
          + ", ".join(f"{k}: {n}" for k, n in sorted(status.items())) + ")")
    print(f"  commands run: {sum(1 for r in runs.values() if r['enter'] is not None)}"
          f"{f' ({lost} of their grants lost with a failed primary)' if lost else ''}; "
          f"fenced writes: {len(store)}, {refused} refused; leases judged: {judged}")
    print("  faults: " + (", ".join(f"{k} {n}" for k, n in sorted(fk.items())) or "none"))
    traps = [f for f in faults if "fired" in f]
    if traps:
        print(f"  lost answers and held renewals that fired: "
              f"{sum(1 for f in traps if f['fired'] > 0)} of {len(traps)}")
    if not v.total():
        print("  violations: none")
        return 0
    print(f"  violations: {v.total()}")
    for kind, ex in v.by_kind.items():
        print(f"    {kind}: {len(ex)}; first: {json.dumps(ex[0], default=str)}")
    print(f"  replay: tests/run-nemesis --topology {meta.get('topology', 'single')} "
          f"--seed {meta['seed']} --duration {meta['duration']:.0f}")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
