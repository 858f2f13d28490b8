#!/usr/bin/env python3
"""Hostile SQL clients for tests/24-hostile-sql.bats.

Acts as the EXECUTE-only account `lockrun` (password in $LR_DB/lockrun.pw,
TCP 127.0.0.1:$LR_PORT, database lockrun), the way an application that
tries to cheat would, and judges what happened from the outside: the
error numbers and texts the server answered, and the rows of lockrun's
tables as the admin sees them (root over $LR_SOCKET).

Every subcommand prints one line per case, "ok NAME ..." or
"FAIL NAME: why", and exits 1 if any case failed (2 on a usage or set-up
error), so a bats test shows every failing case by name at once.

  hostile.py surface              internal routines, tables, temporary tables
  hostile.py args                 bad arguments to every public routine
  hostile.py txn                  writers inside an open transaction
  hostile.py ac0 OUT SECS HOLDRES the autocommit=0 session (see cmd_ac0)
  hostile.py session              no temporary tables, user variables ignored
  hostile.py ac0paths             every procedure and path under autocommit=0
                                  ends with no transaction open
  hostile.py sweeprace            a renewal in flight as its hold's grace ends
                                  is not swept after it said renewed
  hostile.py reclaim TAG          idle rows an account made are reclaimed
  hostile.py replay               a lease replayed with other items
  hostile.py checklocks           lockrun_check in an open transaction, at
                                  every isolation level, locks no gap

Needs python3 and pymysql (Debian: python3-pymysql), nothing else.
"""

import json
import os
import re
import secrets
import sys
import threading
import time

import pymysql
import pymysql.cursors

PUBLIC = sorted([
    "lockrun_acquire", "lockrun_settle", "lockrun_poll", "lockrun_sleep",
    "lockrun_dequeue", "lockrun_renew", "lockrun_release", "lockrun_check",
    "lockrun_host_queue", "lockrun_status", "lockrun_list", "lockrun_history",
    "lockrun_grant",
])

failures = 0


def ok(name, detail=""):
    print(f"ok {name}{(' ' + detail) if detail else ''}", flush=True)


def fail(name, why):
    global failures
    failures += 1
    print(f"FAIL {name}: {why}", flush=True)


def newid():
    return secrets.token_hex(16)


def account(autocommit=True):
    with open(os.path.join(os.environ["LR_DB"], "lockrun.pw")) as f:
        pw = f.read().strip()
    return pymysql.connect(host="127.0.0.1", port=int(os.environ["LR_PORT"]),
                           user="lockrun", password=pw, database="lockrun",
                           autocommit=autocommit, connect_timeout=5,
                           cursorclass=pymysql.cursors.DictCursor)


def admin():
    user = os.environ.get("LR_ADMIN_USER") or (
        "root" if os.geteuid() == 0 else os.environ.get("USER", "root"))
    return pymysql.connect(unix_socket=os.environ["LR_SOCKET"], user=user,
                           database="lockrun", autocommit=True,
                           cursorclass=pymysql.cursors.DictCursor)


class Res:
    """What a statement answered: rows of its first result set, or an error."""

    def __init__(self, rows=None, errno=None, msg=None):
        self.rows, self.errno, self.msg = rows, errno, msg

    @property
    def error(self):
        return self.errno is not None

    def __repr__(self):
        if self.error:
            return f"error {self.errno} {self.msg!r}"
        return f"rows {self.rows!r}"

    def first(self, col):
        return self.rows[0][col] if self.rows else None


def in_trx(conn):
    """1 if conn is inside a transaction, from the status flags of the
    server's answer (SERVER_STATUS_IN_TRANS), which MariaDB and MySQL both
    send; MySQL has no @@in_transaction."""
    run(conn, "SELECT 1 AS t")
    return 1 if conn.server_status & 1 else 0


def run(conn, sql, args=None):
    """One statement (a CALL included) with every result set read."""
    cur = conn.cursor()
    try:
        cur.execute(sql, args)
        rows = list(cur.fetchall() or [])
        while cur.nextset():
            pass
        return Res(rows=rows)
    except pymysql.MySQLError as e:
        # Read what is left of a CALL's answer, so the connection goes on.
        try:
            while cur.nextset():
                pass
        except pymysql.MySQLError:
            pass
        return Res(errno=e.args[0], msg=e.args[1] if len(e.args) > 1 else "")
    finally:
        cur.close()


def call(conn, proc, *args):
    marks = ", ".join(["%s"] * len(args))
    return run(conn, f"CALL {proc}({marks})", args)


def must_grant(conn, items, lease, ttl=60000):
    """A set-up acquire that must be granted (else the subcommand stops)."""
    r = call(conn, "lockrun_acquire", items, newid(), lease, ttl, 0, "h", 1, "u", "24-hostile")
    if r.error or r.first("outcome") != "granted":
        raise SystemExit(f"hostile.py: set-up acquire of {items} failed: {r!r}")
    return r


# The admin's view of everything a call could have written: row counts of
# the four tables the brief names, and checksums of the rows' contents, so a
# renewal or a heartbeat that slipped through shows as well.
SNAPSHOT = """
SELECT (SELECT COUNT(*) FROM lr_grants) AS grants,
       (SELECT COUNT(*) FROM lr_holds) AS holds,
       (SELECT COUNT(*) FROM lr_waiters) AS waiters,
       (SELECT COUNT(*) FROM lr_resources) AS resources,
       (SELECT COALESCE(MAX(id), 0) FROM lr_grants) AS max_grant,
       (SELECT COUNT(*) FROM lr_grants WHERE ended_at IS NULL) AS open_grants,
       (SELECT COALESCE(SUM(CRC32(CONCAT_WS('|', resource, grant_id, permits, fence,
                expires_at))), 0) FROM lr_holds) AS holds_sum,
       (SELECT COALESCE(SUM(CRC32(CONCAT_WS('|', resource, ticket, request_id,
                expires_at, wake_conn))), 0) FROM lr_waiters) AS waiters_sum,
       (SELECT COALESCE(SUM(CRC32(CONCAT_WS('|', name, used, fence, ticket))), 0)
          FROM lr_resources) AS resources_sum
"""


def snapshot(adm):
    r = run(adm, SNAPSHOT)
    if r.error:
        raise SystemExit(f"hostile.py: admin snapshot failed: {r}")
    return {k: int(v) for k, v in r.rows[0].items()}


def diff(before, after):
    return ", ".join(f"{k} {before[k]} -> {after[k]}" for k in before if before[k] != after[k])


def lockrun_error(res):
    return res.errno == 1644 and (res.msg or "").startswith("lockrun")


def expect_refused(adm, conn, name, sql, args, check=None, allow=()):
    """The statement must fail with 1644 'lockrun...' (or with one of the
    server's own data errors in allow: 1264 out of range, 1406 too long,
    1366 not in the parameter's character set, for a value that does not
    fit a typed parameter), and change nothing the admin can see.
    check(res) may add a condition on the error (a string saying what is
    wrong, or None)."""
    before = snapshot(adm)
    res = run(conn, sql, args)
    after = snapshot(adm)
    why = []
    if not res.error:
        why.append(f"accepted: {res.rows[:2]!r}")
    elif not (lockrun_error(res) or res.errno in allow):
        want = " or ".join(["1644 'lockrun...'"] + [str(e) for e in allow])
        why.append(f"error {res.errno} {res.msg!r}, want {want}")
    elif check and lockrun_error(res):
        w = check(res)
        if w:
            why.append(w)
    if before != after:
        why.append(f"wrote: {diff(before, after)}")
    if why:
        fail(name, "; ".join(why))
    else:
        ok(name, f"({res.errno} {res.msg[:90]!r})")
    return res


# ------------------------------------------------------------------ surface

