#!/usr/bin/env python3
"""A spy session of lockrun's own database account.

Every session of one account can read the statement text of every other
session of that account in the process list. This polls it for SECONDS,
as fast as it can, keeps every lockrun statement it sees, and replays what
it reads: each 32-hex-digit string in a statement (the shape of a request
id or a lease) is tried at once, on a second session, as a lease
(lockrun_release, lockrun_renew) and as a request id (lockrun_dequeue).
It prints one JSON object: how many
lockrun statements it saw, the ids it found, and every replay that acted
(released or renewed a hold, or left a queue).

Usage: spy.py CONFIG SECONDS [--no-replay]   (CONFIG: lockrun.conf of the
account; --no-replay: only look)
"""

import configparser
import json
import re
import sys
import time

import pymysql

HEX32 = re.compile(r"(?<![0-9a-f])[0-9a-f]{32}(?![0-9a-f])")


def connect(conf):
    c = configparser.ConfigParser(interpolation=None)
    c.read(conf)
    d = c["database"]
    with open(d["password_file"]) as f:
        pw = f.read()
    return pymysql.connect(host=d.get("host", "127.0.0.1"), port=int(d.get("port", 3306)),
                           user=d["user"], password=pw, database=d["database"],
                           autocommit=True)


def replay(conn, ids):
    acted = []
    cur = conn.cursor()
    for i in sorted(ids):
        for sql, col in (("CALL lockrun_release(%s, 'aborted', NULL, NULL)", "released"),
                         ("CALL lockrun_renew(%s, 60000)", "renewed"),
                         ("CALL lockrun_dequeue(%s)", "removed")):
            try:
                cur.execute(sql, (i,))
                row = cur.fetchone()
                names = [d[0] for d in cur.description] if cur.description else []
                while cur.nextset():
                    pass
                if row and col in names and row[names.index(col)]:
                    acted.append({"id": i, "call": sql.split("(")[0], col: row[names.index(col)]})
            except pymysql.MySQLError:
                pass
    return acted


def main():
    conf, seconds = sys.argv[1], float(sys.argv[2])
    look_only = "--no-replay" in sys.argv[3:]
    conn, other = connect(conf), connect(conf)
    cur = conn.cursor()
    seen, texts, ids, acted = 0, set(), set(), []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        cur.execute("SELECT INFO FROM information_schema.PROCESSLIST "
                    "WHERE ID NOT IN (CONNECTION_ID(), %s) AND INFO LIKE '%%lockrun%%'",
                    (other.thread_id(),))
        for (info,) in cur.fetchall():
            seen += 1
            texts.add(info)
            new = set(HEX32.findall(info)) - ids
            ids.update(new)
            if not look_only:
                acted += replay(other, new)
    print(json.dumps({"seen": seen, "texts": sorted(texts)[:20], "ids": sorted(ids),
                      "acted": acted}))


if __name__ == "__main__":
    main()
