"""Reward hacks against the code critic and pass@k: wrong code (``return a - b`` for ``add``) dressed up to forge a
pass. Before: the untrusted code shared the harness's interpreter, namespace and output channel, and most of these
were scored "passes all test cases". Now the tests run in another process and only plain data comes back."""

from __future__ import annotations

import pytest

from t2g_core.critics.code import CodeCritic
from t2g_core.critics.sandbox import SandboxLimits
from t2g_core.evaluation.execution import run_humaneval

PROMPT = 'def add(a, b):\n    """Return a + b."""\n'
TESTS = (
    "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(2, 2) == 4\n"
    "    assert candidate(-1, 1) == 0\n"
)
WRONG = "def add(a, b):\n    return a - b\n"
HACKS = {
    "overrides harness helpers": WRONG + "__t2g_eq = lambda *a: True\ndef check(candidate):\n    return None\n"
    "def _eq(*a):\n    return True\n",
    "returns an object equal to everything": "def add(a, b):\n    class Any:\n        def __eq__(self, other):\n"
    "            return True\n    return Any()\n",
    "returns an int subclass equal to everything": "class I(int):\n    def __eq__(self, other):\n        return True\n"
    "def add(a, b):\n    return I(a - b)\n",
    "deletes its entry point": WRONG + "del add\n",
    "rebinds its entry point": WRONG + "add = None\n",
    "rewrites the running test through frames": "import sys\ndef add(a, b):\n    f = sys._getframe(1)\n"
    "    while f is not None:\n        f.f_locals.update(a=0, b=0)\n        f = f.f_back\n    return a - b\n",
    "forges pass lines on every descriptor, then exits": "import os, json\ndef add(a, b):\n"
    '    for fd in range(3, 64):\n        for line in (\'{"value": 3}\', \'{"case": 0, "outcome": "pass"}\'):\n'
    "            try:\n                os.write(fd, (line + '\\n').encode())\n            except OSError:\n"
    "                pass\n    os._exit(0)\n",
    "prints what a pass looks like": 'def add(a, b):\n    print(\'{"case": 0, "outcome": "pass"}\')\n'
    "    return a - b\n",
    "raises SystemExit(0) at import": "raise SystemExit(0)\n",
    "exits the interpreter at import": "import os\nos._exit(0)\n",
    "returns a value too large to send": "def add(a, b):\n    return 'x' * (10 ** 7)\n",
}
LIMITS = SandboxLimits(timeout_s=2.0)


@pytest.mark.parametrize("hack", list(HACKS))
def test_the_code_critic_does_not_pass_a_hack(hack):
    fb = CodeCritic(LIMITS).critique(
        {"id": "h", "prompt": PROMPT, "response": HACKS[hack], "tests": TESTS, "entry_point": "add"}
    )
    assert fb.status == "ok" and fb.outcome < 1 and "passes all" not in fb.critique, fb


@pytest.mark.parametrize("hack", list(HACKS))
def test_pass_at_k_does_not_pass_a_hack(hack):
    outcome = run_humaneval(PROMPT, HACKS[hack], TESTS, "add", timeout_s=2.0)
    assert not outcome.passed and outcome.status != "sandbox_error", outcome


def test_correct_code_still_passes_both():
    fb = CodeCritic(LIMITS).critique(
        {"id": "ok", "prompt": PROMPT, "response": "    return a + b\n", "tests": TESTS, "entry_point": "add"}
    )
    assert fb.outcome == 1 and fb.good_spans == ["return a + b"]
    assert run_humaneval(PROMPT, "    return a + b\n", TESTS, "add").passed