def plausible(param):
    """A plausible argument for an internal routine's parameter (as SQL)."""
    t = (param["DATA_TYPE"] or "").lower()
    name = (param["PARAMETER_NAME"] or "").lower()
    if param["PARAMETER_MODE"] in ("OUT", "INOUT"):
        return "@h_" + name
    if t in ("char", "varchar", "text", "longtext", "mediumtext", "tinytext"):
        if "request" in name or "lease" in name or name.endswith("_id"):
            return f"'{newid()}'"
        if "items" in name:
            return "'mutex:h-surface'"
        if "reason" in name:
            return "'exited'"
        if "what" in name:
            return "'request'"
        return "'h-surface'"
    if t in ("datetime", "timestamp", "date"):
        return "'2100-01-01'"
    if t in ("tinyint", "smallint", "mediumint", "int", "bigint", "decimal"):
        return "1"
    return "NULL"


def cmd_surface():
    adm = admin()
    acc = account()
    routines = run(adm, """SELECT ROUTINE_NAME, ROUTINE_TYPE FROM information_schema.ROUTINES
        WHERE ROUTINE_SCHEMA = 'lockrun' AND ROUTINE_NAME LIKE 'lr\\_%' ORDER BY ROUTINE_NAME""").rows
    if not routines:
        fail("surface.internal", "the admin sees no internal lr_ routine at all")
    params = run(adm, """SELECT SPECIFIC_NAME, ORDINAL_POSITION, PARAMETER_MODE, PARAMETER_NAME,
        DATA_TYPE FROM information_schema.PARAMETERS WHERE SPECIFIC_SCHEMA = 'lockrun'
        AND ORDINAL_POSITION > 0 ORDER BY SPECIFIC_NAME, ORDINAL_POSITION""").rows
    for r in routines:
        name, kind = r["ROUTINE_NAME"], r["ROUTINE_TYPE"]
        args = ", ".join(plausible(p) for p in params if p["SPECIFIC_NAME"] == name)
        sql = f"CALL {name}({args})" if kind == "PROCEDURE" else f"SELECT {name}({args})"
        before = snapshot(adm)
        one = account()  # one connection each: no call leaves state to the next
        res = run(one, sql)
        one.close()
        after = snapshot(adm)
        tag = f"internal.{name}"
        if res.errno == 1370:
            if before != after:
                fail(tag, f"1370, yet wrote: {diff(before, after)}")
            else:
                ok(tag, f"({sql[:60]} -> 1370)")
        else:
            fail(tag, f"{sql[:80]} answered {res!r}"[:300]
                 + (f"; wrote: {diff(before, after)}" if before != after else ""))

    tables = [r["TABLE_NAME"] for r in run(adm, """SELECT TABLE_NAME FROM information_schema.TABLES
        WHERE TABLE_SCHEMA = 'lockrun' AND TABLE_TYPE = 'BASE TABLE' ORDER BY 1""").rows]
    for t in tables:
        for verb, sql in (("select", f"SELECT * FROM {t} LIMIT 1"),
                          ("insert", f"INSERT INTO {t} () VALUES ()"),
                          ("update", f"UPDATE {t} SET {first_col(adm, t)} = {first_col(adm, t)}"),
                          ("delete", f"DELETE FROM {t}")):
            res = run(acc, sql)
            if res.errno == 1142:
                ok(f"table.{t}.{verb}")
            else:
                fail(f"table.{t}.{verb}", f"{sql} answered {res!r}"[:300])
    for t in ("lr_resources", "lr_holds", "lr_req", "h_scratch"):
        res = run(acc, f"CREATE TEMPORARY TABLE {t} (name VARCHAR(80) PRIMARY KEY, used BIGINT)")
        if res.errno == 1044:
            ok(f"temporary.{t}")
        else:
            fail(f"temporary.{t}", f"CREATE TEMPORARY TABLE answered {res!r}")
            run(acc, f"DROP TEMPORARY TABLE IF EXISTS {t}")


_cols = {}


def first_col(adm, t):
    if t not in _cols:
        _cols[t] = run(adm, """SELECT COLUMN_NAME FROM information_schema.COLUMNS
            WHERE TABLE_SCHEMA = 'lockrun' AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION LIMIT 1""",
                       (t,)).rows[0]["COLUMN_NAME"]
    return _cols[t]


# ------------------------------------------------------------------ args

ACQ = "CALL lockrun_acquire(%s, %s, %s, %s, %s, %s, %s, %s, %s)"


