#!/usr/bin/python3
"""Take a lockrun lock from Python through the SQL API (doc/sql-api.md).

    sql-api-example.py [-c lockrun.conf] [--timeout S] [--ttl S] [--work S] NAME

Takes mutex NAME (waiting in its queue for at most --timeout seconds),
does --work seconds of "work" while a background thread renews the lease,
then checks the lease inside its own transaction right before COMMIT, and
releases the lock in any case. Exit status as lockrun's: 0 done, 75 the
lock was busy until the timeout, 76 the lease was lost, 69 the database or
the lockrun schema is unusable.

The connection settings come from a lockrun.conf(5) file ([database]
host, port, socket, user, password or password_file, database); TLS keys
are not handled here. Needs Debian's python3-pymysql.
"""

import argparse
import configparser
import sys
import threading
import time
import uuid

import pymysql

EX_BUSY, EX_LOST, EX_UNAVAILABLE = 75, 76, 69
# Errors after which the procedure has rolled back: CALL it again.
RETRY = {1205, 1213, 1047, 1180, 1614}


def connect(conf):
    """A connection with autocommit on: acquire refuses to run inside a
    transaction, and each call is its own transaction anyway."""
    db = conf["database"] if conf.has_section("database") else {}
    args = dict(user=db.get("user"), database=db.get("database", "lockrun"),
                autocommit=True, connect_timeout=5)
    if "password_file" in db:
        with open(db["password_file"]) as f:
            args["password"] = f.readline().rstrip("\n")
    elif "password" in db:
        args["password"] = db["password"]
    host = db.get("host", "localhost").split(",")[0].strip()
    if host == "localhost":
        args["unix_socket"] = db.get("socket", "/run/mysqld/mysqld.sock")
    else:
        args.update(host=host, port=int(db.get("port", "3306")))
    return pymysql.connect(**args)


def call(conn, proc, *args):
    """CALL a lockrun procedure: its one result set as a list of dicts.
    Retries while the server says the call rolled back (deadlock, lock
    wait timeout); the procedures are safe to call again then."""
    while True:
        try:
            with conn.cursor(pymysql.cursors.DictCursor) as cur:
                cur.callproc(proc, args)
                rows = cur.fetchall()
                while cur.nextset():  # drain the final OK packet
                    pass
            return rows
        except pymysql.err.OperationalError as e:
            if e.args[0] not in RETRY:
                raise
            time.sleep(0.05)


def acquire(conn, items, request, timeout, ttl_ms):
    """Take ITEMS, waiting in the queue up to TIMEOUT seconds.
    Returns the granted rows and the lease id, or None on timeout."""
    deadline = time.monotonic() + timeout
    # The lease is the grant's secret. Keep it while the request waits: a
    # release may hand the grant to the request under the lease it queued
    # with, and only that lease claims it. Take a new one only when the
    # old one is spent (a settlement that did not grant, or a handed grant
    # that expired before it was claimed).
    lease = uuid.uuid4().hex
    while True:
        try:
            rows = call(conn, "lockrun_acquire", items, request, lease, ttl_ms, 1,
                        None, None, None, sys.argv[0])
        except pymysql.err.OperationalError as e:
            if e.args[0] == 1644:  # the procedure's own refusal
                if "expired before it was claimed" not in e.args[1]:
                    raise
                lease = uuid.uuid4().hex
                continue
            # The answer was lost: the grant may or may not exist. Settle it
            # on a new connection; the lease id is spent unless granted.
            conn.connect()
            rows = call(conn, "lockrun_settle", items, request, lease)
            if rows[0]["outcome"] != "granted":
                lease = uuid.uuid4().hex
        outcome = rows[0]["outcome"]
        if outcome == "granted":
            return rows, lease
        if outcome in ("invalid", "key_busy"):
            sys.exit("%s: %s" % (outcome, rows[0]["message"] or ""))
        if outcome == "queued":
            print("queued: ticket %s" % rows[0]["ticket"], flush=True)
        # Busy, or queued: poll (a heartbeat too: at least every 3 s) until
        # the attempt could succeed, or until the timeout.
        while True:
            if time.monotonic() >= deadline:
                call(conn, "lockrun_dequeue", request)
                return None, None
            places = call(conn, "lockrun_poll", request)
            if not places:
                break  # no place: a release handed us the grant (the acquire
                # claims it), or none (never had one, or swept): queue again
            if all(p["at_head"] and p["fits"] for p in places):
                break
            time.sleep(0.1 if places[0]["at_head"] else 0.5)


