#!/usr/bin/python3
"""CPython's own socket tests, plain and under the shim (ctest label "peers").

    run-peers.py --lib LIBR2SOCK --mode plain|default|now [--log-dir DIR]
                 [--plain-dir DIR] [--timeout SECS] [--budget SECS]
                 [--jobs N] [MODULE...]

Debian's copy of CPython's test suite (package libpython3.11-testsuite)
exercises sockets, selectors, asyncio and the protocol libraries, with both
ends in one process or in a child. For each MODULE (default: MODULES below)
this runs `/usr/bin/python3 -m test -v MODULE` once plain and once with the
library in LD_PRELOAD (R2SOCK_UPGRADE unset for --mode default, =now for
--mode now), reads each test's outcome from the verbose output and compares:

  * a test that fails (FAIL, ERROR, unexpected success) under the shim and
    not plain is re-run alone (`-m TEST_ID`) under the shim, up to RERUNS
    times; the first time it fails again, it is run alone plain, and it is
    ours (a shim-only failure) if that passes. One that passes alone under
    the shim each time is reported ("not reproduced alone") but not counted;
    one that fails alone plain too is not ours.
  * a test that fails plain too is not ours: reported as "fails plain too".
  * a module that times out or dies under the shim but finished plain is
    ours, with the test that was running last; so is one that ran fewer (or
    more) tests under the shim than plain.

A module's plain run is bounded by --timeout; its shim run by a few times
what the plain run took (a hang costs little), at most --timeout; both ask
regrtest for its own --timeout a little earlier, so that a hang ends with
the tracebacks of every thread. Each run has its own temporary directory
(cwd and TMPDIR, removed afterwards), no PYTHON* (nor R2SOCK_*) variables,
and its own process group; whatever it leaves behind, found by a marker in
its environment, is killed. regrtest's resources stay off (no -u) except
where RESOURCES says, so nothing reaches beyond this host. The modules
mostly sleep (in timeouts, in waits for a thread): --jobs of them run at a
time, each plain then under the shim. --budget bounds the whole (below
ctest's TIMEOUT, which would leave the tests' processes running).

The output: a line per module as it finishes, then a table (tests run,
plain failures, shim-only failures, time plain/shim, connections the shim
saw and put on shared memory), the tests that fail plain too, notes (the
failures not reproduced alone, tests skipped under the shim only...), the
shim-only failures with the last lines of their output, and a last line
"peers MODE: PASS|FAIL: ...". Every run's output stays in --log-dir.

The plain runs do not depend on the mode: --mode plain runs only them and
keeps each module's in --plain-dir (ctest's peers.plain, a fixture of the
other two); --mode default|now with --plain-dir takes a module's plain run
from there when it finished within its bounds, and runs it itself when
not.
Exit status: 0 nothing ours; 1 a shim-only failure, the library not
loaded, no connection seen by the shim over all of MODULES, or the budget
spent; 77 the test suite (or /usr/bin/python3) is not installed.
"""

import argparse
import concurrent.futures
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid

PYTHON = "/usr/bin/python3"  # not `python3` on PATH (a pyenv shim, say)

# The longest-running first: with four at a time, a long module started
# late is the whole run's tail. A mode with the plain runs kept orders the
# modules by those runs' times.
MODULES = """
test_ssl test_imaplib test_xmlrpc test_socket test_logging test_selectors
test_ftplib test_poll test_asyncio.test_events test_poplib
test_asyncio.test_sock_lowlevel test_asyncio.test_streams
test_asyncio.test_sendfile test_httplib test_smtplib test_epoll test_select
test_asyncore test_asynchat test_socketserver test_httpservers
test_urllib2_localnet test_wsgiref test_docxmlrpc test_telnetlib
""".split()

# Tests that cannot run on some hosts whatever the shim does; skipped in
# both runs (regrtest -i PATTERN), and listed in the output.
IGNORE = {
    # AF_VSOCK to the host's own CID: without vsock loopback (a VM guest
    # whose /dev/vsock only reaches its host) connect() never returns, plain
    # too. The shim has nothing to do with AF_VSOCK.
    "test_socket": ["*.ThreadedVSOCKSocketStreamTest.*"],
}