def cmd_args():
    adm = admin()
    acc = account()
    # Something to renew, release and check (so that a bad call that slips
    # through shows), and a request with places (for poll and dequeue).
    held = newid()
    must_grant(acc, "mutex:h-arg-held", held)
    queued = newid()
    qconn = account()
    r = call(qconn, "lockrun_acquire", "mutex:h-arg-held", queued, newid(), 60000, 1,
             "h", 1, "u", "24-hostile")
    if r.error or r.first("outcome") != "queued":
        raise SystemExit(f"hostile.py: set-up enqueue failed: {r!r}")
    never = newid()  # a request that never queued: sleep returns at once

    def acq(**over):
        a = dict(items="mutex:h-arg-new", request=newid(), lease=newid(), ttl=30000,
                 enqueue=0, host="h", pid=1, os_user="u", command="24-hostile")
        a.update(over)
        return [a[k] for k in ("items", "request", "lease", "ttl", "enqueue", "host", "pid",
                               "os_user", "command")]

    hexid = newid()
    # Bad ids, and the server's data error each may get instead of 1644.
    bad_ids = {
        "null": (None, ()),
        "empty": ("", ()),
        "short": (hexid[:31], ()),
        "long": (hexid + "0", (1406,)),
        "upper": (hexid.upper(), ()),
        "mixed-case": (hexid[:31] + "A", ()),
        "nonhex": ("g" * 32, ()),
        "space": (" " + hexid[:31], ()),
        "inner-space": (hexid[:16] + " " + hexid[17:], ()),
        "newline": (hexid[:31] + "\n", ()),
        "nul": (hexid[:31] + "\0", ()),
        "unicode": ("\u00e9" * 32, (1366,)),
        "sql": ("x'); DELETE FROM lr_holds; -- ", ()),
        "percent": ("%" * 32, ()),
    }
    long_name = "mutex:" + "h" * 3994  # 4000 characters
    # 4001 characters whose first 4000 are a valid request of 60 items (the
    # last name cut short): a silent truncation would lock names the client
    # never asked for.
    names = [f"mutex:h-tr{i:02d}-" + "x" * 52 for i in range(59)]
    prefix = ",".join(names) + ",mutex:h-trlast-"
    trunc = prefix + "y" * (4001 - len(prefix))
    assert len(trunc) == 4001 and len(",".join(names)) < 4000
    TOO_LONG, RANGE, CHARSET = (1406,), (1264,), (1366,)
    cases = []

    def a(name, sql, args, allow=(), check=None):
        cases.append((name, sql, args, allow, check))

    for k, (v, allow) in bad_ids.items():
        a(f"acquire.request.{k}", ACQ, acq(request=v), allow)
        a(f"acquire.lease.{k}", ACQ, acq(lease=v), allow)
    for v in (None, 0, 999, 86400001):
        a(f"acquire.ttl.{v}", ACQ, acq(ttl=v))
    for v in (-1, 2 ** 32, 10 ** 20):
        a(f"acquire.ttl.{v}", ACQ, acq(ttl=v), RANGE)
    items = {
        "null": (None, ()),
        "empty": ("", ()),
        "commas": (",,,", ()),
        "4000-chars": (long_name, ()),
        "4001-chars": (long_name + "h", TOO_LONG),
        "4001-chars-valid-prefix": (trunc, TOO_LONG),
        "65-items": (",".join(f"mutex:h-i{i}" for i in range(65)), ()),
        "name-inner-newline": ("mutex:h-a\nb", ()),
        "name-trailing-newline": ("mutex:h-nl\n", ()),
        "name-trailing-cr": ("mutex:h-cr\r", ()),
        "name-tab": ("mutex:h-tab\t", ()),
        "name-nul": ("mutex:h-x\0y", ()),
        "name-shell": ("mutex:h-$(touch /tmp/h-pwned)", ()),
        "name-backticks": ("mutex:h-`id`", ()),
        "name-quote": ("mutex:h-'x", ()),
        "name-65-chars": ("mutex:h" + "x" * 64, ()),
        "name-dash-first": ("mutex:-h", ()),
        "name-space": ("mutex: h-sp", ()),
        "name-unicode": ("mutex:h-\u00e9", CHARSET),
        "name-percent": ("mutex:h-%", ()),
        "name-colon": ("mutex:h-x:2", ()),
        "duplicate": ("mutex:h-d,mutex:h-d", ()),
        "duplicate-kinds": ("mutex:h-d,read:h-d", ()),
        "count-0": ("semaphore:h-arg-sem:0", ()),
        "count--1": ("semaphore:h-arg-sem:-1", ()),
        "count-1000001": ("semaphore:h-arg-sem:1000001", ()),
        "count-huge": ("semaphore:h-arg-sem:99999999999999999999", ()),
        "count-fraction": ("semaphore:h-arg-sem:1.5", ()),
        "count-hex": ("semaphore:h-arg-sem:0x1", ()),
        "count-empty": ("semaphore:h-arg-sem:", ()),
        "count-space": ("semaphore:h-arg-sem: 1", ()),
        "count-trailing-newline": ("semaphore:h-arg-sem:1\n", ()),
        "key-trailing-newline": ("key:h-k\n", ()),
        "once-trailing-newline": ("once:h-k:60000\n", ()),
        "kind-unknown": ("bogus:h-x", ()),
        "kind-named": ("named:h-x", ()),
        "kind-empty": (":h-x", ()),
        "kind-only": ("mutex", ()),
        "kind-sem-abbrev": ("sem:h-x", ()),
        "once-malformed": ("once:h-x", ()),
        "once-period-0": ("once:h-x:0", ()),
        "once-twice": ("once:h-x:60000,once:h-y:60000", ()),
    }
    for k, (v, allow) in items.items():
        a(f"acquire.items.{k}", ACQ, acq(items=v), allow)
    a("acquire.enqueue.null", ACQ, acq(enqueue=None))
    for v in (-1, 2 ** 32, 10 ** 20):
        a(f"acquire.pid.{v}", ACQ, acq(pid=v), RANGE)
    a("acquire.host.4000-chars", ACQ, acq(host="h" * 4000), TOO_LONG)
    a("acquire.os_user.4000-chars", ACQ, acq(os_user="u" * 4000), TOO_LONG)
    a("acquire.command.4000-chars", ACQ, acq(command="c" * 4000), TOO_LONG)

    SETTLE = "CALL lockrun_settle(%s, %s, %s)"
    for k in ("null", "empty", "4001-chars", "kind-unknown", "name-trailing-newline", "count-0"):
        a(f"settle.items.{k}", SETTLE, [items[k][0], newid(), newid()], items[k][1])
    for k, (v, allow) in bad_ids.items():
        a(f"settle.request.{k}", SETTLE, ["mutex:h-arg-held", v, newid()], allow)
        a(f"settle.lease.{k}", SETTLE, ["mutex:h-arg-held", queued, v], allow)

    def lease_msg(res):
        if "lease must be 32 lowercase hex digits" not in res.msg:
            return f"message {res.msg!r}, want 'lockrun: lease must be 32 lowercase hex digits'"
        return None

    for k, (v, allow) in bad_ids.items():
        a(f"poll.request.{k}", "CALL lockrun_poll(%s)", [v], allow)
        a(f"dequeue.request.{k}", "CALL lockrun_dequeue(%s)", [v], allow)
        a(f"host_queue.request.{k}", "CALL lockrun_host_queue(%s, %s)", [v, 1], allow)
        a(f"sleep.request.{k}", "CALL lockrun_sleep(%s, %s)", [v, 100], allow)
        a(f"renew.lease.{k}", "CALL lockrun_renew(%s, %s)", [v, 30000], allow)
        if v is not None:  # a NULL lease is the documented no-op
            a(f"release.lease.{k}", "CALL lockrun_release(%s, %s, %s, %s)", [v, "exited", 0, None], allow)
        a(f"check.lease.{k}", "CALL lockrun_check(%s, %s)", [v, "h-arg-held"], allow, lease_msg)
    a("sleep.ms.None", "CALL lockrun_sleep(%s, %s)", [never, None])
    for v in (None, 1000001):
        a(f"host_queue.behind.{v}", "CALL lockrun_host_queue(%s, %s)", [queued, v])
    for v in (-1, 2 ** 32):
        a(f"host_queue.behind.{v}", "CALL lockrun_host_queue(%s, %s)", [queued, v], RANGE)
    for v in (-1, 2 ** 32):
        a(f"sleep.ms.{v}", "CALL lockrun_sleep(%s, %s)", [never, v], RANGE)
    for v in (None, 0, 999, 86400001):
        a(f"renew.ttl.{v}", "CALL lockrun_renew(%s, %s)", [held, v])
    for v in (-1, 2 ** 32, 10 ** 20):
        a(f"renew.ttl.{v}", "CALL lockrun_renew(%s, %s)", [held, v], RANGE)
    # (Not 'EXITED': end_reason is an ENUM, so the case of a reason
    # changes nothing that is stored.)
    for v in (None, "", "bored", "expired", "force_released", "skipped", "exited;"):
        a(f"release.reason.{v}", "CALL lockrun_release(%s, %s, %s, %s)", [held, v, 0, None],
          TOO_LONG if len(v or "") > 12 else ())
    a("release.reason.4000-chars", "CALL lockrun_release(%s, %s, %s, %s)",
      [held, "r" * 4000, 0, None], TOO_LONG)
    a("release.exit_status.2^31", "CALL lockrun_release(%s, %s, %s, %s)",
      [held, "exited", 2 ** 31, None], RANGE)
    a("release.term_signal.2^40", "CALL lockrun_release(%s, %s, %s, %s)",
      [held, "signaled", None, 2 ** 40], RANGE)
    gid = run(adm, "SELECT id FROM lr_grants WHERE request_id = %s", (held,)).first("id")
    # The old signature took the public grant number: no longer a key.
    a("check.lease.grant-number", "CALL lockrun_check(%s, %s)", [int(gid), "h-arg-held"], (), lease_msg)
    a("check.lease.grant-number-text", "CALL lockrun_check(%s, %s)", [str(gid), "h-arg-held"], (), lease_msg)
    a("check.resource.4000-chars", "CALL lockrun_check(%s, %s)", [held, "r" * 4000], TOO_LONG)
    for k in ("name-inner-newline", "name-trailing-newline", "name-space", "name-quote"):
        a(f"check.resource.{k}", "CALL lockrun_check(%s, %s)", [held, items[k][0][len("mutex:"):]])
    # The read-only views (75-views.sql): the same resource names refused,
    # and their other arguments checked.
    for k in ("name-inner-newline", "name-trailing-newline", "name-space", "name-quote"):
        bad = items[k][0][len("mutex:"):]
        a(f"status.resource.{k}", "CALL lockrun_status(%s, %s)", ["holders", bad])
        a(f"history.resource.{k}", "CALL lockrun_history(%s, NULL, 10)", [bad])
    a("status.resource.4000-chars", "CALL lockrun_status(%s, %s)", ["holders", "r" * 4000], TOO_LONG)
    for v in (None, "", "Holders", "holders ", "commands", "holders' OR 1"):
        a(f"status.part.{v!r}", "CALL lockrun_status(%s, NULL)", [v], TOO_LONG)
    for v in ("", "Mutex", "mutex ", "lock", "x" * 30):
        a(f"list.kind.{v[:10]!r}", "CALL lockrun_list(%s)", [v], TOO_LONG)
    for since, mx in ((None, None), (None, 0), (None, 1000001), (-1, 10), (3153600001, 10)):
        a(f"history.bounds.{since}.{mx}", "CALL lockrun_history(NULL, %s, %s)", [since, mx])
    a("grant.negative", "CALL lockrun_grant(%s)", [-1], RANGE)

    granted = []
    for name, sql, args, allow, check in cases:
        res = expect_refused(adm, acc, name, sql, args, check, allow)
        if not res.error and res.rows and res.rows[0].get("outcome") == "granted":
            granted.append(args[2])
    # Undo what slipped through, so that the next tests start clean.
    for lease in granted:
        call(acc, "lockrun_release", lease, "exited", 0, None)
    call(qconn, "lockrun_dequeue", queued)
    call(acc, "lockrun_release", held, "exited", 0, None)
    print(f"# {len(cases)} cases", flush=True)


