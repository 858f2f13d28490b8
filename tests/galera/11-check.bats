#!/usr/bin/env bats
#
# lockrun_check on the 3-node Galera cluster: an application on node 1
# holds `mutex:g-chk`, and inside its own transaction checks the grant
# (CALL lockrun_check(lease, 'g-chk')) and writes a row into its own table
# (appdb.t); on node 2 the grant ends, by a release or by a sweep after it
# expired. Whatever the order, the application's row must never be
# committed after the grant ended in the cluster's order:
#
#   before  the grant ended on node 2 before node 1's check: the check
#           answers live 0 (the procedures' causal reads see the release)
#   during  it ended after node 1's check but before node 1's COMMIT: that
#           COMMIT (or a statement before it) fails with 1213, no row
#   after   node 1 committed first: the row is there, and the release or
#           sweep on node 2 succeeds after it
#   lagged  before and during again, with node 1 made to lag so that it
#           has not applied the release when it checks or commits: the
#           check's causal read waits for it; certification fails the
#           COMMIT (node 1 cannot brute-force abort a transaction for a
#           write set it has not applied)
#   race    node 1's COMMIT and node 2's release sent together, 30 times:
#           whenever both succeed, the COMMIT's place in the cluster's
#           total order (the seqno of WSREP_LAST_WRITTEN_GTID()) is below
#           the release's. A COMMIT that the server replayed (it was
#           ordered, then brute-force aborted by a conflicting write set
#           ordered before it, the release's) leaves that function's
#           value unchanged, and counts as ordered after the release.
#
# A share lock, which is all lockrun_check took before API 3, is local to
# its node: it keeps the check's hold rows out of the application's write
# set, so certification could order a release on another node before the
# application's COMMIT and pass both (the race saw that). API 3 writes the
# rows (lr_holds.checks + 1) on Galera.
#
# Everything talks to the nodes as the EXECUTE-only account `lockrun`
# (python3 + pymysql), which may also INSERT and SELECT in its own database
# appdb (created here); only the verification reads, the sweeps and the
# clean-up run as the administrator.

bats_require_minimum_version 1.5.0

load suite

PY=/usr/bin/python3 # Debian's, which has python3-pymysql

# py ARGS...: the client below.
py() {
	LR_ADMIN_USER=$(lr_admin_user) LR_ADMIN2_CONF=$BATS_FILE_TMPDIR/admin2.conf \
		timeout 300 "$PY" "$BATS_FILE_TMPDIR/chk.py" "$@"
}

setup_file() {
	lr_galera_wait_cluster "$LR_GALERA" 3 60 1 2 3
	"$PY" -c 'import pymysql' || {
		echo "python3-pymysql is missing (apt-get install python3-pymysql)" >&2
		return 1
	}
	# The application's database and table (DDL replicates to every node).
	# A Galera table needs a primary key.
	lr_galera_sql "$LR_GALERA" 1 "CREATE DATABASE IF NOT EXISTS appdb;
		CREATE OR REPLACE TABLE appdb.t (
			id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY,
			tag VARCHAR(64) NOT NULL UNIQUE,
			fence BIGINT UNSIGNED NOT NULL) ENGINE = InnoDB;
		CREATE OR REPLACE TABLE appdb.lag (id INT PRIMARY KEY, v INT) ENGINE = InnoDB;
		GRANT INSERT, SELECT ON appdb.* TO 'lockrun'@'%';"
	# lockrunctl as the administrator through node 2 (admin.conf is node 1).
	(
		umask 077
		cat >"$BATS_FILE_TMPDIR/admin2.conf" <<-EOF
			[database]
			socket = $LR_GALERA/n2/mysqld.sock
			user = $(lr_admin_user)
			database = lockrun
		EOF
	)
	write_client "$BATS_FILE_TMPDIR/chk.py"
}

teardown_file() {
	lr_galera_sql "$LR_GALERA" 1 "REVOKE INSERT, SELECT ON appdb.* FROM 'lockrun'@'%';
		DROP DATABASE IF EXISTS appdb;" || true
}

