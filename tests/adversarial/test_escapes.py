"""Escapes from the code sandbox, tried as root and as an unprivileged user, under every isolation backend here,
with the in-process audit hook on and off (off: the OS layer alone must hold).

Before, a normal user got a same-user mode where the audit hook was the only barrier, and it was bypassed: the
parent's environment (with the API key) read through ``/proc/<ppid>/environ``, the network reached through
``_posixsubprocess.fork_exec``, files written outside the sandbox, the parent killed with ``pidfd_send_signal``;
even as root ``os.open(..., dir_fd=...)`` and ``os.mkfifo`` created files in ``/tmp``, and workspace files were
readable. Each attack below is a program whose ``f`` tries one of these and returns what it got; the test sees the
return value in the case's message ("got ...") and checks the host.
"""

# ruff: noqa: E501 - the attack programs below are data, kept as an attacker writes them
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
from pathlib import Path

import pytest

from t2g_core.critics import isolation

ROOT = Path(__file__).resolve().parents[2]
SECRET = "sk-adversarial-0123456789"
BACKENDS = [b for b in ("bwrap", "unshare") if isolation.works(b)]
MODULES = (
    "isolation.py",
    "sandbox.py",
    "sandbox_process.py",
    "process_time.py",
    "plain.py",
    "sandbox_candidate.py",
    "sandbox_judge.py",
)

ATTACKS = {
    "parent environment": """
import os
def f(x):
    found = [k for k, v in os.environ.items() if 'SECRET' in k or 'sk-' in v]
    for pid in [os.getppid()] + [int(p) for p in os.listdir('/proc') if p.isdigit()]:
        for path in (f'/proc/{pid}/environ', f'//proc/{pid}/environ', f'/proc/{pid}/cmdline'):
            try:
                found.append(open(path, 'rb').read().decode(errors='replace'))
            except OSError as exc:
                pass
    return ' '.join(found)
""",
    "network through fork_exec": """
import os, sys
def f(x):
    import _posixsubprocess
    code = "import socket; s = socket.create_connection(('127.0.0.1', PORT), timeout=2); s.sendall(b'escaped')"
    r, w = os.pipe()
    try:
        pid = _posixsubprocess.fork_exec([sys.executable, '-c', code], [sys.executable.encode()], True, (), None, None,
                                         -1, -1, -1, w, -1, -1, r, w, True, False, -1, None, None, None, -1, None, False)
        os.waitpid(pid, 0)
    except Exception as exc:
        return f'fork_exec: {type(exc).__name__}'
    return 'ran'
""",
    "network directly": """
import socket
def f(x):
    try:
        socket.create_connection(('127.0.0.1', PORT), timeout=2).sendall(b'escaped')
        return 'connected'
    except Exception as exc:
        return f'{type(exc).__name__}'
""",
    "writes outside": """
import os
def f(x):
    done = []
    for attempt in (lambda: open('HOSTDIR/canary-open', 'w').write('x'),
                    lambda: os.close(os.open('canary-dirfd', os.O_CREAT | os.O_WRONLY, dir_fd=os.open('HOSTDIR', os.O_RDONLY))),
                    lambda: os.mkfifo('HOSTDIR/canary-fifo'),
                    lambda: open('/tmp/t2g-canary-tmp', 'w').write('x')):
        try:
            attempt()
            done.append('wrote')
        except Exception as exc:
            done.append(type(exc).__name__)
    return ' '.join(done)
""",
    "reads the workspace": """
def f(x):
    try:
        return open('HOSTDIR/mlflow.db').read()
    except Exception as exc:
        return type(exc).__name__
""",
    "kills its parent": """
import os, signal
def f(x):
    out = []
    for attempt in (lambda: os.kill(os.getppid(), 9), lambda: signal.pidfd_send_signal(os.pidfd_open(os.getppid()), 9),
                    lambda: os.kill(-1, 9)):
        try:
            attempt()
            out.append('sent')
        except Exception as exc:
            out.append(type(exc).__name__)
    return ' '.join(out)
""",
}
DRIVER = """
import json, sys
sys.path.insert(0, sys.argv[1])
from t2g_core.critics.sandbox import SandboxLimits, run_cases
jobs = json.loads(open(sys.argv[2]).read())
out = []
for job in jobs:
    limits = SandboxLimits(timeout_s=5.0, isolation=job['backend'], audit_guard=job['audit'])
    run = run_cases(job['program'], [{'code': "def check(candidate):\\n    assert __t2g_eq(candidate(0), 'never', True)\\n"}], 'f', limits)
    out.append({'error': run.error, 'isolation': run.isolation, 'results': [[r.outcome, r.message] for r in run.results]})
print(json.dumps(out))
"""