# ------------------------------------------------------------------ txn

def cmd_txn():
    adm = admin()
    acc = account()
    held = newid()
    must_grant(acc, "mutex:h-txn", held)
    queued = newid()
    qconn = account()
    r = call(qconn, "lockrun_acquire", "mutex:h-txn", queued, newid(), 60000, 1, "h", 1, "u", "24-hostile")
    if r.error or r.first("outcome") != "queued":
        raise SystemExit(f"hostile.py: set-up enqueue failed: {r!r}")
    # Its place close to expiry, so that a heartbeat that slipped through
    # would write it (a heartbeat writes only with less than 7 s left).
    run(adm, "UPDATE lr_waiters SET expires_at = UTC_TIMESTAMP(6) + INTERVAL 3 SECOND WHERE request_id = %s",
        (queued,))
    writers = [
        ("lockrun_acquire", "CALL lockrun_acquire(%s, %s, %s, %s, %s, %s, %s, %s, %s)",
         ["mutex:h-txn-free", newid(), newid(), 30000, 0, "h", 1, "u", "24-hostile"]),
        ("lockrun_acquire", "CALL lockrun_acquire(%s, %s, %s, %s, %s, %s, %s, %s, %s)",
         ["mutex:h-txn", queued, newid(), 30000, 1, "h", 1, "u", "24-hostile"]),
        ("lockrun_renew", "CALL lockrun_renew(%s, %s)", [held, 90000]),
        ("lockrun_release", "CALL lockrun_release(%s, %s, %s, %s)", [held, "exited", 0, None]),
        ("lockrun_poll", "CALL lockrun_poll(%s)", [queued]),
        ("lockrun_sleep", "CALL lockrun_sleep(%s, %s)", [queued, 100]),
        ("lockrun_dequeue", "CALL lockrun_dequeue(%s)", [queued]),
        ("lockrun_host_queue", "CALL lockrun_host_queue(%s, %s)", [queued, 3]),
        ("lockrun_host_queue", "CALL lockrun_host_queue(%s, %s)", [queued, None]),
        ("lockrun_settle", "CALL lockrun_settle(%s, %s, %s)", ["mutex:h-txn", queued, newid()]),
    ]
    # (With autocommit = 0 alone the account cannot open a transaction:
    # it may read no table. The ac0 subcommand covers that mode.)
    starts = [("start-transaction", "START TRANSACTION"),
              ("begin-with-read", "BEGIN"),
              ("read-only", "START TRANSACTION READ ONLY")]
    seen = set()
    for how, start in starts:
        for proc, sql, args in writers:
            name = f"{how}.{proc}" + ("" if (how, proc) not in seen else ".queued")
            seen.add((how, proc))
            conn = account()
            run(conn, start)
            if how == "begin-with-read":
                run(conn, "SELECT COUNT(*) FROM information_schema.ROUTINES")
            intx = in_trx(conn)
            if intx != 1:
                fail(name, f"set-up: in transaction {intx} after {start}")
                conn.close()
                continue

            def msg_check(res, proc=proc):
                if not (res.msg or "").startswith(f"{proc}: call it outside a transaction"):
                    return f"message {res.msg!r}, want '{proc}: call it outside a transaction ...'"
                return None
            expect_refused(adm, conn, name, sql, args, msg_check)
            run(conn, "ROLLBACK")
            conn.close()
    # Still held and queued: nothing of the above touched them.
    h = run(adm, """SELECT COUNT(*) AS n FROM lr_holds h JOIN lr_grants g ON g.id = h.grant_id
        WHERE g.request_id = %s""", (held,)).first("n")
    w = run(adm, "SELECT COUNT(*) AS n FROM lr_waiters WHERE request_id = %s", (queued,)).first("n")
    if (h, w) == (1, 1):
        ok("txn.untouched")
    else:
        fail("txn.untouched", f"holds of the lease {h}, places of the request {w} (want 1 and 1)")
    call(qconn, "lockrun_dequeue", queued)
    call(acc, "lockrun_release", held, "exited", 0, None)


# ------------------------------------------------------------------ ac0

def cmd_ac0(out, secs, other):
    """The autocommit=0 client: SET autocommit = 0, then, on that one
    connection and without a COMMIT of its own, acquire a mutex (h-ac0),
    renew it, queue on OTHER (held by a lockrun run the test started),
    poll, settle and leave that queue, and release a second grant (h-ac0-r);
    then stay idle SECS seconds, ROLLBACK, and close. A step that fails is
    noted, and what it should have made is made on a second, autocommit
    connection instead, so that the later steps still have something to
    work on. Writes one JSON line to OUT when the calls are done (what each
    answered, and the ids), so the test can look at the rows meanwhile,
    and "done" when closed."""
    conn = account(autocommit=False)
    side = account()
    run(conn, "SET autocommit = 0")
    res = {}

    def note(step, r, ok_value):
        if r.error:
            res[step] = f"error {r.errno} {r.msg}"
            return False
        res[step] = ok_value(r)
        return True

    lease = newid()
    r = call(conn, "lockrun_acquire", "mutex:h-ac0", newid(), lease, 30000, 0, "h", 1, "u", "24-hostile")
    if not note("acquire", r, lambda r: r.first("outcome")) or res["acquire"] != "granted":
        lease = newid()
        call(side, "lockrun_acquire", "mutex:h-ac0", newid(), lease, 30000, 0, "h", 1, "u", "24-hostile")
    r = call(conn, "lockrun_renew", lease, 45000)
    note("renew", r, lambda r: f"{r.first('holds')}/{r.first('renewed')}")
    req = newid()
    r = call(conn, "lockrun_acquire", f"mutex:{other}", req, newid(), 30000, 1, "h", 1, "u", "24-hostile")
    if not note("enqueue", r, lambda r: r.first("outcome")) or res["enqueue"] != "queued":
        call(side, "lockrun_acquire", f"mutex:{other}", req, newid(), 30000, 1, "h", 1, "u", "24-hostile")
    r = call(conn, "lockrun_poll", req)
    note("poll", r, lambda r: len(r.rows))
    settled = newid()
    r = call(conn, "lockrun_settle", f"mutex:{other}", req, settled)
    note("settle", r, lambda r: r.first("outcome"))
    r = call(conn, "lockrun_dequeue", req)
    note("dequeue", r, lambda r: r.first("removed"))
    released = newid()
    call(side, "lockrun_acquire", "mutex:h-ac0-r", newid(), released, 30000, 0, "h", 1, "u", "24-hostile")
    r = call(conn, "lockrun_release", released, "exited", 0, None)
    note("release", r, lambda r: r.first("released"))
    res["in_transaction"] = in_trx(conn)
    res.update(lease=lease, request=req, settled=settled, released=released)
    side.close()
    with open(out, "w") as f:
        f.write(json.dumps(res, default=str) + "\n")
    time.sleep(secs)
    run(conn, "ROLLBACK")
    conn.close()
    with open(out, "a") as f:
        f.write("done\n")


# ------------------------------------------------------------------ session