# regrtest resources a module needs though it stays on this host; every
# other resource stays off, so what needs the internet is skipped.
RESOURCES = {
    # Asks for "network" as a whole, then serves and connects on 127.0.0.1.
    "test_socketserver": "network",
}

RERUNS = 2             # re-runs alone of a test that failed only under the shim
RERUN_TIMEOUT = 90     # seconds at most for one test alone: twice the
RERUN_MIN_TIMEOUT = 30 # module's plain time, but never less than this
SHIM_FACTOR = 4        # a module's shim run is bounded by 4x its plain time
SHIM_MIN_TIMEOUT = 120 # ... but never less than this
TAIL = 25              # lines of output shown per failure

# unittest -v: "test_x (test.test_mod.Class.test_x) ... ok", the status
# maybe lines later (after the test's own output or its docstring).
PROGRESS = re.compile(r"^\s*(\w+) \(([\w.]+)\)(?: \([^\n]*\))?(?: \.\.\. (.*))?$")
STATUS = re.compile(r"ok|FAIL|ERROR|skipped\b.*|expected failure|unexpected success")
SUMMARY = re.compile(r"^(FAIL|ERROR|UNEXPECTED SUCCESS): (\w+) \(([\w.]+)\)")
FIXTURES = ("setUpClass", "tearDownClass", "setUpModule", "tearDownModule")


def test_key(name, ident):
    """A test's id; a class or module fixture's is the class or module's
    plus the fixture's name (unittest shows them as "setUpClass (mod.Cls)")."""
    return ident if ident.endswith("." + name) else ident + "." + name


def rerun_pattern(key):
    """What `-m` selects to run KEY alone: the test, or all of a class or
    module for one of its fixtures."""
    head, last = key.rsplit(".", 1)
    return head + ".*" if last in FIXTURES else key


class Run:
    """One regrtest run: how it ended and each test's outcome."""

    def __init__(self, label, rc, secs, timed_out, cut, text, log, stats):
        self.saved = dict(label=label, rc=rc, secs=secs, timed_out=timed_out, cut=cut,
                          text=text, log=log, stats=stats)
        self.label, self.rc, self.secs, self.log = label, rc, secs, log
        self.cut = cut and timed_out  # stopped by the time budget, not its own bound
        self.text = text
        self.lines = text.splitlines()
        self.conn_seen, self.conn_shm = stats
        self.started = []          # test ids in the order they started
        self.failed = {}           # test id -> the lines that tell why
        self.skipped = set()
        ran = None
        last_key = None
        seen_failing = []          # from the statuses: used where no summary follows
        for i, line in enumerate(self.lines):
            m = PROGRESS.match(line)
            if m and m.group(2).startswith("test."):
                last_key = test_key(m.group(1), m.group(2))
                if not self.started or self.started[-1] != last_key:
                    self.started.append(last_key)
                status = m.group(3)
            else:
                status = line.strip().rsplit(" ... ", 1)[-1]
            if last_key and status and STATUS.fullmatch(status):
                if status.startswith(("FAIL", "ERROR", "unexpected")):
                    seen_failing.append(last_key)
                elif status.startswith("skipped"):
                    self.skipped.add(last_key)
            m = re.match(r"^Ran (\d+) tests? in ", line)
            if m:
                ran = (ran or 0) + int(m.group(1))
        # The summary after the tests: each failure with its traceback.
        for i, line in enumerate(self.lines):
            m = SUMMARY.match(line)
            if m and i > 0 and self.lines[i - 1].startswith("=" * 20):
                key = test_key(m.group(2), m.group(3))
                body = []
                for follow in self.lines[i:]:
                    if follow.startswith("=" * 70) and body:
                        break
                    if re.match(r"^Ran \d+ tests? in ", follow):
                        break
                    body.append(follow)
                while body and body[-1].startswith("-" * 70):
                    body.pop()
                self.failed[key] = self.failed.get(key, []) + body
        self.ran = ran if ran is not None else len(self.started)
        self.last = self.started[-1] if self.started else None
        if timed_out or any(l.startswith("Timeout (") for l in self.lines):
            self.status = "timeout"
        elif rc in (0, 2) and (ran is not None or rc == 0):
            self.status = "done"
        else:
            # Killed by a signal, an exit code regrtest does not use, or
            # failed with no test to blame (an import error, say).
            self.status = "crash"
        if self.status != "done":
            for key in seen_failing:
                self.failed.setdefault(key, [])
        self.env_changed = any("failed (env changed)" in l for l in self.lines)

    def abnormal(self):
        return self.status != "done"

    def what(self):
        """How a run that did not finish ended, in words."""
        how = {"timeout": f"timed out after {self.secs:.0f} s",
               "crash": f"ended with status {self.rc} without finishing"}
        return how.get(self.status, "finished") + (
            f", while running {self.last}" if self.last else "")

    def tail(self, key=None, n=TAIL):
        """The last N lines of KEY's failure (or of the output), after the
        first (the "FAIL: test" or the command line)."""
        lines = (self.failed.get(key) if key else None) or self.lines
        while lines and not lines[-1].strip():
            lines = lines[:-1]
        return lines if len(lines) <= n + 2 else lines[:1] + ["..."] + lines[-n:]


