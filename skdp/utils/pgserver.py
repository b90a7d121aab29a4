"""A throwaway PostgreSQL server on loopback, for the ledger's tests and benchmark.

Uses the server binaries of the machine (Debian's ``postgresql`` package puts
them in ``/usr/lib/postgresql/<version>/bin``; ``.ci/run`` installs it). The
server runs in a temporary directory, listens on 127.0.0.1 on a free port,
trusts local connections and is removed on exit. PostgreSQL refuses to run as
root, so under root it runs as the ``postgres`` system user.

Not part of the ledger itself: a real deployment points ``BudgetLedger`` at
its own server (``doc/cluster.md``).
"""
import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile


def server_binaries():
    """Folder holding ``initdb`` and ``pg_ctl``, or None when PostgreSQL is not installed."""
    found = shutil.which("pg_ctl")
    if found:
        return os.path.dirname(found)
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), reverse=True)
    return os.path.dirname(candidates[0]) if candidates else None


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ThrowawayPostgres:
    """A running server; ``url`` connects to it. ``stop()`` / ``start()`` simulate a restart."""

    def __init__(self, bindir, root):
        self.bindir, self.root = bindir, root
        self.data = os.path.join(root, "data")
        self.port = _free_port()
        self.url = f"postgresql://skdp@127.0.0.1:{self.port}/postgres"
        self._as_user = []
        if os.geteuid() == 0:  # postgres will not run as root
            os.chmod(root, 0o777)
            self._as_user = ["runuser", "-u", "postgres", "--"]
        self._run("initdb", "-D", self.data, "-U", "skdp", "--auth=trust", "-E", "UTF8", "--no-sync")

    def _run(self, tool, *args):
        cmd = self._as_user + [os.path.join(self.bindir, tool), *args]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=self.root)

    def start(self):
        options = (f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
                   "-c max_connections=200")
        self._run("pg_ctl", "-D", self.data, "-o", options, "-l", os.path.join(self.root, "log"), "-w", "start")

    def stop(self, mode="fast"):
        self._run("pg_ctl", "-D", self.data, "-m", mode, "-w", "stop")


@contextlib.contextmanager
def throwaway_postgres():
    """Start a server, yield it (``.url``), stop and delete it. Raises RuntimeError without PostgreSQL."""
    bindir = server_binaries()
    if bindir is None:
        raise RuntimeError("PostgreSQL's server binaries (initdb, pg_ctl) are not installed: "
                           "apt-get install postgresql (the tests' .ci/run does).")
    root = tempfile.mkdtemp(prefix="skdp-pg-")
    server = None
    try:
        server = ThrowawayPostgres(bindir, root)
        server.start()
        yield server
    finally:
        if server is not None:
            with contextlib.suppress(Exception):
                server.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)