def cmd_session():
    adm = admin()
    # Every user variable a routine's text names (none should), and some
    # a routine might plausibly use, set to values that would hurt.
    defs = run(adm, """SELECT ROUTINE_DEFINITION AS d FROM information_schema.ROUTINES
        WHERE ROUTINE_SCHEMA = 'lockrun'""").rows
    named = set()
    for d in defs:
        named |= set(re.findall(r"(?<![@\w'`])@([A-Za-z_][A-Za-z0-9_$]*)", d["d"] or ""))
    named.discard("session")
    named.discard("global")
    plausible_names = {"lr_anything", "lr_req", "lr_now", "lr_gid", "lr_lease", "lr_fence",
                       "lr_request", "lr_ttl", "lr_used", "now", "gid", "lease", "request",
                       "ttl", "fence", "used", "v_now", "p_now", "v_gid", "lr_galera",
                       "lr_sw", "lr_lwt", "galera", "wsrep_on"}
    allvars = sorted(named | plausible_names)
    conn = account()
    sets = ", ".join(f"@{v} = %s" for v in allvars)
    values = []
    for i, v in enumerate(allvars):
        values.append(["2100-01-01 00:00:00", 1, 0, "ffffffffffffffffffffffffffffffff",
                       4294967295, "h-victim"][i % 6])
    run(conn, f"SET {sets}", values)
    uv_sql = "SELECT VARIABLE_NAME AS n, VARIABLE_VALUE AS v FROM information_schema.USER_VARIABLES ORDER BY 1"
    if "MariaDB" not in conn.get_server_info():
        # MySQL lists user variables only in performance_schema, which the
        # account may not read: there the named ones are read one by one
        # (a variable the routines made up is seen on MariaDB, whose
        # routines are the same text).
        uv_sql = " UNION ALL ".join(f"SELECT '{v}' AS n, CAST(@{v} AS CHAR) AS v" for v in allvars)
    uv0 = run(conn, uv_sql)
    if uv0.error:
        fail("session.user_variables", f"cannot read them: {uv0!r}")
        return
    if len(uv0.rows) != len(allvars):
        fail("session.user_variables", f"set {len(allvars)}, see {len(uv0.rows)}")
    ok("session.variables-set", f"({len(allvars)}: {', '.join('@' + v for v in allvars)[:200]})")

    def temp_tables(after):
        # Nothing the routines keep in the caller's session: the account can
        # read no table of the database (1142), or the name does not exist
        # (1146); a temporary table the routines created would answer rows.
        names = {"lr_req"}
        for d in defs:
            names |= set(n.lower() for n in re.findall(
                r"TEMPORARY\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?`?(\w+)", d["d"] or "", re.I))
        for t in sorted(names):
            r = run(conn, f"SELECT COUNT(*) AS n FROM {t}")
            if r.error and r.errno in (1142, 1146):
                ok(f"session.no-temporary-table.{t}.after-{after}")
            else:
                fail(f"session.no-temporary-table.{t}.after-{after}",
                     f"SELECT from {t} in the caller's session answered {r!r}")
        r = run(conn, "SHOW TABLES")
        if r.error or r.rows:
            fail(f"session.show-tables.after-{after}", f"{r!r}")
        uv = run(conn, uv_sql)
        if uv.rows != uv0.rows:
            fail(f"session.user-variables.after-{after}",
                 f"changed: {sorted(set(map(str, uv.rows)) ^ set(map(str, uv0.rows)))[:4]}")

    lease, req = newid(), newid()
    r = call(conn, "lockrun_acquire", "mutex:h-sess", req, lease, 30000, 0, "h", 1, "u", "24-hostile")
    want = run(adm, """SELECT g.id, h.fence, TIMESTAMPDIFF(SECOND, UTC_TIMESTAMP(6), h.expires_at) AS left_s
        FROM lr_grants g JOIN lr_holds h ON h.grant_id = g.id WHERE g.request_id = %s""", (lease,))
    if r.error or r.first("outcome") != "granted" or not want.rows:
        fail("session.acquire", f"{r!r}")
        return
    w = want.rows[0]
    if r.first("grant_id") != w["id"] or r.first("fence") != w["fence"] or not 25 <= w["left_s"] <= 30:
        fail("session.acquire", f"answer {r.rows[0]!r}, admin sees {w!r}")
    else:
        ok("session.acquire", f"(grant {w['id']}, fence {w['fence']}, {w['left_s']} s left)")
    temp_tables("acquire")
    other = newid()
    r = call(conn, "lockrun_acquire", "mutex:h-sess", other, newid(), 30000, 1, "h", 1, "u", "24-hostile")
    if r.error or r.first("outcome") != "queued":
        fail("session.enqueue", f"{r!r}")
    r = call(conn, "lockrun_poll", other)
    if r.error or len(r.rows) != 1 or r.rows[0]["at_head"] != 1:
        fail("session.poll", f"{r!r}")
    r = call(conn, "lockrun_settle", "mutex:h-sess", other, newid())
    if r.error or r.first("outcome") != "queued":
        fail("session.settle", f"{r!r}")
    temp_tables("settle")
    r = call(conn, "lockrun_renew", lease, 40000)
    if r.error or (r.first("holds"), r.first("renewed")) != (1, 1):
        fail("session.renew", f"{r!r}")
    r = call(conn, "lockrun_check", lease, "h-sess")
    if r.error or (r.first("live"), r.first("holds")) != (1, 1):
        fail("session.check", f"{r!r}")
    r = call(conn, "lockrun_dequeue", other)
    if r.error or r.first("removed") != 1:
        fail("session.dequeue", f"{r!r}")
    r = call(conn, "lockrun_release", lease, "exited", 0, None)
    if r.error or r.first("released") != 1:
        fail("session.release", f"{r!r}")
    temp_tables("release")
    left = run(adm, """SELECT (SELECT COUNT(*) FROM lr_holds WHERE resource = 'h-sess') AS holds,
        (SELECT COUNT(*) FROM lr_waiters WHERE resource = 'h-sess') AS waiters,
        (SELECT end_reason FROM lr_grants WHERE request_id = %s) AS reason""", (lease,)).rows[0]
    if (left["holds"], left["waiters"], left["reason"]) != (0, 0, "exited"):
        fail("session.end-state", f"{left!r}")
    else:
        ok("session.cycle", "(acquire, enqueue, poll, settle, renew, check, dequeue, release)")


# ------------------------------------------------------------------ ac0paths