class Runner:
    def __init__(self, args):
        self.args = args
        self.lib = os.path.abspath(args.lib)
        self.tag = "r2s-peers-" + uuid.uuid4().hex[:12] + "-"
        self.tmp = tempfile.mkdtemp(prefix="r2s-peers-")
        self.counter = itertools.count(1)
        self.running = set()      # the Popens running now (for SIGTERM)
        self.lock = threading.Lock()
        self.stopping = False
        self.deadline = time.monotonic() + args.budget if args.budget else None
        # A sanitizer build of the library needs its runtime first in
        # LD_PRELOAD (tests/integration/lib.sh does the same).
        ldd = subprocess.run(["ldd", self.lib], capture_output=True, text=True).stdout
        rt = re.search(r"=>\s*(\S*lib[at]san\.so\S*)", ldd)
        # (the library as r2sock-run preloads it: through a link when its
        # path has a blank or a colon, which the loader splits at)
        helper = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "r2sock-preload.sh")
        path = subprocess.run(["bash", "-c", '. "$1" && r2s_preload_path "$2"', "bash", helper, self.lib],
                              capture_output=True, text=True, check=True).stdout.strip()
        self.preload = (rt.group(1) + ":" if rt else "") + path
        self.sanitizer_env = {}
        if rt and "libasan" in rt.group(1):
            # Python leaks at exit by design; memory errors still abort.
            self.sanitizer_env["ASAN_OPTIONS"] = "detect_leaks=0" + (
                ":" + os.environ["ASAN_OPTIONS"] if os.environ.get("ASAN_OPTIONS") else "")
            say("ASan runtime preloaded; LeakSanitizer off for python (exit-time leaks)")
        elif rt and "libtsan" in rt.group(1):
            self.sanitizer_env["TSAN_OPTIONS"] = "ignore_noninstrumented_modules=1" + (
                ":" + os.environ["TSAN_OPTIONS"] if os.environ.get("TSAN_OPTIONS") else "")
            say("TSan runtime preloaded; races reported for the shim only")

    def env(self, shim, work, tag):
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("PYTHON", "R2SOCK_", "LD_PRELOAD", "ASAN_", "TSAN_"))}
        env.update(TMPDIR=work, R2S_PEERS_TAG=tag)
        if shim:
            env.update(self.sanitizer_env)
            env.update(LD_PRELOAD=self.preload, R2SOCK_STATS="1",
                       R2SOCK_STATS_FILE=os.path.join(work, "r2sock-stats"))
            if self.args.mode == "now":
                env["R2SOCK_UPGRADE"] = "now"
        return env

    def run(self, module, shim, limit, match=None):
        """Runs regrtest on MODULE (only the tests MATCH selects) and
        returns the Run; nothing it started outlives it."""
        n = next(self.counter)
        tag = self.tag + str(n)
        cut = False
        if self.deadline and self.deadline - time.monotonic() - 10 < limit:
            # Never left for ctest to kill (its timeout would leave the
            # tests' processes running): a run ends before the budget does.
            limit, cut = max(5, self.deadline - time.monotonic() - 10), True
        label = ("shim" if shim else "plain") + (" alone" if match else "")
        work = tempfile.mkdtemp(prefix="run-", dir=self.tmp)
        log = os.path.join(self.args.log_dir, "%03d-%s-%s%s.log" % (
            n, module, "shim" if shim else "plain", "-alone" if match else ""))
        cmd = [PYTHON, "-m", "test", "-v", "--timeout", str(max(limit - 15, 10)), module]
        if module in RESOURCES:
            cmd += ["-u", RESOURCES[module]]
        for pat in IGNORE.get(module, []):
            cmd += ["-i", pat]
        if match:
            cmd += ["-m", match]
        start = time.monotonic()
        timed_out = False
        with open(log, "w+b") as out:
            out.write(("$ " + " ".join(cmd) + "\n").encode())
            out.flush()
            with self.lock:
                if self.stopping:
                    sys.exit(1)
                p = subprocess.Popen(cmd, cwd=work, env=self.env(shim, work, tag),
                                     stdin=subprocess.DEVNULL, stdout=out,
                                     stderr=subprocess.STDOUT, start_new_session=True)
                self.running.add(p)
            try:
                p.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                timed_out = True
                kill_group(p.pid, signal.SIGTERM)
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
            kill_group(p.pid, signal.SIGKILL)
            p.wait()
            self.running.discard(p)
            left = sweep(tag)
            secs = time.monotonic() - start
            if left:
                out.write(f"\n[run-peers] killed what the run left behind: {left}\n".encode())
            out.seek(0)
            text = out.read().decode("utf-8", "replace")
        stats = read_stats(os.path.join(work, "r2sock-stats"))
        shutil.rmtree(work, ignore_errors=True)
        return Run(label, p.returncode, secs, timed_out, cut, text, log, stats)

    def confirm(self, module, key, plain_secs):
        """Re-runs KEY alone: (verdict, the run to show). Verdicts: ours,
        plain (fails alone plain too), unreproduced, lost (cannot be run
        alone: 0 tests matched)."""
        pat = rerun_pattern(key)
        limit = min(RERUN_TIMEOUT, max(RERUN_MIN_TIMEOUT, 2 * plain_secs))
        for _ in range(RERUNS):
            s = self.run(module, True, limit, pat)
            if s.cut:
                return "cut", s
            if s.status == "done" and s.ran == 0:
                return "lost", s
            if s.abnormal() or s.failed:
                p = self.run(module, False, limit, pat)
                if p.cut:
                    return "cut", p
                if p.status == "done" and p.ran > 0 and not p.failed:
                    return "ours", s
                return "plain", p
        return "unreproduced", s

    def each_module(self, one):
        """one(module) for each module, --jobs at a time: their results;
        whatever the runs left behind is killed and removed afterwards."""
        try:
            with concurrent.futures.ThreadPoolExecutor(max_workers=self.args.jobs) as pool:
                return list(pool.map(one, self.args.modules))
        finally:
            sweep(self.tag, prefix=True)
            shutil.rmtree(self.tmp, ignore_errors=True)

    def plain_file(self, module):
        return os.path.join(self.args.plain_dir, module + ".json") if self.args.plain_dir else None

    def keep_plain(self, module, run):
        """Writes MODULE's plain run to --plain-dir (whole, then renamed)."""
        path = self.plain_file(module)
        with open(path + ".tmp", "w") as f:
            json.dump(run.saved, f)
        os.replace(path + ".tmp", path)

    def kept_plain(self, module):
        """MODULE's plain run from --plain-dir, if one finished there."""
        path = self.plain_file(module)
        if not path or not os.path.isfile(path):
            return None
        with open(path) as f:
            run = Run(**json.load(f))
        return None if run.cut else run

    def module(self, module):
        """Runs MODULE plain and under the shim: a dict for the report."""
        r = {"module": module, "ours": [], "plain_too": [], "notes": [], "cut": False}
        plain = self.kept_plain(module) or self.run(module, False, self.args.timeout)
        limit = min(self.args.timeout, max(SHIM_MIN_TIMEOUT, SHIM_FACTOR * plain.secs))
        shim = self.run(module, True, limit)
        r.update(plain=plain, shim=shim)
        whole = f"{module} (the whole module)"
        if plain.cut or shim.cut:
            r["cut"] = True   # the time budget was spent: reported as such
            return r
        if plain.abnormal():
            r["notes"].append(f"plain {plain.what()} ({plain.log})")
        if shim.abnormal():
            if plain.abnormal():
                r["notes"].append(f"shim {shim.what()}: plain did not finish either")
            else:
                r["ours"].append((whole, f"under the shim it {shim.what()}; plain it "
                                  f"finished in {plain.secs:.0f} s", shim.tail(), shim.log))
        elif not plain.abnormal() and shim.ran != plain.ran:
            # Say, the module skipped as a whole under the shim.
            r["ours"].append((whole, f"ran {shim.ran} tests under the shim, {plain.ran} plain",
                              shim.tail(), shim.log))
        for key in shim.failed:
            if key in plain.failed:
                r["plain_too"].append(key)
                continue
            verdict, run = self.confirm(module, key, plain.secs)
            if verdict == "cut":
                r["cut"] = True
                return r
            if verdict == "ours":
                r["ours"].append((key, "fails under the shim, passes plain (also alone)",
                                  run.tail(key if key in run.failed else None), run.log))
            elif verdict == "lost":
                r["ours"].append((key, f"failed under the shim only, and `-m {rerun_pattern(key)}` "
                                  "selects no test to re-run it alone",
                                  shim.tail(key), shim.log))
            elif verdict == "plain":
                r["plain_too"].append(key + " (alone)")
            else:
                r["notes"].append(f"{key}: failed under the shim in the module's run, "
                                  f"passed alone under the shim {RERUNS} times ({shim.log})")
        for key in plain.failed:
            if key not in shim.failed:
                r["notes"].append(f"{key}: failed plain, passed under the shim ({plain.log})")
        only = sorted(shim.skipped - plain.skipped - set(plain.failed))
        if only:
            r["notes"].append(f"skipped under the shim only: {' '.join(only[:10])}"
                              + (" ..." if len(only) > 10 else "") + f" ({shim.log})")
        if shim.env_changed and not plain.env_changed:
            r["notes"].append(f"regrtest: environment changed under the shim only ({shim.log})")
        ign = IGNORE.get(module)
        if ign:
            r["notes"].append("ignored here (both runs): " + " ".join(ign))
        return r