setup() {
	lr_galera_wait_cluster "$LR_GALERA" 3 60 1 2 3
	gsql 1 "DELETE FROM lr_holds; DELETE FROM lr_waiters; DELETE FROM lr_grants;
		DELETE FROM lr_resources; DELETE FROM lr_capacity_audit;"
}

# write_client FILE: the Python client. Subcommands:
#   order WHEN END   one ordering (WHEN before|during|after) of node 1's
#                    transaction against END (release|sweep|acquire) on
#                    node 2; prints what happened, one fact a line
#   lagged WHEN      a release on node 2 that node 1 has not applied yet
#                    (node 1 made to lag): before node 1's check, or
#                    during its transaction
#   race N           N rounds of node 1's COMMIT against node 2's release,
#                    each side a process of its own (app, end) started
#                    before and released by a barrier file; one line a
#                    round, then "race ..." with the counts
#   app, end         the two sides of a round (started by race)
#   basics           lockrun_check's answers and its write on Galera
write_client() {
	cat >"$1" <<'EOF'
import json, os, secrets, subprocess, sys, time
import pymysql
from pymysql.cursors import DictCursor

CDIR = os.environ["LR_GALERA"]
ENV = {}
with open(os.path.join(CDIR, "cluster.env")) as f:
    for line in f:
        k, _, v = line.strip().partition("=")
        ENV[k] = v
PORT = int(ENV["GALERA_SQL_PORT"])
with open(os.path.join(CDIR, "lockrun.pw")) as f:
    PW = f.read().strip()
RES = "g-chk"
GRACE = 5.0  # lockrun's sweep grace, seconds


def say(*a):
    print(*a, flush=True)


def q(conn, sql, args=None):
    with conn.cursor() as cur:
        cur.execute(sql, args)
        rows = cur.fetchall()
        while cur.nextset():
            pass
    return rows


def account(n):
    """The EXECUTE-only account, over TCP to node n."""
    return pymysql.connect(host="127.0.0.%d" % n, port=PORT, user="lockrun", password=PW,
                           database="lockrun", autocommit=True, connect_timeout=5,
                           read_timeout=60, write_timeout=60, cursorclass=DictCursor)


def admin(n, causal=True):
    """The administrator on node n's socket, reading causally (or not)."""
    c = pymysql.connect(unix_socket=os.path.join(CDIR, "n%d" % n, "mysqld.sock"),
                        user=os.environ["LR_ADMIN_USER"], database="lockrun",
                        autocommit=True, connect_timeout=5, read_timeout=60,
                        cursorclass=DictCursor)
    q(c, "SET SESSION wsrep_sync_wait = %d" % (15 if causal else 0))
    return c


class Lag:
    """Node 1 made to lag, as tests 5 and 6 of 10-galera.bats do to node 2:
    a root session on node 1 with wsrep_on = OFF locks row appdb.lag 1 and
    sits in its transaction; node 2 then updates that row 4 times. Node 1's
    applier cannot brute-force abort a session that does not replicate, so
    it waits on the row, and the other updates occupy its second applier
    thread (wsrep_slave_threads = 2): whatever commits afterwards on other
    nodes is certified on node 1 but not applied there until stop()."""

    def __init__(self):
        a2 = admin(2)
        q(a2, "REPLACE INTO appdb.lag VALUES (1, 0)")
        q(admin(1), "SELECT v FROM appdb.lag WHERE id = 1")  # node 1 has it
        self.c = admin(1, causal=False)
        q(self.c, "SET SESSION wsrep_on = OFF")
        q(self.c, "BEGIN")
        q(self.c, "SELECT v FROM appdb.lag WHERE id = 1 FOR UPDATE")
        for _ in range(4):
            q(a2, "UPDATE appdb.lag SET v = v + 1 WHERE id = 1")
        v1 = q(admin(1, causal=False), "SELECT v FROM appdb.lag WHERE id = 1")[0]["v"]
        say("lagging node1=%d node2=%d" % (v1, q(a2, "SELECT v FROM appdb.lag WHERE id = 1")[0]["v"]))

    def stop(self):
        if self.c is not None:
            q(self.c, "ROLLBACK")
            self.c.close()
            self.c = None


def cmd_lagged(when):
    """A release on node 2 that node 1 has not applied yet: before node 1's
    check (the check's causal read must wait for it; before-causal: the
    application's BEGIN itself is causal), or between node 1's check and
    its COMMIT (certification must fail the COMMIT: node 1 cannot
    brute-force abort it, it has not applied the release). The lag ends
    3 s after the release."""
    import threading
    tag = "lag-%s" % when
    c1, c2 = account(1), account(2)
    lease, a = acquire(c1, 30000, "node1")
    say("acquired outcome=%s" % a["outcome"])
    gid, fence = a["grant_id"], a["fence"]
    if when == "during":
        q(c1, "BEGIN")
        r = check(c1, lease, gid)
        say("check live=%s holds=%s" % (r["live"], r["holds"]))
        q(c1, "INSERT INTO appdb.t (tag, fence) VALUES (%s, %s)", (tag, fence))
    lag = Lag()
    say("release released=%s" % release(c2, lease)["released"])
    # Node 1 still has the hold (a plain read there): else this proves nothing.
    say("node1 sees holds=%d" % q(admin(1, causal=False),
        "SELECT COUNT(*) AS n FROM lr_holds WHERE grant_id = %s", (gid,))[0]["n"])
    timer = threading.Timer(3.0, lag.stop)
    timer.start()
    t, took = time.monotonic(), None
    try:
        if when in ("before", "before-causal"):
            if when == "before-causal":
                # The application's own causal start (bit 1 covers BEGIN).
                q(c1, "SET SESSION wsrep_sync_wait = 1")
            q(c1, "BEGIN")
            r = check(c1, lease, gid)
            took = time.monotonic() - t
            say("check live=%s holds=%s" % (r["live"], r["holds"]))
            if r["live"]:
                # The answer was stale: the COMMIT must still fail.
                q(c1, "INSERT INTO appdb.t (tag, fence) VALUES (%s, %s)", (tag, fence))
                q(c1, "COMMIT")
                say("committed")
            else:
                q(c1, "ROLLBACK")
        else:
            q(c1, "COMMIT")
            took = time.monotonic() - t
            say("committed")
    except pymysql.MySQLError as e:
        took = time.monotonic() - t if took is None else took
        say("failed code=%d" % code(e))
    say("%s took %s" % ("check" if when.startswith("before") else "commit",
                        "the lag" if took > 2.5 else "no wait" if took < 2.0 else "%.1f s" % took))
    timer.join()
    say("rows %s" % " ".join(map(str, rows_everywhere(tag))))
    say("holds %s" % " ".join(map(str, holds_everywhere(gid))))
    return 0


def code(e):
    return e.args[0] if e.args and isinstance(e.args[0], int) else -1


def acquire(conn, ttl_ms, who):
    req, lease = secrets.token_hex(16), secrets.token_hex(16)
    row = q(conn, "CALL lockrun_acquire(%s, %s, %s, %s, 0, %s, %s, %s, %s)",
            ("mutex:" + RES, req, lease, ttl_ms, who, os.getpid(), "u", "11-check"))[0]
    return lease, row


def check(conn, lease, gid):
    # API 3: the lease (API 2 took the grant number, gid).
    return q(conn, "CALL lockrun_check(%s, %s)", (lease, RES))[0]


def release(conn, lease):
    return q(conn, "CALL lockrun_release(%s, 'exited', 0, NULL)", (lease,))[0]


def release_surely(n, lease):
    """Release on node n, again after a 1213 (the CALL is idempotent)."""
    for _ in range(20):
        try:
            return release(account(n), lease)["released"]
        except pymysql.MySQLError as e:
            if code(e) not in (1213, 1205, 1047):
                raise
            time.sleep(0.1)
    raise RuntimeError("release of %s kept failing" % lease)


def gtid_seqno(conn):
    g = q(conn, "SELECT WSREP_LAST_WRITTEN_GTID() AS g")[0]["g"]
    if isinstance(g, bytes):
        g = g.decode()
    return g, int(g.rsplit("-", 1)[1])


def rows_everywhere(tag):
    return [q(admin(n), "SELECT COUNT(*) AS n FROM appdb.t WHERE tag = %s", (tag,))[0]["n"]
            for n in (1, 2, 3)]


def holds_everywhere(gid):
    return [q(admin(n), "SELECT COUNT(*) AS n FROM lr_holds WHERE grant_id = %s", (gid,))[0]["n"]
            for n in (1, 2, 3)]


def cmd_order(when, end):
    tag = "%s-%s" % (when, end)
    ttl = 30000 if end == "release" else 1000
    c1, c2 = account(1), account(2)
    t0 = time.monotonic()
    lease, a = acquire(c1, ttl, "node1")
    say("acquired outcome=%s" % a["outcome"])
    if a["outcome"] != "granted":
        return 1
    gid, fence = a["grant_id"], a["fence"]
    other = None

    def ending():
        nonlocal other
        if end == "release":
            say("release released=%s" % release(c2, lease)["released"])
            return
        # Past the ttl and the sweep grace, by this clock: the server's
        # expiry is at most t0 + ttl.
        left = t0 + ttl / 1000 + GRACE + 0.5 - time.monotonic()
        if left > 0:
            time.sleep(left)
        if end == "sweep":
            p = subprocess.run([os.environ["LOCKRUNCTL"], "-c", os.environ["LR_ADMIN2_CONF"],
                                "-j", "sweep"], capture_output=True, text=True, timeout=60)
            if p.returncode != 0:
                say("sweep rc=%d %s" % (p.returncode, p.stderr.strip()))
                return
            j = json.loads(p.stdout)
            say("sweep expired_grants=%d expired_holds=%d" % (j["expired_grants"], j["expired_holds"]))
        else:
            other, r = acquire(c2, 30000, "node2")
            say("acquire2 outcome=%s fence=%s" % (
                r["outcome"], "next" if r["fence"] == fence + 1 else r["fence"]))

    # Node 1's transaction: each step says what it did, or where it failed.
    def step(name, sql, args=None):
        try:
            return q(c1, sql, args)
        except pymysql.MySQLError as e:
            say("failed at=%s code=%d" % (name, code(e)))
            try:
                q(c1, "ROLLBACK")
            except pymysql.MySQLError:
                pass
            return None

    def checked():
        try:
            r = check(c1, lease, gid)
        except pymysql.MySQLError as e:
            say("failed at=check code=%d" % code(e))
            q(c1, "ROLLBACK")
            return None
        say("check live=%s holds=%s fence=%s api=%s" % (
            r["live"], r["holds"], "own" if r["fence"] == fence else r["fence"], r["api"]))
        return r

    def insert():
        return step("insert", "INSERT INTO appdb.t (tag, fence) VALUES (%s, %s)", (tag, fence))

    def commit():
        if step("commit", "COMMIT") is not None:
            say("committed")

    if when == "before":
        ending()
        # Before, as node 1 sees it: a check inside a transaction gets no
        # causal wait (the lagging cases below are about that), so wait
        # until node 1 has applied the ending, without a causal read.
        seen = admin(1, causal=False)
        for _ in range(100):
            if q(seen, "SELECT COUNT(*) AS n FROM lr_holds WHERE grant_id = %s", (gid,))[0]["n"] == 0:
                break
            time.sleep(0.05)
        step("begin", "BEGIN")
        r = checked()
        if r is not None:
            if r["live"]:
                if insert() is not None:
                    commit()
            else:
                q(c1, "ROLLBACK")
                say("rolled back")
    elif when == "during":
        step("begin", "BEGIN")
        r = checked()
        if r is not None and r["live"]:
            # After a release the INSERT comes first and the COMMIT is what
            # meets it; a sweep waits seconds, so it meets the INSERT.
            if end == "release":
                if insert() is not None:
                    ending()
                    commit()
            else:
                ending()
                if insert() is not None:
                    commit()
    else:
        step("begin", "BEGIN")
        r = checked()
        if r is not None and r["live"] and insert() is not None:
            commit()
        ending()

    say("rows %s" % " ".join(map(str, rows_everywhere(tag))))
    say("holds %s" % " ".join(map(str, holds_everywhere(gid))))
    g = q(admin(1), "SELECT end_reason FROM lr_grants WHERE id = %s", (gid,))[0]
    say("grant ended=%s" % g["end_reason"])
    if other is not None:
        say("release2 released=%s" % release_surely(2, other))
    return 0


def wait_file(path, secs):
    end = time.monotonic() + secs
    while not os.path.exists(path):
        if time.monotonic() > end:
            return False
        time.sleep(0.0001)
    return True


def spin_until(t):
    while time.monotonic() < t:
        pass


def replays(conn):
    """This node's count of replayed local transactions."""
    return int(q(conn, "SELECT VARIABLE_VALUE AS v FROM information_schema.GLOBAL_STATUS"
                       " WHERE VARIABLE_NAME = 'WSREP_LOCAL_REPLAYS'")[0]["v"])


# A side's answer: "NAME ok SEQ SENT TOOK GTID replays=N [released=N]" or
# "NAME err CODE SENT TOOK". SEQ is "replayed" when the statement's commit
# left WSREP_LAST_WRITTEN_GTID() as it was before: the server sets it only
# for a commit that ran in its client's own session, not for one that was
# brute-force aborted after it was ordered and then replayed (seen in
# MariaDB 10.11; the value it keeps can even be another session's). Such a
# transaction was ordered AFTER a write set that conflicted with its locks
# and that it had not seen: here, the other side's.
def outcome(c, name, before, r0, sent, extra=""):
    took = (time.time() - sent) * 1000
    g, s = gtid_seqno(c)
    seq = "replayed" if (g, s) == before else str(s)
    say("%s ok %s %.6f %.3f %s replays=%d%s" % (name, seq, sent, took, g, replays(c) - r0, extra))


def cmd_app(lease, gid, tag, d, delay_us):
    c = account(1)
    r0, before = replays(c), gtid_seqno(c)
    q(c, "BEGIN")
    r = check(c, lease, int(gid))
    if not r["live"]:
        say("app notlive")
        return 1
    q(c, "INSERT INTO appdb.t (tag, fence) VALUES (%s, %s)", (tag, r["fence"]))
    open(os.path.join(d, "app.ready"), "w").close()
    if not wait_file(os.path.join(d, "go"), 60):
        say("app nogo")
        return 1
    spin_until(time.monotonic() + int(delay_us) / 1e6)
    sent = time.time()
    try:
        q(c, "COMMIT")
    except pymysql.MySQLError as e:
        say("app err %d %.6f %.3f" % (code(e), sent, (time.time() - sent) * 1000))
        return 0
    outcome(c, "app", before, r0, sent)
    return 0


def cmd_end(lease, d):
    c = account(2)
    release(c, None)  # parses the release's routines now, not in the race
    r0, before = replays(c), gtid_seqno(c)
    open(os.path.join(d, "end.ready"), "w").close()
    if not wait_file(os.path.join(d, "go"), 60):
        say("end nogo")
        return 1
    sent = time.time()
    try:
        r = release(c, lease)
    except pymysql.MySQLError as e:
        say("end err %d %.6f %.3f" % (code(e), sent, (time.time() - sent) * 1000))
        return 0
    outcome(c, "end", before, r0, sent, " released=%d" % r["released"])
    return 0


def side(d, name, args):
    out = open(os.path.join(d, name), "w")
    return subprocess.Popen([sys.executable, __file__, name] + args, stdout=out,
                            stderr=subprocess.STDOUT, close_fds=True), out


def cmd_race(rounds, workdir):
    rounds = int(rounds)
    c1 = account(1)
    # The clock: sequential commits through different nodes must show
    # increasing seqnos, else the comparison below means nothing.
    seqs = []
    for i, n in enumerate((1, 2, 3, 1, 2)):
        c = account(n)
        q(c, "INSERT INTO appdb.t (tag, fence) VALUES (%s, 0)", ("clock-%d" % i,))
        seqs.append(gtid_seqno(c)[1])
    say("clock %s" % " ".join(map(str, seqs)))
    if seqs != sorted(seqs) or len(set(seqs)) != len(seqs):
        say("race clock-not-increasing")
        return 1
    # How long a release through node 2 takes to answer, unraced: the
    # app's COMMIT is sent after a delay that sweeps 0 to 1.5 times this,
    # so that some rounds meet the release's commit head on (an app's
    # COMMIT sent with the CALL is certified long before the release's).
    lat = []
    c2 = account(2)
    release(c2, None)
    for _ in range(5):
        lease, a = acquire(c1, 30000, "probe")
        t = time.monotonic()
        release(c2, lease)
        lat.append(time.monotonic() - t)
    lat.sort()
    span_us = int(lat[2] * 1.5e6)
    say("release takes %.3f ms (median of 5); delays 0-%d us" % (lat[2] * 1000, span_us))

    n = {"both": 0, "app_only": 0, "end_only": 0, "neither": 0, "violations": 0, "bad": 0,
         "app_replayed": 0, "end_replayed": 0}
    for i in range(rounds):
        d = os.path.join(workdir, "r%d" % i)
        os.makedirs(d)
        tag = "race-%d" % i
        lease, a = acquire(c1, 30000, "node1")
        if a["outcome"] != "granted":
            say("round %d: acquire %s" % (i, a["outcome"]))
            n["bad"] += 1
            release_surely(2, lease)
            continue
        gid = a["grant_id"]
        delay = span_us * (i % 10) // 9
        pa, fa = side(d, "app", [lease, str(gid), tag, d, str(delay)])
        pe, fe = side(d, "end", [lease, d])
        ok = wait_file(os.path.join(d, "app.ready"), 60) and wait_file(os.path.join(d, "end.ready"), 60)
        open(os.path.join(d, "go"), "w").close()
        for p, f in ((pa, fa), (pe, fe)):
            try:
                p.wait(90)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            f.close()
        app = open(os.path.join(d, "app")).read().split()
        end = open(os.path.join(d, "end")).read().split()
        app_ok = app[:2] == ["app", "ok"]
        end_ok = end[:2] == ["end", "ok"] and end[-1] == "released=1"
        line = "round %d delay %d us: %s | %s" % (i, delay, " ".join(app), " ".join(end))
        if len(app) > 3 and len(end) > 3:
            line += " | commit sent %+.3f ms after the release" % (
                (float(app[3]) - float(end[3])) * 1000)
        if not ok or not (app_ok or app[:2] == ["app", "err"]) or not (end_ok or end[:2] == ["end", "err"]):
            n["bad"] += 1
            line += " | BAD: a side did not run its statement"
        else:
            for side_ in (app, end):
                if side_[1] == "err" and side_[2] != "1213":
                    n["bad"] += 1
                    line += " | BAD: error %s, not 1213" % side_[2]
            key = "both" if app_ok and end_ok else "app_only" if app_ok else \
                  "end_only" if end_ok else "neither"
            n[key] += 1
            n["app_replayed"] += app_ok and app[2] == "replayed"
            n["end_replayed"] += end_ok and end[2] == "replayed"
            if app_ok and end_ok:
                if app[2] == "replayed" and end[2] == "replayed":
                    n["bad"] += 1
                    line += " | BAD: both replayed, no order known"
                elif app[2] == "replayed":
                    n["violations"] += 1
                    line += " | VIOLATION: both succeeded, the app's COMMIT replayed after the release"
                elif end[2] == "replayed":
                    line += " | app first (the release replayed after it)"
                elif int(app[2]) < int(end[2]):
                    line += " | app first"
                else:
                    n["violations"] += 1
                    line += " | VIOLATION: both succeeded, the release ordered first"
        if not end_ok:
            release_surely(2, lease)
        rows = rows_everywhere(tag)
        if rows != [1 if app_ok else 0] * 3:
            n["bad"] += 1
            line += " | BAD: appdb rows %s" % rows
        if holds_everywhere(gid) != [0, 0, 0]:
            n["bad"] += 1
            line += " | BAD: holds left"
        say(line)
    say("race rounds=%d both=%d app_only=%d end_only=%d neither=%d replayed=%d/%d violations=%d bad=%d" % (
        rounds, n["both"], n["app_only"], n["end_only"], n["neither"], n["app_replayed"],
        n["end_replayed"], n["violations"], n["bad"]))
    return 0


def cmd_basics():
    c1, c3 = account(1), account(3)
    lease, a = acquire(c1, 30000, "node1")
    gid, fence = a["grant_id"], a["fence"]
    r = check(c3, lease, gid)
    say("node3 check live=%s holds=%s fence=%s api=%s" % (
        r["live"], r["holds"], "own" if r["fence"] == fence else r["fence"], r["api"]))
    r = check(c3, secrets.token_hex(16), 0)
    say("unknown check live=%s holds=%s api=%s" % (r["live"], r["holds"], r["api"]))
    # The check above (autocommit) wrote checks = 1. One inside a
    # transaction that rolls back writes nothing; two committed ones, on
    # nodes 1 and 3, add 2: 3 on every node.
    q(c1, "BEGIN")
    check(c1, lease, gid)
    q(c1, "ROLLBACK")
    for c in (c1, c3):
        # Node 3 may not have applied node 1's commit yet when its own
        # transaction reads the row: certification then refuses it (1213),
        # and the whole transaction is retried, as lockrun(1) says.
        for attempt in range(5):
            try:
                q(c, "BEGIN")
                check(c, lease, gid)
                q(c, "COMMIT")
                break
            except pymysql.err.OperationalError as e:
                if e.args[0] != 1213 or attempt == 4:
                    raise
                q(c, "ROLLBACK")
    say("checks %s" % " ".join(str(q(admin(n), "SELECT checks FROM lr_holds WHERE grant_id = %s",
                                     (gid,))[0]["checks"]) for n in (1, 2, 3)))
    say("release released=%s" % release(account(2), lease)["released"])
    return 0


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    f = {"order": cmd_order, "lagged": cmd_lagged, "race": cmd_race, "app": cmd_app,
         "end": cmd_end, "basics": cmd_basics}[cmd]
    sys.exit(f(*args))


main()
EOF
}