def cmd_ac0paths():
    """Under autocommit = 0 every CALL of a writer must end with no
    transaction open (@@in_transaction = 0), on every path: else the
    session's next writer is refused ('call it outside a transaction') and
    whatever the call read stays in a transaction of the caller's.
    lockrun_check is the exception, by design: its locks last until the
    caller's COMMIT, after which the next writer runs."""
    conn = account(autocommit=False)
    run(conn, "SET autocommit = 0")
    side = account()
    A = ("h", 1, "u", "24-hostile")

    def uniq(prefix):
        return f"h-a0p-{prefix}-{newid()[:8]}"

    def step(name, r, want=None):
        intx = in_trx(conn)
        why = []
        if r.error:
            why.append(f"error {r.errno} {r.msg!r}")
        elif want and not want(r):
            why.append(f"answered {r.rows[:2]!r}")
        if intx:
            why.append("left a transaction open")
            run(conn, "ROLLBACK")
        if why:
            fail(f"ac0paths.{name}", "; ".join(why))
        else:
            ok(f"ac0paths.{name}")

    def outcome(o):
        return lambda r: r.first("outcome") == o

    # Grants: the common path, and lr_acquire's.
    l1, x = newid(), uniq("g")
    step("acquire.granted", call(conn, "lockrun_acquire", f"mutex:{x}", newid(), l1, 30000, 0, *A),
         outcome("granted"))
    step("acquire.granted-again", call(conn, "lockrun_acquire", f"mutex:{x}", newid(), l1, 30000, 0, *A),
         outcome("granted"))
    l2, y, z = newid(), uniq("g2"), uniq("g3")
    step("acquire.granted-two", call(conn, "lockrun_acquire", f"mutex:{y},mutex:{z}", newid(), l2, 30000, 0,
                                     *A), outcome("granted"))
    step("renew", call(conn, "lockrun_renew", l1, 30000), lambda r: r.first("renewed") == 1)
    step("renew.unknown", call(conn, "lockrun_renew", newid(), 30000), lambda r: r.first("renewed") == 0)
    # Busy, queued, and the waiter's calls.
    req, lq = newid(), newid()
    step("acquire.busy", call(conn, "lockrun_acquire", f"mutex:{x}", req, lq, 30000, 0, *A), outcome("busy"))
    step("acquire.queued", call(conn, "lockrun_acquire", f"mutex:{x}", req, lq, 30000, 1, *A), outcome("queued"))
    step("acquire.still-queued", call(conn, "lockrun_acquire", f"mutex:{x}", req, lq, 30000, 1, *A),
         outcome("busy"))
    step("poll", call(conn, "lockrun_poll", req), lambda r: len(r.rows) == 1)
    step("sleep", call(conn, "lockrun_sleep", req, 10), lambda r: r.first("places") == 1)
    step("host_queue", call(conn, "lockrun_host_queue", req, 2), lambda r: r.first("places") == 1)
    step("settle.queued", call(conn, "lockrun_settle", f"mutex:{x}", req, newid()), outcome("queued"))
    step("settle.granted", call(conn, "lockrun_settle", f"mutex:{x}", newid(), l1), outcome("granted"))
    step("settle.none", call(conn, "lockrun_settle", f"mutex:{uniq('s')}", newid(), newid()), outcome("none"))
    step("dequeue", call(conn, "lockrun_dequeue", req), lambda r: r.first("removed") == 1)
    # Claim: queued behind a holder that releases (the hand-off).
    hold, w = newid(), uniq("c")
    call(side, "lockrun_acquire", f"mutex:{w}", newid(), hold, 30000, 0, *A)
    req, lc = newid(), newid()
    call(conn, "lockrun_acquire", f"mutex:{w}", req, lc, 30000, 1, *A)
    run(conn, "ROLLBACK")
    call(side, "lockrun_release", hold, "exited", 0, None)
    step("acquire.claim", call(conn, "lockrun_acquire", f"mutex:{w}", req, lc, 30000, 1, *A), outcome("granted"))
    step("renew.after-claim", call(conn, "lockrun_renew", lc, 30000), lambda r: r.first("renewed") == 1)
    # A release that hands off to a waiter, with its sleeper registered.
    sreq, sl = newid(), newid()
    call(side, "lockrun_acquire", f"mutex:{w}", sreq, sl, 30000, 1, *A)
    call(side, "lockrun_sleep", sreq, 1)
    step("release.hand-off", call(conn, "lockrun_release", lc, "exited", 0, None),
         lambda r: r.first("released") == 1)
    # A release whose waiter cannot be handed the grant (two items): it is
    # woken instead (lr_release's wake-up reads).
    hold2, v = newid(), uniq("v")
    call(conn, "lockrun_acquire", f"mutex:{v}", newid(), hold2, 30000, 0, *A)
    vreq = newid()
    call(side, "lockrun_acquire", f"mutex:{v},mutex:{uniq('v2')}", vreq, newid(), 30000, 1, *A)
    call(side, "lockrun_sleep", vreq, 1)
    step("release.wakes", call(conn, "lockrun_release", hold2, "exited", 0, None),
         lambda r: r.first("released") == 1)
    call(side, "lockrun_dequeue", vreq)
    # Dequeue that gives a handed grant back (and hands it on).
    req, ld = newid(), newid()
    call(conn, "lockrun_acquire", f"mutex:{w}", req, ld, 30000, 1, *A)
    run(conn, "ROLLBACK")
    call(side, "lockrun_acquire", f"mutex:{w}", sreq, sl, 30000, 1, *A)
    call(side, "lockrun_release", sl, "exited", 0, None)
    step("dequeue.returned", call(conn, "lockrun_dequeue", req), lambda r: r.first("returned") == 1)
    # Releases: the common one, and lr_release's (two holds).
    step("release", call(conn, "lockrun_release", l1, "exited", 0, None), lambda r: r.first("released") == 1)
    step("release.two", call(conn, "lockrun_release", l2, "exited", 0, None), lambda r: r.first("released") == 2)
    step("release.unknown", call(conn, "lockrun_release", newid(), "exited", 0, None),
         lambda r: r.first("released") == 0)
    step("release.preload", call(conn, "lockrun_release", None, None, None, None),
         lambda r: r.first("released") == 0)
    # The check keeps the caller's transaction (its locks must last until
    # the COMMIT); after the COMMIT the next writer runs.
    lk = newid()
    call(conn, "lockrun_acquire", f"mutex:{uniq('k')}", newid(), lk, 30000, 0, *A)
    r = call(conn, "lockrun_check", lk, None)
    intx = in_trx(conn)
    run(conn, "COMMIT")
    r2 = call(conn, "lockrun_renew", lk, 30000)
    if r.error or r.first("live") != 1 or intx != 1 or r2.error:
        fail("ac0paths.check", f"check {r!r}, in transaction {intx}, renew after COMMIT {r2!r}")
    else:
        ok("ac0paths.check", "(open until the COMMIT, by design)")
    run(conn, "COMMIT")
    call(conn, "lockrun_release", lk, "exited", 0, None)
    run(conn, "ROLLBACK")
    side.close()
    conn.close()


# ------------------------------------------------------------------ sweeprace

def cmd_sweeprace():
    """A renewal that read its hold within the grace, but commits only after
    the grace ended, while an acquire sweeps the resource: the sweep read
    the hold before the renewal committed. The renewal answers renewed, so
    the hold must stay: the acquirer is busy and the grant goes on. (The
    admin holds the grant row locked for 1.2 s so that both wait there, in
    this order.)"""
    adm = admin()
    acc = account()
    name = f"h-swr-{newid()[:8]}"
    lease = newid()
    r = must_grant(acc, f"mutex:{name}", lease, 30000)
    gid = r.first("grant_id")
    # 4.6 s past its expiry: still renewable for 0.4 s.
    run(adm, """UPDATE lr_holds SET expires_at = UTC_TIMESTAMP(6) - INTERVAL 4600000 MICROSECOND
        WHERE grant_id = %s""", (gid,))
    gate = admin()
    run(gate, "START TRANSACTION")
    run(gate, "SELECT id FROM lr_grants WHERE id = %s FOR UPDATE", (gid,))
    out = {}

    def renew():
        out["renew"] = call(account(), "lockrun_renew", lease, 30000)

    def acquire():
        out["acquire"] = call(account(), "lockrun_acquire", f"mutex:{name}", newid(), newid(), 30000, 0,
                              "h", 2, "u", "24-hostile")
    tr = threading.Thread(target=renew)
    tr.start()
    time.sleep(0.6)  # the hold's old expiry is now past the grace
    ta = threading.Thread(target=acquire)
    ta.start()
    time.sleep(0.6)
    run(gate, "COMMIT")
    tr.join()
    ta.join()
    rn, aq = out["renew"], out["acquire"]
    row = run(adm, """SELECT g.ended_at IS NULL AS open, COUNT(h.grant_id) AS holds,
        COALESCE(MIN(h.expires_at) > UTC_TIMESTAMP(6) + INTERVAL 20 SECOND, 0) AS renewed
        FROM lr_grants g LEFT JOIN lr_holds h ON h.grant_id = g.id WHERE g.id = %s GROUP BY g.id""",
              (gid,)).rows[0]
    if rn.error or rn.first("renewed") != 1:
        fail("sweeprace.renewed", f"the renewal answered {rn!r}")
    elif aq.error or aq.first("outcome") != "busy" or (row["open"], row["holds"], row["renewed"]) != (1, 1, 1):
        fail("sweeprace.kept", f"renewed, yet the acquire answered {aq!r}; the grant: {row!r}")
    else:
        ok("sweeprace.kept", "(renewed; the acquire busy; the hold kept)")
    call(acc, "lockrun_release", lease, "exited", 0, None)
    if not aq.error and aq.first("outcome") == "granted":
        # Undo the double grant of the failing case.
        run(adm, "DELETE FROM lr_holds WHERE grant_id = %s", (aq.first("grant_id"),))
        run(adm, "UPDATE lr_resources SET used = 0 WHERE name = %s", (name,))


# ------------------------------------------------------------------ reclaim