def kill_group(pgid, sig):
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def sweep(tag, prefix=False):
    """Kills every process whose environment holds R2S_PEERS_TAG=TAG (or
    one that starts with TAG): what a run left behind, daemons that left its
    process group too. Says which."""
    found = []
    for _ in range(5):
        pids = tagged(tag, prefix)
        if not pids:
            break
        for pid, comm in pids:
            found.append(f"{pid} ({comm})")
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.2)
    return ", ".join(sorted(set(found)))


def tagged(tag, prefix):
    """(pid, name) of the processes whose environment holds R2S_PEERS_TAG=TAG."""
    needle = ("R2S_PEERS_TAG=" + tag).encode()
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open(f"/proc/{d}/environ", "rb") as f:
                env = f.read().split(b"\0")
                if any(e.startswith(needle) if prefix else e == needle for e in env):
                    with open(f"/proc/{d}/comm") as c:
                        found.append((int(d), c.read().strip()))
        except OSError:
            pass
    return found


def read_stats(path):
    """conn_seen and conn_shm summed over the processes that wrote PATH."""
    seen = shm = 0
    try:
        with open(path, errors="replace") as f:
            for line in f:
                m = re.search(r"\bconn_seen=(\d+)", line)
                n = re.search(r"\bconn_shm=(\d+)", line)
                seen += int(m.group(1)) if m else 0
                shm += int(n.group(1)) if n else 0
    except OSError:
        pass
    return seen, shm