class Renewer(threading.Thread):
    """Renews the lease every ttl/3 on its own connection (a pymysql
    connection must not be shared between threads). Sets .lost when a
    renewal did not extend every hold."""

    def __init__(self, conf, lease, ttl_ms, nholds):
        super().__init__(daemon=True)
        self.conn = connect(conf)
        self.lease, self.ttl_ms, self.nholds = lease, ttl_ms, nholds
        self.stop = threading.Event()
        self.lost = threading.Event()

    def run(self):
        while not self.stop.wait(self.ttl_ms / 3000):
            try:
                r = call(self.conn, "lockrun_renew", self.lease, self.ttl_ms)[0]
            except pymysql.err.Error as e:
                print("renewal failed: %s" % e, file=sys.stderr, flush=True)
                continue  # try again; the lease ends at its ttl anyway
            if r["renewed"] != self.nholds or r["holds"] != self.nholds:
                self.lost.set()
                return
            print("renewed until %s" % r["expires_at"], flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-c", "--config", default="/etc/lockrun.conf")
    ap.add_argument("--timeout", type=float, default=10, help="seconds to wait")
    ap.add_argument("--ttl", type=float, default=30, help="lease, seconds")
    ap.add_argument("--work", type=float, default=2, help="seconds of work")
    ap.add_argument("name", help="mutex to take")
    a = ap.parse_args()
    conf = configparser.ConfigParser(interpolation=None)
    conf.read(a.config)
    ttl_ms = int(a.ttl * 1000)
    items = "mutex:" + a.name

    try:
        conn = connect(conf)
        request = uuid.uuid4().hex
        rows, lease = acquire(conn, items, request, a.timeout, ttl_ms)
    except pymysql.err.Error as e:
        hint = ""
        if e.args and e.args[0] in (1305, 1318, 1146, 1054):
            hint = ": the lockrun schema is missing or outdated; run 'lockrunctl init'"
        print("sql-api-example: %s%s" % (e, hint), file=sys.stderr)
        return EX_UNAVAILABLE
    if rows is None:
        print("timed out: '%s' is busy" % a.name, flush=True)
        return EX_BUSY
    grant_id, fence = rows[0]["grant_id"], rows[0]["fence"]
    print("granted: %s, grant %d, fence %d" % (a.name, grant_id, fence), flush=True)

    renewer = Renewer(conf, lease, ttl_ms, len(rows))
    renewer.start()
    status, reason = EX_LOST, "aborted"
    try:
        # The critical section: steps that stop as soon as the lease is lost.
        end = time.monotonic() + a.work
        while time.monotonic() < end and not renewer.lost.is_set():
            time.sleep(min(0.2, max(0, end - time.monotonic())))
        if renewer.lost.is_set():
            print("lost: a renewal found the lease gone", flush=True)
            return status
        # The business transaction: its writes would go here. The check comes
        # last, right before COMMIT: it share-locks our holds, so no sweep or
        # release can end the lease before we commit (and our own renewal
        # waits for us: keep this short).
        conn.begin()
        with conn.cursor(pymysql.cursors.DictCursor) as cur:
            # ... INSERT/UPDATE the application's own tables here ...
            cur.execute("CALL lockrun_check(%s, %s)", (lease, a.name))
            chk = cur.fetchone()
            while cur.nextset():
                pass
        if chk["live"] and chk["fence"] == fence:
            conn.commit()
            print("checked: live, fence %d, committed" % fence, flush=True)
            status, reason = 0, "exited"
        else:
            conn.rollback()
            print("lost: the lease ended before COMMIT; rolled back", flush=True)
    finally:
        renewer.stop.set()
        renewer.join()
        # Release in any case; it is idempotent, so calling it again after an
        # error is safe.
        call(conn, "lockrun_release", lease, reason, status, None)
        print("released", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