def cmd_reclaim(tag):
    """Rows any account makes by naming locks: those idle for ten minutes
    (made so here by the admin) go as new names are made, two per new row,
    keeping their tokens; a held, a paused and a semaphore row of the same
    age stay. Prints the names reclaimed, for the test to go on with."""
    adm = admin()
    acc = account()
    A = ("h", 1, "u", "24-hostile")
    tag = f"{tag}{newid()[:6]}"  # names nobody made before
    old = {}
    for i in range(20):
        kind = ("mutex", "key", "read", "write")[i % 4]
        nm = f"h-rc-{tag}-old{i:02d}"
        for _ in range(2):
            lease = newid()
            r = call(acc, "lockrun_acquire", f"{kind}:{nm}", newid(), lease, 30000, 0, *A)
            call(acc, "lockrun_release", lease, "exited", 0, None)
        row = ("id:" if kind == "key" else "") + nm
        old[row] = (kind, r.first("fence"))
    held = newid()
    call(acc, "lockrun_acquire", f"mutex:h-rc-{tag}-held", newid(), held, 60000, 0, *A)
    lp = newid()
    call(acc, "lockrun_acquire", f"mutex:h-rc-{tag}-paused", newid(), lp, 30000, 0, *A)
    call(acc, "lockrun_release", lp, "exited", 0, None)
    run(adm, "UPDATE lr_resources SET paused_at = UTC_TIMESTAMP(6) WHERE name = %s", (f"h-rc-{tag}-paused",))
    run(adm, "INSERT INTO lr_resources (name, kind, capacity) VALUES (%s, 'semaphore', 3)", (f"h-rc-{tag}-sem",))
    keep = [f"h-rc-{tag}-held", f"h-rc-{tag}-paused", f"h-rc-{tag}-sem"]
    # The ones to keep the oldest of all, so each reclaim meets them first.
    run(adm, f"""UPDATE lr_resources SET updated_at = UTC_TIMESTAMP(6) - INTERVAL 3 HOUR
        WHERE name IN ({', '.join(['%s'] * len(keep))})""", keep)
    run(adm, f"""UPDATE lr_resources SET updated_at = UTC_TIMESTAMP(6) - INTERVAL 2 HOUR
        WHERE name IN ({', '.join(['%s'] * len(old))})""", list(old))
    names = list(old)
    marks = ", ".join(["%s"] * len(names))

    def left():
        return run(adm, f"SELECT COUNT(*) AS n FROM lr_resources WHERE name IN ({marks})", names).first("n")
    made = 0
    while left() and made < 40:
        lease = newid()
        call(acc, "lockrun_acquire", f"mutex:h-rc-{tag}-new{made:02d}", newid(), lease, 30000, 0, *A)
        call(acc, "lockrun_release", lease, "exited", 0, None)
        made += 1
    n = left()
    if n:
        fail("reclaim.idle", f"{n} of {len(old)} rows idle for 2 h still there after {made} new rows")
    else:
        ok("reclaim.idle", f"({len(old)} rows reclaimed by {made} new ones)")
    kept = run(adm, f"SELECT COUNT(*) AS n FROM lr_resources WHERE name IN ({', '.join(['%s'] * len(keep))})",
               keep).first("n")
    if kept != 3:
        fail("reclaim.kept", f"{kept} of the held, paused and semaphore rows left, want 3")
    else:
        ok("reclaim.kept")
    # Made again, each starts above every token it had.
    low = []
    for row, (kind, fence) in old.items():
        nm = row[3:] if row.startswith("id:") else row
        lease = newid()
        r = call(acc, "lockrun_acquire", f"{kind}:{nm}", newid(), lease, 30000, 0, *A)
        call(acc, "lockrun_release", lease, "exited", 0, None)
        if r.error or r.first("outcome") != "granted" or r.first("fence") <= fence:
            low.append(f"{row}: {r.first('fence') if not r.error else r!r} after {fence}")
    if low:
        fail("reclaim.fences", "; ".join(low[:4]))
    else:
        ok("reclaim.fences")
    call(acc, "lockrun_release", held, "exited", 0, None)
    run(adm, "UPDATE lr_resources SET paused_at = NULL WHERE name = %s", (f"h-rc-{tag}-paused",))


# ------------------------------------------------------------------ replay

def cmd_replay():
    """A live lease of one's own, replayed with other items: a resource
    someone else holds, one more item, another kind or count, a name not
    made yet. Each must be refused ('granted for other items'), writing
    nothing; the same items again answer the same grant."""
    adm = admin()
    acc = account()
    victim = newid()
    must_grant(acc, "mutex:h-rp-victim", victim)
    run(adm, "INSERT IGNORE INTO lr_resources (name, kind, capacity) VALUES ('h-rp-sem', 'semaphore', 5)")
    mine = newid()
    items = "mutex:h-rp-mine,semaphore:h-rp-sem:2"
    r = must_grant(acc, items, mine)
    gid = r.first("grant_id")
    fences = {row["resource"]: row["fence"] for row in r.rows}
    new = f"h-rp-new-{newid()[:8]}"

    def other_items(res):
        if "granted for other items" not in (res.msg or ""):
            return f"message {res.msg!r}, want '... granted for other items ...'"
        return None
    for name, its in (("someone-elses", "mutex:h-rp-victim"),
                      ("someone-elses-plus-mine", "mutex:h-rp-mine,mutex:h-rp-victim,semaphore:h-rp-sem:2"),
                      ("one-of-mine", "mutex:h-rp-mine"),
                      ("other-count", "mutex:h-rp-mine,semaphore:h-rp-sem:3"),
                      ("other-kind", "read:h-rp-mine,semaphore:h-rp-sem:2"),
                      ("new-name", f"mutex:{new}"),
                      ("new-key", f"key:{new}")):
        for enqueue in (0, 1):
            expect_refused(adm, acc, f"replay.{name}.enqueue-{enqueue}", ACQ,
                           [its, newid(), mine, 60000, enqueue, "h", 1, "u", "24-hostile"], other_items)
    n = run(adm, "SELECT COUNT(*) AS n FROM lr_resources WHERE name IN (%s, %s)", (new, "id:" + new)).first("n")
    if n:
        fail("replay.no-new-rows", f"{n} resource rows made")
    else:
        ok("replay.no-new-rows")
    # The same items (in another order) answer the same grant.
    r = call(acc, "lockrun_acquire", "semaphore:h-rp-sem:2,mutex:h-rp-mine", newid(), mine, 60000, 0,
             "h", 1, "u", "24-hostile")
    got = {row["resource"]: row["fence"] for row in r.rows or []}
    if r.error or r.first("outcome") != "granted" or r.first("grant_id") != gid or got != fences:
        fail("replay.same-items", f"{r!r}, want grant {gid} with fences {fences}")
    else:
        ok("replay.same-items", f"(grant {gid})")
    for lease in (mine, victim):
        call(acc, "lockrun_release", lease, "exited", 0, None)


# ------------------------------------------------------------------ checklocks

LEVELS = ["READ UNCOMMITTED", "READ COMMITTED", "REPEATABLE READ", "SERIALIZABLE"]
# SERIALIZABLE for the next transaction only (SET TRANSACTION), which the
# session's variables do not show.
ONCE = "SERIALIZABLE ONCE"


def trx_record_locks(adm, conn_id):
    """The RECORD LOCKS lines of connection conn_id's transaction in SHOW
    ENGINE INNODB STATUS (innodb_status_output_locks must be on). MySQL
    lists a read-only transaction's locks only in performance_schema:
    there, one line per record lock, in the same words."""
    if "MariaDB" not in adm.get_server_info():
        rows = run(adm, """SELECT l.INDEX_NAME AS i, l.OBJECT_NAME AS t, l.LOCK_MODE AS m
            FROM performance_schema.data_locks l JOIN performance_schema.threads th
              ON th.THREAD_ID = l.THREAD_ID
            WHERE th.PROCESSLIST_ID = %s AND l.LOCK_TYPE = 'RECORD'""", (conn_id,)).rows
        return [f"RECORD LOCKS index {r['i']} of table {r['t']} lock mode {r['m']}"
                + (" locks rec but not gap" if "REC_NOT_GAP" in r["m"] else "") for r in rows]
    status = run(adm, "SHOW ENGINE INNODB STATUS").rows[0]["Status"]
    for trx in status.split("---TRANSACTION")[1:]:
        if re.search(rf"(MySQL|MariaDB) thread id {conn_id},", trx):
            return [ln for ln in trx.splitlines() if ln.startswith("RECORD LOCKS")]
    return []