def say(msg):
    print(msg, flush=True)


def report(mode, results, unrun, budget, total_secs):
    w = max([len(r["module"]) for r in results] + [6])
    head = f"{'module':<{w}}  {'tests plain/shim':>16}  {'plain fail':>10}  {'shim-only':>9}  " \
           f"{'secs plain/shim':>15}  {'conns shm/seen':>14}"
    say(f"\n== peers, R2SOCK_UPGRADE={'now' if mode == 'now' else '(unset)'}: "
        "CPython's tests plain and under the shim")
    say(head)
    say("-" * len(head))
    for r in results:
        p, s = r["plain"], r["shim"]
        tests = f"{p.ran}/{s.ran}" + ("" if not s.abnormal() else " " + s.status)
        say(f"{r['module']:<{w}}  {tests:>16}  {len(p.failed):>10}  "
            f"{len(r['ours']):>9}  {p.secs:>7.1f}/{s.secs:<7.1f}  {'%d/%d' % (s.conn_shm, s.conn_seen):>14}")
    ours = [(r["module"],) + o for r in results for o in r["ours"]]
    runs = sum(r["plain"].ran for r in results), sum(r["shim"].ran for r in results)
    say(f"{'total':<{w}}  {'%d/%d' % runs:>16}  {sum(len(r['plain'].failed) for r in results):>10}  "
        f"{len(ours):>9}  {sum(r['plain'].secs for r in results):>7.1f}/"
        f"{sum(r['shim'].secs for r in results):<7.1f}")
    plain_too = [k for r in results for k in r["plain_too"]]
    if plain_too:
        say("\n-- fail plain too (not ours):")
        for k in plain_too:
            say("   " + k)
    notes = [(r["module"], n) for r in results for n in r["notes"]]
    if notes:
        say("\n-- notes:")
        for m, n in notes:
            say(f"   {m}: {n}")
    if ours:
        say(f"\n-- shim-only failures ({len(ours)}):")
        for module, key, why, tail, log in ours:
            say(f"\n   {key}: {why}\n   log: {log}")
            for line in tail:
                say("   | " + line)
    # The library did not load (ld.so says so, and goes on without it), or
    # no process under it saw a connection: every test passes, vacuously.
    unloaded = [r["module"] for r in results if "cannot be preloaded" in r["shim"].text]
    seen = sum(r["shim"].conn_seen for r in results)
    blind = not seen and len(results) == len(MODULES)
    verdict = "FAIL" if ours or unloaded or blind or unrun else "PASS"
    if unloaded:
        say(f"\n-- ld.so could not preload the library in: {' '.join(unloaded)}")
    if unrun:
        say(f"\n-- the time budget ({budget} s) was spent; not run (or not to the end): "
            + " ".join(unrun))
    if not seen:
        say("\n-- the shim saw no connection at all (R2SOCK_STATS_FILE stayed empty)"
            + ("" if blind else ": the modules run may make none"))
    failing = sorted({m for m, *_ in ours})
    say(f"\npeers {mode}: {verdict}: {len(ours)} shim-only failure(s)"
        + (f" in {', '.join(failing)}" if failing else "")
        + f"; {len(results)} modules, {runs[1]} tests under the shim, {total_secs:.0f} s")
    return 1 if verdict == "FAIL" else 0