@test "check on Galera: api 3 on any node, live 0 for an unknown lease, checks + 1 only when committed" {
	run py basics
	assert_success
	assert_line "node3 check live=1 holds=1 fence=own api=3"
	assert_line "unknown check live=0 holds=0 api=3"
	assert_line "checks 3 3 3"
	assert_line "release released=1"
}

@test "before: a release on node 2 before node 1's check: the check answers live 0" {
	run py order before release
	assert_success
	assert_line "acquired outcome=granted"
	assert_line "release released=1"
	assert_line --regexp "^check live=0 holds=0 "
	assert_line "rolled back"
	assert_line "rows 0 0 0"
	assert_line "holds 0 0 0"
	assert_line "grant ended=exited"
}

@test "during: a release on node 2 between node 1's check and COMMIT: the COMMIT fails with 1213, no row" {
	run py order during release
	assert_success
	assert_line "acquired outcome=granted"
	assert_line "check live=1 holds=1 fence=own api=3"
	assert_line "release released=1"
	assert_line --regexp "^failed at=(insert|commit) code=1213$"
	refute_line "committed"
	assert_line "rows 0 0 0"
	assert_line "holds 0 0 0"
	assert_line "grant ended=exited"
}

@test "before, node 1 lagging: the check in an open transaction answers live 0, or the COMMIT fails with 1213" {
	run py lagged before
	assert_success
	assert_line "acquired outcome=granted"
	assert_line "lagging node1=0 node2=4"
	assert_line "release released=1"
	assert_line "node1 sees holds=1"
	# Whatever the check answered, nothing was committed.
	refute_line "committed"
	assert_line "rows 0 0 0"
	assert_line "holds 0 0 0"
	# Inside a transaction the application opened without causal reads,
	# MariaDB 10.11 does not make the CALL's statements wait for the
	# node (seen: "check live=1 holds=1", "check took no wait"): the
	# check may read the lagging node's stale hold, and then its write
	# fails the COMMIT in certification. Either way nothing committed
	# after the grant ended. (The next test: with a causal BEGIN the
	# check waits and answers live 0.)
	assert_line --regexp '^(check live=0 holds=0|failed code=1213)$'
}