def cmd_checklocks():
    """lockrun_check inside a transaction left open, at each isolation
    level, opened by START TRANSACTION or by autocommit = 0: of its own
    lease, which has just expired (so it is the newest grant and its holds
    the last rows of their indexes), and of 300 made-up leases. While it is
    open, other clients must be served as if it were not: fresh mutexes
    granted, a release that hands its mutex to a waiter; only a release of
    the checked grant itself waits for it. Under SERIALIZABLE, where every
    read locks, the check is refused instead (it must then lock nothing).    A SERIALIZABLE set for the next transaction only, which the check
    cannot see, must lock no more than the other levels for a live lease;
    a made-up lease there locks the gap around it (a documented limit),
    which a grant with the next lease up meets."""
    adm = admin()
    other = account()
    was = run(adm, "SELECT @@global.innodb_status_output_locks AS v").first("v")
    run(adm, "SET GLOBAL innodb_status_output_locks = ON")
    for level in LEVELS + [ONCE]:
        for how in ("start-transaction", "autocommit-0"):
            tag = f"checklocks.{level.replace(' ', '-').lower()}.{how}"
            # At SERIALIZABLE ONCE the lease's look-up locks the gap below
            # it: the checked lease is made low, and the others' leases
            # (up) start above it, so only a lock beyond it would meet them.
            lease, mine = newid(), f"h-cl-{newid()[:8]}"
            up = newid
            if level == ONCE:
                lease = "000000" + lease[6:]
                up = lambda: secrets.choice("123456789abcdef") + newid()[1:]  # noqa: E731
            r = call(other, "lockrun_acquire", f"mutex:{mine}", newid(), lease, 30000, 0,
                     "h", 1, "u", "24-hostile")
            if r.error or r.first("outcome") != "granted":
                fail(tag, f"set-up acquire: {r!r}")
                continue
            # Expired, within the grace: not swept yet.
            run(adm, """UPDATE lr_holds h JOIN lr_grants g ON g.id = h.grant_id
                SET h.expires_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND WHERE g.request_id = %s""", (lease,))
            chk = account(autocommit=(how != "autocommit-0"))
            cid = run(chk, "SELECT CONNECTION_ID() AS c").first("c")
            if level == ONCE:
                run(chk, "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            else:
                run(chk, f"SET SESSION TRANSACTION ISOLATION LEVEL {level}")
            if how == "autocommit-0":
                run(chk, "SET autocommit = 0")
            if level == ONCE:
                run(chk, "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE")
            if how != "autocommit-0":
                run(chk, "START TRANSACTION")
            first = call(chk, "lockrun_check", lease, None)
            refused = 0
            # (A made-up lease locks a gap at SERIALIZABLE ONCE: below.)
            for _ in range(0 if level == ONCE else 300):
                res = call(chk, "lockrun_check", newid(), None)
                refused += res.error
            why = []
            # Of its one resource: the same answer, read the same way.
            if level == ONCE:
                one = call(chk, "lockrun_check", lease, mine)
                if one.error or (one.first("live"), one.first("holds")) != (0, 1):
                    why.append(f"check of its resource answered {one!r}, want live 0, holds 1")
            if level == "SERIALIZABLE":
                if not (first.errno == 1644 and "SERIALIZABLE" in (first.msg or "")) or refused != 300:
                    why.append(f"check answered {first!r} ({refused}/300 made-up refused), want 1644 SERIALIZABLE")
            elif first.error or (first.first("live"), first.first("holds")) != (0, 1) or refused:
                why.append(f"check answered {first!r} ({refused}/300 made-up refused), want live 0, holds 1")
            # Its locks, as the server lists them: records only, no gap.
            # At SERIALIZABLE ONCE the look-ups by the lease and by the
            # grant id take next-key locks on the entries they find: the
            # lease's entry with the gap before it (down to the lease
            # logged before it), the grant's holds' entries with the gaps
            # before them, where no later grant's holds go. The others
            # below show that nothing after them is locked.
            locks = trx_record_locks(adm, cid)
            gaps = [ln for ln in locks if "locks rec but not gap" not in ln
                    and not (level == ONCE and ("index k_grant " in ln or "index uq_request " in ln))]
            if gaps:
                why.append(f"locks a gap or next key: {gaps[:2]}")
            want = 4 if level == ONCE else 2
            if level != "SERIALIZABLE" and len(locks) != want:
                why.append(f"{len(locks)} record locks listed, want {want}: {locks}")
            # Others meanwhile: three fresh mutexes, and a hand-off.
            t0 = time.monotonic()
            for _ in range(3):
                lx = up()
                r = call(other, "lockrun_acquire", f"mutex:h-cl-{newid()[:8]}", newid(), lx, 30000, 0,
                         "h", 1, "u", "24-hostile")
                if r.error or r.first("outcome") != "granted":
                    why.append(f"a fresh mutex: {r!r}")
                call(other, "lockrun_release", lx, "exited", 0, None)
            name = f"h-cl-{newid()[:8]}"
            lh, rw, lw = up(), newid(), up()
            call(other, "lockrun_acquire", f"mutex:{name}", newid(), lh, 30000, 0, "h", 1, "u", "24-hostile")
            waiter = account()
            r = call(waiter, "lockrun_acquire", f"mutex:{name}", rw, lw, 30000, 1, "h", 1, "u", "24-hostile")
            if r.first("outcome") != "queued":
                why.append(f"the waiter: {r!r}")
            r = call(other, "lockrun_release", lh, "exited", 0, None)
            if r.error or r.first("released") != 1:
                why.append(f"the release that hands off: {r!r}")
            r = call(waiter, "lockrun_acquire", f"mutex:{name}", rw, lw, 30000, 1, "h", 1, "u", "24-hostile")
            if r.error or r.first("outcome") != "granted":
                why.append(f"the claim of the hand-off: {r!r}")
            call(waiter, "lockrun_release", lw, "exited", 0, None)
            waiter.close()
            took = time.monotonic() - t0
            if took > 1.5:
                why.append(f"the others took {took:.1f} s")
            # The checked grant itself is held back by the check (below
            # SERIALIZABLE): its release waits, and gives up with 1205.
            if level != "SERIALIZABLE" and how == "start-transaction":
                r = call(other, "lockrun_release", lease, "exited", 0, None)
                if r.errno != 1205:
                    why.append(f"the checked grant's release answered {r!r}, want 1205 while the check holds it")
            # The limit: a made-up lease above every lease locks the gap up
            # to the end of the lease index; a grant with a lease there
            # waits for the transaction (1205 after its lock wait).
            if level == ONCE and how == "start-transaction":
                call(chk, "lockrun_check", "f" * 31 + "e", None)
                r = call(other, "lockrun_acquire", f"mutex:h-cl-{newid()[:8]}", newid(), "f" * 32, 30000, 0,
                         "h", 1, "u", "24-hostile")
                if r.errno != 1205:
                    why.append(f"an acquire with the lease after a made-up one answered {r!r}, want 1205")
            run(chk, "ROLLBACK")
            chk.close()
            call(other, "lockrun_release", lease, "exited", 0, None)
            if why:
                fail(tag, "; ".join(why))
            else:
                ok(tag, f"(others served in {took:.2f} s)")
    run(adm, f"SET GLOBAL innodb_status_output_locks = {int(was)}")


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    cmd = argv[1]
    if cmd == "surface":
        cmd_surface()
    elif cmd == "args":
        cmd_args()
    elif cmd == "txn":
        cmd_txn()
    elif cmd == "ac0" and len(argv) == 5:
        cmd_ac0(argv[2], float(argv[3]), argv[4])
    elif cmd == "session":
        cmd_session()
    elif cmd == "ac0paths":
        cmd_ac0paths()
    elif cmd == "sweeprace":
        cmd_sweeprace()
    elif cmd == "reclaim" and len(argv) == 3:
        cmd_reclaim(argv[2])
    elif cmd == "replay":
        cmd_replay()
    elif cmd == "checklocks":
        cmd_checklocks()
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