def plain_only(runner, tests, start):
    """--mode plain: each module's plain run, kept for the other modes.
    Fails only when it cannot run at all: a run cut by the budget is not
    kept, and the mode that needs it runs it itself."""
    args = runner.args
    say(f"peers plain: {PYTHON} -m test (from {tests}), kept in {args.plain_dir}; logs in {args.log_dir}")

    def one(module):
        if runner.deadline and runner.deadline - time.monotonic() < 30:
            return False
        p = runner.run(module, False, args.timeout)
        if p.cut:
            return False
        runner.keep_plain(module, p)
        say(f"[{time.monotonic() - start:5.0f} s] {module}: plain {p.ran} tests {p.status} {p.secs:.1f} s")
        return True

    kept = runner.each_module(one)
    unkept = [m for m, k in zip(args.modules, kept) if not k]
    say(f"\npeers plain: PASS: {kept.count(True)} modules run and kept, {time.monotonic() - start:.0f} s"
        + (f"; the budget was spent before the end of (run by each mode itself): {' '.join(unkept)}"
           if unkept else ""))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lib", required=True, help="libr2sock.so")
    ap.add_argument("--mode", required=True, choices=("plain", "default", "now"))
    ap.add_argument("--log-dir", help="where each run's output stays (default: a temp dir)")
    ap.add_argument("--plain-dir", help="where the plain runs are kept (--mode plain) or taken from")
    ap.add_argument("--timeout", type=int, default=300, help="seconds per module run")
    ap.add_argument("--budget", type=int, help="seconds for everything (below ctest's TIMEOUT)")
    ap.add_argument("--jobs", type=int, default=4, help="modules at a time (they mostly sleep)")
    ap.add_argument("modules", nargs="*", default=MODULES)
    args = ap.parse_args()

    # The interpreter's own test package: /usr/lib/python3.11/test on Debian 12.
    probe = subprocess.run(
        [PYTHON, "-I", "-c", "import sys, sysconfig; "
         "print('%d.%d' % sys.version_info[:2], sysconfig.get_paths()['stdlib'])"],
        capture_output=True, text=True) if os.access(PYTHON, os.X_OK) else None
    if probe is None or probe.returncode != 0:
        say(f"SKIP: {PYTHON} is not there to run")
        return 77
    version, stdlib = probe.stdout.split()
    tests = os.path.join(stdlib, "test")
    if not os.path.isfile(os.path.join(tests, "libregrtest", "main.py")):
        say(f"SKIP: {tests} is missing: install libpython{version}-testsuite")
        return 77
    if not os.path.isfile(args.lib):
        say(f"FAIL: the library {args.lib} does not exist")
        return 1

    if args.mode == "plain" and not args.plain_dir:
        say("run-peers.py: --mode plain needs --plain-dir")
        return 2
    runner = Runner(args)
    if args.mode == "plain":
        shutil.rmtree(args.plain_dir, ignore_errors=True)
        os.makedirs(args.plain_dir)
    if args.log_dir:
        shutil.rmtree(args.log_dir, ignore_errors=True)
        os.makedirs(args.log_dir)
    else:
        args.log_dir = tempfile.mkdtemp(prefix="r2s-peers-logs-")

    def stop(sig, _frame):
        # ctest's timeout: take the running tests down with us.
        runner.lock.acquire(timeout=5)
        runner.stopping = True
        for p in list(runner.running):
            kill_group(p.pid, signal.SIGKILL)
        sweep(runner.tag, prefix=True)
        shutil.rmtree(runner.tmp, ignore_errors=True)
        say(f"\npeers {args.mode}: FAIL: stopped by signal {sig}")
        os._exit(1)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)

    start = time.monotonic()
    if args.mode == "plain":
        return plain_only(runner, tests, start)
    say(f"peers {args.mode}: {PYTHON} -m test (from {tests}) plain and with "
        f"LD_PRELOAD={runner.preload}" + (" R2SOCK_UPGRADE=now" if args.mode == "now" else "")
        + f"; logs in {args.log_dir}"
        + (f"; plain runs from {args.plain_dir} where kept" if args.plain_dir else ""))
    def plain_secs(module):
        kept = runner.kept_plain(module)
        return kept.secs if kept else float("inf")   # to run plain as well
    args.modules = sorted(args.modules, key=plain_secs, reverse=True)

    def one(module):
        if runner.deadline and runner.deadline - time.monotonic() < 30:
            return None   # the budget is spent: reported as not run
        r = runner.module(module)
        if r["cut"]:
            return r
        p, s = r["plain"], r["shim"]
        say(f"[{time.monotonic() - start:5.0f} s] {module}: plain {p.ran} tests "
            f"{p.status} {p.secs:.1f} s, shim {s.ran} tests {s.status} {s.secs:.1f} s, "
            f"{len(r['ours'])} shim-only failure(s)")
        return r

    done = runner.each_module(one)
    results = [r for r in done if r and not r["cut"]]
    unrun = [m for m, r in zip(args.modules, done) if not r or r["cut"]]
    return report(args.mode, results, unrun, args.budget, time.monotonic() - start)


if __name__ == "__main__":
    sys.exit(main())