class Listener:
    """A TCP listener on the host's loopback recording whatever connects."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.sock.settimeout(0.5)
        self.port, self.received, self.stop = self.sock.getsockname()[1], [], False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while not self.stop:
            try:
                conn, _ = self.sock.accept()
                self.received.append(conn.recv(100))
            except OSError:
                continue

    def close(self):
        self.stop = True
        self.thread.join(2)
        self.sock.close()


@pytest.fixture
def host(tmp_path_factory):
    """A world-readable host folder standing for the workspace (a secret database, a place to write canaries)."""
    folder = Path(tempfile.mkdtemp(prefix="t2g-adv-host-"))
    folder.chmod(0o777)
    (folder / "mlflow.db").write_text(SECRET)
    (folder / "mlflow.db").chmod(0o644)
    listener = Listener()
    yield folder, listener
    listener.close()
    shutil.rmtree(folder, ignore_errors=True)
    Path("/tmp/t2g-canary-tmp").unlink(missing_ok=True)


def _jobs(folder: Path, port: int) -> list[dict]:
    return [
        {
            "attack": name,
            "backend": backend,
            "audit": audit,
            "program": code.replace("HOSTDIR", str(folder)).replace("PORT", str(port)),
        }
        for backend in BACKENDS
        for audit in (True, False)
        for name, code in ATTACKS.items()
    ]


def _as_root(jobs: list[dict], monkeypatch) -> list[dict]:
    from t2g_core.critics.sandbox import SandboxLimits, run_cases

    monkeypatch.setenv("T2G_ADV_SECRET", SECRET)
    test = [{"code": "def check(candidate):\n    assert __t2g_eq(candidate(0), 'never', True)\n"}]
    out = []
    for job in jobs:
        run = run_cases(
            job["program"], test, "f", SandboxLimits(timeout_s=5.0, isolation=job["backend"], audit_guard=job["audit"])
        )
        out.append(
            {"error": run.error, "isolation": run.isolation, "results": [[r.outcome, r.message] for r in run.results]}
        )
    return out


def _as_nobody(jobs: list[dict]) -> list[dict]:
    """The same runs by the unprivileged user ``nobody``, from a world-readable copy of the sandbox modules and the
    system interpreter (the project's interpreter lives under root's private home)."""
    if os.geteuid() != 0 or not shutil.which("su") or not Path("/usr/bin/python3").exists():
        pytest.skip("needs root (to become nobody), su and /usr/bin/python3")
    code = Path(tempfile.mkdtemp(prefix="t2g-adv-code-"))
    try:
        pkg = code / "t2g_core" / "critics"
        pkg.mkdir(parents=True)
        (code / "t2g_core" / "__init__.py").write_text("")
        (pkg / "__init__.py").write_text("")
        for name in MODULES:
            shutil.copy(ROOT / "t2g_core" / "critics" / name, pkg / name)
        (code / "driver.py").write_text(DRIVER)
        (code / "jobs.json").write_text(json.dumps(jobs))
        for path in [code, *code.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        env = f"env -i PATH=/usr/bin:/bin T2G_ADV_SECRET={SECRET} OPENAI_API_KEY={SECRET}"
        cmd = f"cd {code} && {env} /usr/bin/python3 driver.py {code} {code / 'jobs.json'}"
        done = subprocess.run(["su", "nobody", "-s", "/bin/sh", "-c", cmd], capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(code, ignore_errors=True)


def _check(jobs: list[dict], runs: list[dict], folder: Path, listener: Listener) -> None:
    for job, run in zip(jobs, runs, strict=True):
        where = f"{job['attack']} ({job['backend']}, audit hook {'on' if job['audit'] else 'off'})"
        assert run["error"] is None and run["isolation"] == job["backend"], (where, run)
        [[outcome, message]] = run["results"]
        assert outcome != "pass", where
        assert SECRET not in (message or ""), f"{where}: {message}"
        if job["attack"] == "writes outside":  # the three writes into the host folder fail; /tmp is the sandbox's own
            attempts = (message or "").split("'")[1].split()
            assert "wrote" not in attempts[:3], f"{where}: {message}"
    assert listener.received == [], "a sandboxed program reached the host's network"
    assert sorted(p.name for p in folder.iterdir()) == ["mlflow.db"], "a sandboxed program wrote on the host"
    assert not Path("/tmp/t2g-canary-tmp").exists()


@pytest.mark.slow
def test_escapes_fail_as_root(host, monkeypatch):
    folder, listener = host
    jobs = _jobs(folder, listener.port)
    _check(jobs, _as_root(jobs, monkeypatch), folder, listener)


@pytest.mark.slow
def test_escapes_fail_as_an_unprivileged_user(host):
    folder, listener = host
    jobs = _jobs(folder, listener.port)
    _check(jobs, _as_nobody(jobs), folder, listener)  # the driver itself survived kill(-1, 9): it answered