@test "before, node 1 lagging, the application's BEGIN causal (wsrep_sync_wait = 1): live 0" {
	run py lagged before-causal
	assert_success
	assert_line "lagging node1=0 node2=4"
	assert_line "release released=1"
	assert_line "node1 sees holds=1"
	assert_line "check live=0 holds=0"
	assert_line "check took the lag"
	assert_line "rows 0 0 0"
	assert_line "holds 0 0 0"
}

@test "during, node 1 lagging: certification fails node 1's COMMIT with 1213, no row" {
	run py lagged during
	assert_success
	assert_line "check live=1 holds=1"
	assert_line "lagging node1=0 node2=4"
	assert_line "release released=1"
	assert_line "node1 sees holds=1"
	assert_line "failed code=1213"
	refute_line "committed"
	assert_line "rows 0 0 0"
	assert_line "holds 0 0 0"
}

@test "after: node 1 commits, then the release on node 2 succeeds" {
	run py order after release
	assert_success
	assert_line "check live=1 holds=1 fence=own api=3"
	assert_line "committed"
	assert_line "release released=1"
	assert_line "rows 1 1 1"
	assert_line "holds 0 0 0"
	assert_line "grant ended=exited"
}

@test "before: lockrunctl sweep on node 2 ended the expired grant before node 1's check: live 0" {
	run py order before sweep
	assert_success
	assert_line "sweep expired_grants=1 expired_holds=1"
	assert_line --regexp "^check live=0 holds=0 "
	assert_line "rolled back"
	assert_line "rows 0 0 0"
	assert_line "holds 0 0 0"
	assert_line "grant ended=expired"
}

