#!/usr/bin/env python3
"""The fault campaign's workload and nemesis (tests/run-nemesis runs it).

  nemesis.py run --seed N --duration S --out DIR
                 [--topology single|replication|galera|group]
                 (the environment names the programs, configs, proxy and
                 servers: see tests/run-nemesis)
  nemesis.py child DIR KIND RESOURCE PERMITS SECONDS RUN [FLAGS]
                 what a granted lockrun runs: records enter, a heartbeat
                 every 0.1 s and leave, and writes to the fenced store
                 while inside; FLAGS: t (ignores SIGTERM), fN (forks N
                 processes into its group, which beat too)

Client loops, several per simulated host (each lockrun runs in a UTS
namespace with the host's name and the host's own queue directory), take a
mutex, a semaphore of capacity 3 (1 or 2 permits), both sides of a
read-write lock, an --id key and an --id key with --once-per, each host
through its own lrproxy in front of each server (NM_PROXY_FIFOS: the
proxies' control FIFOs, hosts apart by spaces, a host's nodes by commas),
with --ttl 3, every --kill-after the start-up check allows, --on-lost kill
or ignore, commands of up to 12 s (beyond ttl + the sweep grace), some
ignoring SIGTERM, some forking; each run's lockrun's stderr is kept in
DIR/err/RUN.err. Meanwhile a nemesis, drawn from the seed, injects faults
that overlap and heals each after a while: lockrun stopped (SIGSTOP) or
killed, the command killed, the server paused or restarted, every host's
connections black-holed, delayed or cut; one host's path partitioned,
delayed or cut, its answers lost (its statements still reach the server),
the answer to its next acquire, renewal or release lost, or its next
renewal held past its timeout; max-ttl changed, a resource paused, a
grant force-released, a sweep, and the lockruns' CLOCK_MONOTONIC
stopped for a while as by a suspend (lrclock, when tests/run-nemesis
names it: their lease timers run on CLOCK_BOOTTIME, which goes on; host
nm-h1's lockruns also see a wall clock an hour ahead, which they may use
for nothing but their log lines; host nm-h2's lockruns run their clocks
at LR_CLOCK_RATE 0.992, inside the 1% lockrun(1) allows for, and a few
runs at 0.9, beyond it). On a primary and its replica
(--topology replication) the nemesis also changes the
topology, one step at a time: the replica's applier stopped (it lags) and
restarted, the replica made writable for a while, a fail-over (the primary
killed, the replica promoted, caught up or not), the old primary back as
the new one's replica (the next fail-over is then a fail-back); node 2's
clock runs behind (tests/run-nemesis sets it). On a 3-node Galera cluster
(--topology galera) it pauses (SIGSTOP), kills and restarts one node at
a time, so that the cluster keeps its quorum, freezes the writer node
(the one every host that lists all nodes writes on) and makes it the
donor of another node's full state transfer; each host's lockruns run in
a network namespace of the host's own (NM_NETNS: their files, in host
order), where its proxies listen on the nodes' own addresses and port, as
lockrun's writer match needs; two hosts list every
node (lockrun's writer node), the third names one node only, so that
writes also come from a second node and are certified against the
writer's. On a MySQL Group Replication group of three members
(--topology group) it kills, freezes (SIGSTOP) or cuts off (its group
communication threads stopped) the primary until the others elect a new
one and a while longer, kills a secondary, or moves the primary
(group_replication_set_as_primary); each member is back in the group
before the next step. The hosts list every member, each starting from
another; there are no proxies, so no host faults. The run ends with a
quiet period in which every client must get its lock.

Everything that happened goes to DIR as JSON lines, for nemesis_check.py,
which shares no code with this file or with lockrun:
  records.jsonl  the children's own enter/beat/leave (CLOCK_MONOTONIC and wall
                 time, host, token, grant, lockrun's pid)
  store.jsonl    the fenced store's answers: accept or reject per write
  ops.jsonl      each lockrun run: client, host, items, start, end, status,
                 its options, clock rate and stderr file
  faults.jsonl   each fault: kind, target, start and end
The same seed draws the same schedule of operations and faults (what the
servers and the kernel make of it is not replayed).
"""

import fcntl
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time

MONO = time.CLOCK_MONOTONIC
# Faults on one host's path (its own proxy) while the others go on.
HOST_FAULTS = ("partition-host", "delay-host", "cut-host", "drop-replies-host", "lose-answer",
               "hold-renewal")


def now():
    return time.clock_gettime(MONO)


def append(path, obj):
    """One JSON line, appended under an exclusive lock: lines of several
    processes never interleave."""
    line = (json.dumps(obj, sort_keys=True) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, line)
    finally:
        os.close(fd)


