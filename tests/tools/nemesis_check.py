#!/usr/bin/env python3
"""The fault campaign's checker: nemesis_check.py DIR

Reads only what the campaign left in DIR: the children's records, the
fenced store's answers, each lockrun run's exit status, the faults, and
the lock log dumped after the run (grants.tsv: id, request time, end,
end reason, exit status, released_by; items.tsv: grant id, resource,
fence). Shares no code with lockrun or with the workload. Prints a
summary (operations, faults by kind, violations by kind with the first
example of each, the seed) and exits 1 if anything was violated.

What it holds the history to:
  capacity   never more inside a resource than it allows (a semaphore its
             permits, a mutex or key one, a read-write lock one writer or
             any readers), counting each child from its enter to its
             leave, except from the moment its lockrun was stopped or
             killed, or its grant force-released: lockrun cannot stop a
             command while frozen or dead, and a force release is the
             operator's (the fenced store must catch those);
  tokens     on an exclusive resource (mutex, key, write side), a holder
             that entered after another left has the higher token;
  store      the fenced store never refused the write of a holder that had
             no excuse (a refusal means a higher token was accepted while
             it held the lock alone);
  log        every child's grant is in the lock log with its token (on a
             primary and its replica, unless a failed primary took it), and
             every grant in the log has ended with a reason; a run whose
             lockrun exited 0 after its child ran ended 'exited' with
             status 0, or 'expired' (its release did not reach the server);
  once       at most one run that succeeded per --once-per window, among
             the runs whose success the lock log recorded (ended 'exited'
             with status 0): one whose release never reached the server
             does not close its window, as lockrun(1) says and warns
             (unless a fail-over came between them: it may lose the
             record);
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
    for r in recs:
        key = (r["pid"], r["grant"])
        run = runs.setdefault(key, dict(r, enter=None, leave=None))
        run[r["ev"]] = r["mono"]
    ops_by_pid = collections.defaultdict(list)
    for o in ops:
        ops_by_pid[o["pid"]].append(o)

    def op_of(run):
        for o in ops_by_pid.get(run["lockrun"], []):
            if o["start"] <= run["enter"] <= o["end"]:
                return o
        return None

    for run in runs.values():
        run["op"] = op_of(run) if run["enter"] is not None else None
        if run["leave"] is None:
            # Killed (its leave never written): inside until its lockrun
            # ended, or, if that is unknown, to the end of the history.
            run["leave"] = run["op"]["end"] if run["op"] else meta.get("ended", 1e18)
        # Excused from this moment on.
        ex = 1e18
        for f in faults:
            if f["kind"] in ("stop-lockrun", "kill-lockrun") and f["target"] == run["lockrun"] \
                    and f["end"] >= run["enter"] and f["start"] <= run["leave"]:
                ex = min(ex, max(f["start"], run["enter"]))
            if f["kind"] == "force-release" and f["target"] == run["grant"] and f.get("status") == 0:
                ex = min(ex, max(f["start"], run["enter"]))
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

    # --- tokens on exclusive resources ----------------------------------
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
                            "high": s["high"], "at": round(s["mono"] - meta["t0"], 3)})

    # --- the lock log ---------------------------------------------------
    repl = meta.get("topology") == "replication"
    failovers = sorted(f["start"] for f in faults if f["kind"] == "failover")
    lost = 0
    for run in runs.values():
        g = grants.get(run["grant"])
        if g is None and repl:
            # Granted by a primary that failed before its replica had it:
            # gone from the log with it (the token order above still
            # holds it to account).
            lost += 1
            continue
        if g is None:
            v.add("log", {"grant": run["grant"], "why": "a child ran under it; the log lacks it"})
            continue
        fence = items.get(run["grant"], {}).get(run["resource"])
        if fence != run["token"] and repl:
            # Its grant id was lost with a failed primary and given again
            # by the new one (AUTO_INCREMENT): another grant's.
            lost += 1
            continue
        if fence != run["token"]:
            v.add("log", {"grant": run["grant"], "why": f"token {run['token']}, log says {fence}"})
        op = run["op"]
        # Exited 0: released as 'exited' with status 0, or, when the
        # release could not reach the server, left to expire.
        if op and op["status"] == 0 and run["excused_at"] > 1e17 and not (
                (g[3] == "exited" and g[4] == "0") or g[3] == "expired"):
            v.add("log", {"grant": run["grant"], "why": f"lockrun exited 0, log says {g[3]} {g[4]}"})
    for gid, g in grants.items():
        if g[2] in ("", "NULL") or g[3] in ("", "NULL"):
            v.add("log", {"grant": gid, "why": "still live (or ended without a reason) after the quiet period"})

    # --- once -----------------------------------------------------------
    wins = collections.defaultdict(list)
    for run in runs.values():
        g = grants.get(run["grant"])
        recorded = g is not None and g[3] == "exited" and g[4] == "0"
        if run["kind"] == "once" and run["op"] and run["op"]["status"] == 0 and recorded:
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
          f"fenced writes: {len(store)}, {refused} refused")
    print("  faults: " + (", ".join(f"{k} {n}" for k, n in sorted(fk.items())) or "none"))
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
