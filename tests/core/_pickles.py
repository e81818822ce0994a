"""A pickle payload for checkpoint tests: a file that runs code (writes a marker file) when it is unpickled."""

from __future__ import annotations

from pathlib import Path


class Payload:
    """Unpickling this runs ``exec``: it writes ``marker`` (what an attacker's code would do, harmlessly)."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return exec, (f"open({str(self.marker)!r}, 'w').write('ran')",)


def plant(path: Path, marker: Path) -> None:
    """Replace the checkpoint file ``path`` with a payload of the same name."""
    import torch

    torch.save({"step": 1, "value": Payload(marker)}, path)