# ------------------------------------------------------------------ child

def store_write(out, resource, token, grant):
    """The fenced store: remembers the highest token it accepted per
    resource and the grant it came from, and rejects a lower one, or an
    equal one from another grant (the storage-side check: the token of a
    mutex, a write lock or an --id key is unique to its grant)."""
    path = os.path.join(out, "store", resource)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        raw = os.pread(fd, 64, 0).decode().split()
        high, high_grant = (int(raw[0]), int(raw[1])) if raw else (0, 0)
        ok = token > high or (token == high and grant == high_grant)
        if ok and token > high:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{token} {grant}".encode(), 0)
        append(os.path.join(out, "store.jsonl"),
               {"resource": resource, "token": token, "grant": grant, "high": high,
                "high_grant": high_grant, "accepted": ok, "mono": now(), "wall": time.time()})
    finally:
        os.close(fd)


def child(out, kind, resource, permits, secs, run="", flags=""):
    """The command: records enter, a heartbeat every 0.1 s (wall time and
    CLOCK_MONOTONIC: when it was still alive) and leave. FLAGS: "t" ignores
    SIGTERM (only the SIGKILL after --kill-after stops it), "fN" forks N
    processes into its process group that beat too, until their time is
    up, a SIGTERM, or their parent is gone."""
    token = int(os.environ.get("LOCKRUN_FENCE", "0") or 0)
    grant = int(os.environ.get("LOCKRUN_GRANT", "0") or 0)
    base = {"kind": kind, "resource": resource, "permits": int(permits), "token": token,
            "grant": grant, "host": os.uname().nodename, "lockrun": os.getppid(),
            "pid": os.getpid(), "window": os.environ.get("LOCKRUN_WINDOW"), "run": run,
            "secs": float(secs)}
    rec = os.path.join(out, "records.jsonl")
    stop = []
    if "t" in flags:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    append(rec, dict(base, ev="enter", mono=now(), wall=time.time()))
    exclusive = kind in ("mutex", "write", "key")
    end = now() + float(secs)
    kids = []
    for _ in range(int(flags.split("f")[1][:1]) if "f" in flags else 0):
        pid = os.fork()
        if pid == 0:
            parent, me = os.getppid(), dict(base, pid=os.getpid(), role="fork")
            while not stop and now() < end and os.getppid() == parent:
                append(rec, dict(me, ev="beat", mono=now(), wall=time.time()))
                time.sleep(0.1)
            os._exit(0)
        kids.append(pid)
    while not stop and now() < end:
        if exclusive:
            store_write(out, resource, token, grant)
        append(rec, dict(base, ev="beat", mono=now(), wall=time.time()))
        time.sleep(0.1)
    for pid in kids:
        os.waitpid(pid, 0)
    append(rec, dict(base, ev="leave", mono=now(), wall=time.time(), stopped=bool(stop)))
    return 143 if stop else 0


# ------------------------------------------------------------------ run

# What a client asks for: (kind, lockrun arguments, resource, permits).
def pick_item(rng):
    r = rng.random()
    if r < 0.30:
        return "mutex", ["-x", "nm-mutex"], "nm-mutex", 1
    if r < 0.55:
        n = rng.choice([1, 1, 2])
        return "semaphore", ["-s", f"nm-sem:{n}"], "nm-sem", n
    if r < 0.70:
        return "read", ["--read", "nm-rw"], "nm-rw", 1
    if r < 0.82:
        return "write", ["--write", "nm-rw"], "nm-rw", 1
    if r < 0.92:
        return "key", ["--id", "nm-key"], "id:nm-key", 1
    return "once", ["--id", "nm-once", "--once-per", "20s"], "id:nm-once", 1