@test "during: lockrunctl sweep on node 2 after node 1's check: node 1's transaction fails with 1213, no row" {
	run py order during sweep
	assert_success
	assert_line "check live=1 holds=1 fence=own api=3"
	assert_line "sweep expired_grants=1 expired_holds=1"
	assert_line --regexp "^failed at=(insert|commit) code=1213$"
	refute_line "committed"
	assert_line "rows 0 0 0"
	assert_line "holds 0 0 0"
	assert_line "grant ended=expired"
}

@test "during: an acquire on node 2 sweeps the expired hold after node 1's check: 1213, no row" {
	run py order during acquire
	assert_success
	assert_line "check live=1 holds=1 fence=own api=3"
	assert_line "acquire2 outcome=granted fence=next"
	assert_line --regexp "^failed at=(insert|commit) code=1213$"
	refute_line "committed"
	assert_line "rows 0 0 0"
	assert_line "holds 0 0 0"
	assert_line "grant ended=expired"
	assert_line "release2 released=1"
}

@test "after: node 1 commits, then lockrunctl sweep on node 2 ends the expired grant" {
	run py order after sweep
	assert_success
	assert_line "check live=1 holds=1 fence=own api=3"
	assert_line "committed"
	assert_line "sweep expired_grants=1 expired_holds=1"
	assert_line "rows 1 1 1"
	assert_line "holds 0 0 0"
	assert_line "grant ended=expired"
}

@test "race: 30 COMMITs on node 1 against releases on node 2: both succeed only with the COMMIT ordered first" {
	run py race 30 "$BATS_TEST_TMPDIR"
	printf '# %s\n' "${lines[@]}" >&3
	assert_success
	assert_line --regexp "^race rounds=30 .* violations=0 bad=0$"
}