class Campaign:
    def __init__(self, seed, duration, out, clients, hosts, topology):
        self.seed, self.duration, self.out = seed, duration, out
        self.nclients, self.nhosts = clients, hosts
        self.topology = topology
        # Replication: which node is the primary, and what the other one
        # is: "replica", "lagging" (its applier stopped), "down" (killed)
        # or "out" (back, read-only, replicating from nobody: it diverged).
        self.primary, self.other = 1, "replica"
        # Galera: the node under a fault now (paused, down or restarting),
        # if any; lockrunctl goes to another.
        self.cluster = os.environ.get("LR_GALERA")
        self.sick = None
        # Group Replication: the group's directory (tests/helpers/group.bash).
        self.group = os.environ.get("LR_GROUP")
        self.lockrun = os.environ["LOCKRUN"]
        self.lockrunctl = os.environ["LOCKRUNCTL"]
        self.admin = os.environ["LR_ADMIN_CONFIG"]
        # Each host's proxies' control FIFOs (one per server node, joined
        # by commas), in host order (nm-h0 first).
        self.fifos = [x.split(",") for x in os.environ.get("NM_PROXY_FIFOS", "").split()]
        # Each host's network namespace, if the hosts have their own.
        self.netns = os.environ.get("NM_NETNS", "").split()
        self.server_dir = os.environ.get("LR_DB")
        self.helpers = os.path.join(os.environ["LR_SRC"], "tests/helpers/server.bash")
        self.uts = os.environ.get("NM_UTS", "1") == "1"
        # lrclock.so, preloaded into every lockrun: the freeze-clock fault
        # stops their CLOCK_MONOTONIC while this file exists.
        self.shim = os.environ.get("NM_CLOCK_SHIM")
        self.freeze = os.path.join(out, "clock.freeze")
        self.freezing = False
        self.live = {}  # lockrun pid -> Popen, for the nemesis to pick from
        self.sick_hosts = set()  # hosts under a host fault now
        self.lock = threading.Lock()
        self.t0 = now()
        self.quiet_at = self.t0 + duration
        self.done = threading.Event()
        os.makedirs(os.path.join(out, "store"), exist_ok=True)
        os.makedirs(os.path.join(out, "err"), exist_ok=True)

    def log_fault(self, kind, target, start, end=None, **more):
        append(os.path.join(self.out, "faults.jsonl"),
               dict(more, kind=kind, target=target, start=start, end=end if end is not None else now()))

    # --- clients --------------------------------------------------------

    def client(self, i):
        rng = random.Random(f"{self.seed}:client:{i}")
        host = f"nm-h{i % self.nhosts}"
        conf = os.path.join(self.out, f"{host}.conf")
        ops = os.path.join(self.out, "ops.jsonl")
        n = 0
        while True:
            quiet = now() >= self.quiet_at
            kind, args, resource, permits = pick_item(rng)
            run, n = f"c{i}-{n}", n + 1
            # Mostly short; some outlive a lease (ttl 3 s), so that a
            # frozen or cut-off lockrun has a command to stop, and some
            # ttl + the sweep grace (8 s), so that another host can be
            # granted the lock while a cut-off holder's command runs.
            r = rng.random()
            secs = round(rng.uniform(0.05, 0.6) if r < 0.7 else rng.uniform(1, 5) if r < 0.85
                         else rng.uniform(6, 12), 3)
            # In the quiet period a grant may wait for a fail-over's
            # quarantine, and on a node whose clock is behind, longer.
            patience = "60" if self.topology == "single" else "240"
            # Every --kill-after the start-up check allows at ttl 3 s
            # (0.99 * 3 - 0.25 - kill_after >= 2: at most 0.72 s).
            kill_after = rng.choice(["0.1", "0.3", "0.5", "0.7"])
            on_lost = "ignore" if rng.random() < 0.1 and not quiet else "kill"
            # Commands that ignore SIGTERM, and that fork into their
            # process group.
            flags = ("t" if rng.random() < 0.2 else "") + (
                f"f{rng.choice([1, 2])}" if rng.random() < 0.3 else "")
            # Host nm-h2's lockruns' clocks run slow within the 1% margin
            # lockrun(1) allows for; a few runs anywhere far beyond it.
            rate = None
            if self.shim:
                rate = 0.9 if rng.random() < 0.04 and not quiet else \
                    0.992 if host == "nm-h2" else None
            cmd = [self.lockrun, "-c", conf, "--ttl", "3", "--kill-after", kill_after,
                   "--on-lost", on_lost, "-w",
                   patience if quiet else str(rng.choice([1, 5, 20])), *args, "--",
                   sys.executable, os.path.abspath(__file__), "child", self.out, kind, resource,
                   str(permits), str(secs), run, flags]
            if self.shim:
                # Set by env for lockrun alone: the shim removes them from
                # its own environment, so a wrapper must not load it.
                cmd = ["env", f"LD_PRELOAD={self.shim}", f"LR_CLOCK_FREEZE={self.freeze}",
                       *(["LR_CLOCK_SHIFT=3600"] if host == "nm-h1" else []),
                       *([f"LR_CLOCK_RATE={rate}"] if rate else []), *cmd]
            if self.uts:
                cmd = ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', host, *cmd]
            if self.netns:
                cmd = ["nsenter", f"--net={self.netns[i % self.nhosts]}", *cmd]
            start = now()
            errpath = os.path.join(self.out, "err", f"{run}.err")
            with open(errpath, "wb") as err:
                p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=err)
            # With nsenter and unshare, the pid is sh's until it execs
            # lockrun: the same.
            with self.lock:
                self.live[p.pid] = p
            rc = p.wait()
            with self.lock:
                self.live.pop(p.pid, None)
            append(ops, {"client": i, "host": host, "kind": kind, "resource": resource,
                         "permits": permits, "pid": p.pid, "start": start, "end": now(),
                         "status": rc, "quiet": quiet, "run": run, "secs": secs,
                         "kill_after": float(kill_after), "on_lost": on_lost, "flags": flags,
                         "rate": rate, "stderr": os.path.relpath(errpath, self.out)})
            if quiet:
                return
            time.sleep(rng.uniform(0, 0.3))

    # --- nemesis --------------------------------------------------------

    def sh(self, script, check=False):
        repl = os.path.join(os.path.dirname(self.helpers), "replication.bash")
        galera = os.path.join(os.path.dirname(self.helpers), "galera.bash")
        group = os.path.join(os.path.dirname(self.helpers), "group.bash")
        cmd = ["bash", "-c", f'source "{self.helpers}"; source "{repl}"; '
               f'source "{galera}"; source "{group}"; {script}']
        try:
            return subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True,
                                  text=True, check=check, timeout=300)
        except subprocess.TimeoutExpired:
            # A step that hangs (a node that never rejoins on a loaded
            # machine) fails like any other, and the nemesis goes on: an
            # exception here ended the topology's thread for good.
            return subprocess.CompletedProcess(cmd, 124, "", "timed out after 300 s")

    def ctl(self, *args):
        admin = self.admin
        if self.topology == "replication":
            admin = os.path.join(os.environ["LR_REPL"], f"admin{self.primary}.conf")
        elif self.topology == "galera":
            node = next(n for n in (1, 2, 3) if n != self.sick)
            admin = os.path.join(self.cluster, f"admin{node}.conf")
        elif self.topology == "group":
            r = self.sh("gr_primary")
            node = r.stdout.strip() if r.returncode == 0 and r.stdout.strip() else "1"
            admin = os.path.join(self.group, f"admin{node}.conf")
        r = subprocess.run([self.lockrunctl, "-c", admin, *args], stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, timeout=60)
        return r.returncode, (r.stdout + r.stderr).strip()

    def proxy(self, command, host=None):
        """A command to host HOST's proxy (an index), or to every host's."""
        for h, fifos in enumerate(self.fifos):
            for fifo in fifos if host is None or h == host else []:
                with open(fifo, "w") as f:
                    f.write(command + "\n")

    def fired(self, host):
        """How many drop-reply and hold-query traps host HOST's proxies
        have fired so far (their control logs say each)."""
        n = 0
        for fifo in self.fifos[host]:
            try:
                with open(fifo + ".log") as f:
                    n += sum(ln.startswith("fired ") for ln in f)
            except OSError:
                pass
        return n

    def pick_live(self, rng):
        with self.lock:
            pids = sorted(self.live)
        return rng.choice(pids) if pids else None

    def children_of(self, pid):
        try:
            with open(f"/proc/{pid}/task/{pid}/children") as f:
                return [int(x) for x in f.read().split()]
        except OSError:
            return []

    @staticmethod
    def sig(pid, signo):
        """A signal to a process that may be gone (killed by another
        fault meanwhile, or ended)."""
        try:
            os.kill(pid, signo)
            return True
        except ProcessLookupError:
            return False

    def fault(self, rng, kind):
        """Injects one fault and heals it (in a thread of its own, so that
        faults overlap); logs it when healed."""
        start = now()
        hold = round(rng.uniform(1, 7), 2)
        if kind == "stop-lockrun":
            pid = self.pick_live(rng)
            if pid is None:
                return
            if not self.sig(pid, signal.SIGSTOP):
                return
            time.sleep(hold)
            self.sig(pid, signal.SIGCONT)
            self.log_fault(kind, pid, start)
        elif kind == "kill-lockrun":
            pid = self.pick_live(rng)
            if pid is None:
                return
            if self.sig(pid, signal.SIGKILL):
                self.log_fault(kind, pid, start)
        elif kind == "kill-child":
            pid = self.pick_live(rng)
            kids = self.children_of(pid) if pid else []
            if not kids:
                return
            if self.sig(kids[0], signal.SIGKILL):
                self.log_fault(kind, pid, start, child=kids[0])
        elif kind == "pause-server":
            self.sh(f'lr_server_pause "{self.server_dir}"')
            time.sleep(hold)
            self.sh(f'lr_server_resume "{self.server_dir}"')
            self.log_fault(kind, "server", start)
        elif kind == "restart-server":
            r = self.sh(f'lr_server_restart "{self.server_dir}" >/dev/null')
            self.log_fault(kind, "server", start, status=r.returncode)
        elif kind == "blackhole":
            self.proxy("blackhole on")
            time.sleep(hold)
            self.proxy("blackhole off")
            self.log_fault(kind, "proxy", start)
        elif kind == "delay":
            ms = rng.choice([20, 100, 400])
            self.proxy(f"delay {ms}")
            time.sleep(hold)
            self.proxy("delay 0")
            self.log_fault(kind, "proxy", start, ms=ms)
        elif kind == "cut":
            self.proxy("kill-all")
            self.log_fault(kind, "proxy", start)
        elif kind in HOST_FAULTS:
            self.host_fault(rng, kind, start, hold)
        elif kind == "max-ttl":
            # Replication: short, so that a fail-over's quarantine is too.
            v = rng.choice(["5s", "10s", "1m", "5m"] if self.topology != "replication"
                           else ["5s", "8s", "10s"])
            rc, msg = self.ctl("max-ttl", v)
            self.log_fault(kind, v, start, status=rc, message=msg[-200:])
        elif kind == "pause-resource":
            res = rng.choice(["nm-mutex", "nm-sem", "nm-rw"])
            rc, msg = self.ctl("pause", res, "--reason", "nemesis")
            time.sleep(hold)
            rc2, msg2 = self.ctl("resume", res)
            self.log_fault(kind, res, start, status=rc, resumed=rc2)
        elif kind == "force-release":
            # A grant of a run that is inside right now, preferably one
            # with more than a lease of its work still to do: a lockrun
            # that took the server's "not renewed" for renewed would let
            # it run past its lease.
            rec = os.path.join(self.out, "records.jsonl")
            inside = {}
            try:
                with open(rec) as f:
                    for ln in f:
                        r = json.loads(ln)
                        key = (r["grant"], r["pid"])
                        if r["ev"] == "enter":
                            inside[key] = r
                        elif r["ev"] == "leave":
                            inside.pop(key, None)
            except OSError:
                pass
            grants = sorted({k[0] for k in inside if k[0]})
            if not grants:
                return
            long = sorted({k[0] for k, r in inside.items()
                           if k[0] and r["mono"] + r.get("secs", 0) - now() > 4})
            grants = long or grants
            g = rng.choice(grants)
            rc, msg = self.ctl("release", str(g), "--reason", "nemesis")
            self.log_fault(kind, g, start, status=rc, message=msg[-200:])
        elif kind == "sweep":
            rc, msg = self.ctl("sweep")
            self.log_fault(kind, "db", start, status=rc)
        elif kind == "freeze-clock":
            # Every lockrun's CLOCK_MONOTONIC (libuv's timers) stands still,
            # longer than a lease at times; one fault of the kind at a
            # time, as the file is shared.
            with self.lock:
                if self.freezing:
                    return
                self.freezing = True
            open(self.freeze, "w").close()
            time.sleep(hold)
            os.unlink(self.freeze)
            with self.lock:
                self.freezing = False
            self.log_fault(kind, "lockruns", start)

    def host_fault(self, rng, kind, start, hold):
        """A fault on one host's path while the others go on: that host
        cut off (its proxy black-holed), slowed, its connections cut, its
        answers lost (what it sends still reaches the server), or one
        answer lost at a chosen moment: the reply to an acquire, a
        renewal or a release (a hand-off when another run waits), or a
        renewal held at the proxy past its ttl/6 timeout. One fault at a
        time per host: the heal of one must not end another."""
        h = rng.randrange(len(self.fifos))
        with self.lock:
            if h in self.sick_hosts:
                return
            self.sick_hosts.add(h)
        target, more = f"nm-h{h}", {}
        try:
            if kind == "partition-host":
                # Up to longer than ttl + the sweep grace: another host
                # gets the lock while this one's holder is cut off.
                hold = max(1.0, min(round(rng.uniform(2, 12), 2), self.quiet_at - 2 - now()))
                self.proxy("blackhole on", h)
                time.sleep(hold)
                self.proxy("blackhole off", h)
            elif kind == "delay-host":
                more["ms"] = rng.choice([100, 400, 1200])
                self.proxy(f"delay {more['ms']}", h)
                time.sleep(hold)
                self.proxy("delay 0", h)
            elif kind == "cut-host":
                self.proxy("kill-all", h)
            elif kind == "drop-replies-host":
                self.proxy("drop-replies on", h)
                time.sleep(hold)
                self.proxy("drop-replies off", h)
            elif kind == "lose-answer":
                more["call"] = rng.choice(["acquire", "renew", "release"])
                fired = self.fired(h)
                self.proxy(f"drop-reply CALL lockrun_{more['call']}(", h)
                time.sleep(hold)
                # Whether a trap fired meanwhile (one armed earlier on
                # another node's proxy of this host may be the one).
                more["fired"] = self.fired(h) - fired
            elif kind == "hold-renewal":
                # Longer than the renewal's timeout (ttl/6 = 0.5 s), up to
                # beyond the lease.
                more["ms"] = rng.choice([700, 1500, 3500])
                fired = self.fired(h)
                self.proxy(f"hold-query CALL lockrun_renew( {more['ms']}", h)
                time.sleep(hold)
                more["fired"] = self.fired(h) - fired
        finally:
            with self.lock:
                self.sick_hosts.discard(h)
        self.log_fault(kind, target, start, **more)

    def topology_step(self, rng):
        """One change of the primary and its replica, chosen among those
        that fit their state; one at a time (they build on each other).
        A fail-over kills the primary and promotes the replica, caught up
        or not: a lagging one loses what it had not applied, grants and
        renewals included, and the old primary can then not follow it
        (GTID strict mode): it stays out, read-only. A caught-up one can
        be followed: the old primary comes back as the new one's replica,
        and may lag in turn before the next fail-over (a fail-back)."""
        p, o = self.primary, 3 - self.primary
        start = now()
        if self.other == "replica":
            kind = rng.choices(["lag", "writable-replica", "failover"], [3, 1, 2])[0]
        elif self.other == "lagging":
            # Not made writable while it lags: with its applier stopped
            # no routine can tell it from a primary (doc/production.md:
            # keep replicas read-only; doctor fails it), and it would
            # grant beside the real one, a limit the campaign found on
            # MySQL (seed 401).
            kind = rng.choices(["catch-up", "failover"], [1, 3])[0]
        elif self.other == "down":
            kind = "rejoin"
        else:
            return
        if kind == "lag":
            self.sh("repl_stop_applier")
            self.other = "lagging"
        elif kind == "catch-up":
            self.sh("repl_start_applier")
            self.other = "replica"
        elif kind == "writable-replica":
            # Longer than a new epoch's quarantine (max-ttl + 5 s).
            self.sh(f'repl_sql {o} "SET GLOBAL read_only = OFF"')
            time.sleep(rng.uniform(10, 25))
            self.sh(f'repl_sql {o} "SET GLOBAL read_only = ON"')
        elif kind == "failover":
            # A replica that applies is let catch up first (a crash it
            # had everything of: the old primary can follow it later); a
            # lagging one is promoted as it is, and what it lacks is lost.
            waited = self.other == "replica" and self.sh("repl_wait_caught_up 20").returncode == 0
            self.sh("repl_kill_primary")
            r = self.sh("repl_promote")
            self.primary, self.other = o, "down"
            self.log_fault(kind, f"node {p} -> node {o}", start, caught_up=waited,
                           status=r.returncode)
            return
        elif kind == "rejoin":
            r = self.sh(f"repl_restart_old_primary_read_only && repl_make_replica {o} current_pos")
            self.other = "replica" if r.returncode == 0 else "out"
            if self.other == "out":
                # Diverged: read-only and replicating from nobody, for good.
                self.sh(f"repl_detach {o}")
            self.log_fault(kind, f"node {o}", start, status=r.returncode, state=self.other)
            return
        self.log_fault(kind, f"node {o}", start)

    def writer_node(self):
        """The Galera node lockrun's writer rule picks for a host that
        lists every node: the first member of wsrep_incoming_addresses
        (127.0.0.N:port), as a node that answers reports it; None if none
        answers."""
        for n in (1, 2, 3):
            r = self.sh(f'lr_galera_sql "{self.cluster}" {n} '
                        '"SHOW GLOBAL STATUS LIKE \'wsrep_incoming_addresses\'"')
            m = re.search(r"127\.0\.0\.(\d+):", r.stdout) if r.returncode == 0 else None
            if m:
                return int(m.group(1))
        return None

    def galera_step(self, rng):
        """One node fault on the Galera cluster, healed before the next:
        frozen (SIGSTOP) for a while, any node or the writer node;
        another node rejoined by a full state transfer from the writer
        node (its donor); cut off from the other two (Galera's
        gmcast.isolate: its clients still reach it, and it refuses them
        as a non-primary component); killed, left down, and restarted (it
        rejoins by a state transfer); or stopped and started again. One
        node at a time, so two of three always form the primary
        component."""
        n = rng.choice([1, 2, 3])
        kind = rng.choices(["pause-node", "pause-writer", "partition-node", "kill-node",
                            "restart-node", "donor-writer"], [2, 2, 2, 2, 1, 1])[0]
        hold = round(rng.uniform(2, 12), 2)
        more = {}
        if kind in ("pause-writer", "donor-writer"):
            # The node every host that lists all nodes writes on: the
            # first member the cluster reports (a hung host under them).
            w = self.writer_node() or n
            n = w if kind == "pause-writer" else rng.choice([m for m in (1, 2, 3) if m != w])
            more = {} if kind == "pause-writer" else {"donor": w}
        start = now()
        self.sick = n
        if kind == "donor-writer":
            # Node n rejoins by a full state transfer (its state file
            # gone) from the writer node: an rsync donor blocks writes
            # for the whole copy.
            node = f'"$(lr_galera_node "{self.cluster}" {n})"'
            self.sh(f'lr_server_stop {node}; rm -f {node}/data/grastate.dat')
            r = self.sh(f'_lr_galera_env "{self.cluster}"; (lr_close_fds; '
                        f'lr_galera_node_start "{self.cluster}" {n} '
                        f'--wsrep-sst-donor=node{more["donor"]}) >/dev/null')
            more["status"] = r.returncode
        elif kind in ("pause-node", "pause-writer"):
            self.sh(f'lr_galera_pause "{self.cluster}" {n}')
            time.sleep(hold)
            self.sh(f'lr_galera_resume "{self.cluster}" {n}')
        elif kind == "partition-node":
            iso = "SET GLOBAL wsrep_provider_options = 'gmcast.isolate = {}'"
            self.sh(f'lr_galera_sql "{self.cluster}" {n} "{iso.format(1)}"')
            time.sleep(hold)
            self.sh(f'lr_galera_sql "{self.cluster}" {n} "{iso.format(0)}"')
        elif kind == "kill-node":
            self.sh(f'lr_galera_kill "{self.cluster}" {n}')
            time.sleep(hold)
        else:
            self.sh(f'lr_server_stop "$(lr_galera_node "{self.cluster}" {n})"')
        if kind in ("kill-node", "restart-node"):
            r = self.sh(f'lr_galera_restart "{self.cluster}" {n} >/dev/null')
            more = {"status": r.returncode}
        # Back in the cluster (Synced) before the next node's fault.
        r = self.sh(f'lr_galera_wait_cluster "{self.cluster}" 3 120 1 2 3')
        self.sick = None
        self.log_fault(kind, f"node {n}", start, synced=r.returncode == 0, **more)

    def group_step(self, rng):
        """One fault on the Group Replication group, healed before the
        next: the primary killed, frozen or cut off until the others elect
        a new one (about 22 s with the servers' defaults) and 2 to 8 s
        more, a secondary killed for 2 to 12 s, or the primary moved
        (group_replication_set_as_primary) to another member. Then every
        member is restarted, thawed or let back as it needs and rejoins,
        and all three are ONLINE again."""
        r = self.sh("gr_primary")
        p = int(r.stdout.strip()) if r.returncode == 0 and r.stdout.strip() else 1
        kind = rng.choices(["kill-primary", "freeze-primary", "cut-primary", "set-primary",
                            "kill-secondary"], [2, 2, 1, 2, 1])[0]
        others = [m for m in (1, 2, 3) if m != p]
        n = rng.choice(others) if kind in ("set-primary", "kill-secondary") else p
        start = now()
        more = {}
        if kind == "set-primary":
            r = self.sh(f"gr_set_primary {n}")
            more["status"] = r.returncode
        elif kind == "kill-secondary":
            self.sh(f"gr_kill {n}")
            time.sleep(rng.uniform(2, 12))
        else:
            fault = {"kill-primary": "gr_kill", "freeze-primary": "gr_freeze",
                     "cut-primary": "gr_cut"}[kind]
            self.sh(f"{fault} {n}")
            r = self.sh(f"gr_wait_new_primary {n} 90")
            more["elected"] = r.stdout.strip() or None
            more["elected_at"] = now()
            time.sleep(rng.uniform(2, 8))
        if kind != "set-primary":
            # A member that cannot rejoin (its join timed out on a loaded
            # machine) is rebuilt, as gr_reset does: otherwise the group
            # goes on with two, and the next fault on the primary leaves
            # no majority.
            r = self.sh(f"gr_rejoin {n} || gr_rebuild {n}")
            more["rejoined"] = r.returncode == 0
        r = self.sh("gr_wait_online 120 1 2 3")
        self.log_fault(kind, f"member {n}", start, online=r.returncode == 0, **more)

    def topology_loop(self):
        rng = random.Random(f"{self.seed}:topology")
        step = {"galera": self.galera_step, "group": self.group_step}.get(self.topology,
                                                                           self.topology_step)
        while now() < self.quiet_at - 25:
            time.sleep(rng.uniform(4, 12))
            if now() >= self.quiet_at - 25:
                break
            step(random.Random(rng.random()))
        # Healed: a lagging replica applies again.
        if self.other == "lagging":
            self.sh("repl_start_applier")
            self.other = "replica"

    def nemesis(self):
        rng = random.Random(f"{self.seed}:nemesis")
        if self.topology == "single":
            kinds = ["stop-lockrun", "kill-lockrun", "kill-child", "pause-server",
                     "restart-server", "blackhole", "delay", "cut", "max-ttl", "pause-resource",
                     "force-release", "sweep", *HOST_FAULTS]
            # A force release often enough (and of long runs more than
            # others: it picks a run inside now) that a lockrun which took
            # the server's "not renewed" for renewed would be seen.
            weights = [3, 2, 2, 2, 1, 1, 1, 1, 1, 1, 3, 1, 3, 1, 1, 2, 3, 2]
            if self.shim:
                kinds, weights = kinds + ["freeze-clock"], weights + [1]
        else:
            kinds = ["stop-lockrun", "kill-lockrun", "kill-child", "max-ttl", "pause-resource",
                     "force-release", "sweep"]
            weights = [3, 2, 2, 1, 1, 2, 1]
            if self.fifos:
                kinds, weights = kinds + list(HOST_FAULTS), weights + [3, 1, 1, 2, 3, 2]
            if self.shim:
                kinds, weights = kinds + ["freeze-clock"], weights + [1]
            topo = threading.Thread(target=self.topology_loop, daemon=True)
            topo.start()
        threads = []
        # Faults start until 10 s before the quiet period, so that each
        # is healed (at most 7 s) before it.
        while now() < self.quiet_at - 10:
            time.sleep(rng.uniform(0.5, 3))
            kind = rng.choices(kinds, weights)[0]
            sub = random.Random(rng.random())
            t = threading.Thread(target=self.fault, args=(sub, kind), daemon=True)
            t.start()
            threads.append(t)
        for t in threads:
            t.join(60)
        if os.path.exists(self.freeze):
            os.unlink(self.freeze)
        # Healed, whatever a fault thread left: the server runs, the proxy
        # passes everything, max-ttl is back, nothing is paused.
        if self.topology == "single":
            self.sh(f'lr_server_resume "{self.server_dir}" 2>/dev/null; '
                    f'lr_server_running "{self.server_dir}" || lr_server_start "{self.server_dir}" '
                    f'"$(<"{self.server_dir}/server.port")" >/dev/null')
            self.proxy("reset")
            self.ctl("max-ttl", "5m")
        else:
            topo.join(180)
            self.proxy("reset")
            self.ctl("max-ttl", "8s" if self.topology == "replication" else "5m")
        for res in ("nm-mutex", "nm-sem", "nm-rw"):
            self.ctl("resume", res)
        append(os.path.join(self.out, "faults.jsonl"),
               {"kind": "healed", "target": "all", "start": now(), "end": now()})

    def run(self):
        meta = {"seed": self.seed, "duration": self.duration, "clients": self.nclients,
                "topology": self.topology,
                "hosts": self.nhosts, "t0": self.t0, "quiet_at": self.quiet_at,
                "capacity": {"nm-mutex": 1, "nm-sem": 3, "nm-rw": 1, "id:nm-key": 1,
                             "id:nm-once": 1}, "uts": self.uts}
        with open(os.path.join(self.out, "meta.json"), "w") as f:
            json.dump(meta, f)
        nem = threading.Thread(target=self.nemesis, daemon=True)
        nem.start()
        clients = [threading.Thread(target=self.client, args=(i,), daemon=True)
                   for i in range(self.nclients)]
        for t in clients:
            t.start()
        nem.join()
        for t in clients:
            t.join(180)
        with open(os.path.join(self.out, "meta.json")) as f:
            meta = json.load(f)
        meta["ended"] = now()
        meta["stuck_clients"] = sum(t.is_alive() for t in clients)
        with open(os.path.join(self.out, "meta.json"), "w") as f:
            json.dump(meta, f)


def main(argv):
    if len(argv) >= 2 and argv[1] == "child":
        return child(*argv[2:9])
    if len(argv) >= 2 and argv[1] == "run":
        opts = dict(zip(argv[2::2], argv[3::2]))
        Campaign(int(opts["--seed"]), float(opts["--duration"]), opts["--out"],
                 int(opts.get("--clients", 9)), int(opts.get("--hosts", 3)),
                 opts.get("--topology", "single")).run()
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
