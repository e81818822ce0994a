"""Plain values across the sandbox boundary: the only thing untrusted code can send back is data.

``encode`` turns a value of exactly ``None``, ``bool``, ``int``, ``float``, ``str``, ``bytes``, ``complex``, ``list``,
``tuple``, ``set``, ``frozenset`` and ``dict`` into JSON; subclasses (an ``int`` whose ``__eq__`` always says True)
and anything too deep or large are refused, so a returned object never runs code where it is compared. ``decode``
rebuilds them. Standard library only: the sandbox scripts carry a copy of this source.
"""

import base64
import json
import math

MAX_DEPTH = 64


class NotPlain(TypeError):
    """A value that is not plain data (or too deep / too large to send)."""


def _tagged(tag, value):
    return {tag: value}


def _enc(value, depth):  # noqa: PLR0911 - one branch per plain type
    if depth > MAX_DEPTH:
        raise NotPlain(f"nested deeper than {MAX_DEPTH} levels")
    kind = type(value)
    if value is None or kind is bool or kind is int or kind is str:
        return value
    if kind is float:
        return value if math.isfinite(value) else _tagged("float", repr(value))
    if kind is list:
        return [_enc(v, depth + 1) for v in value]
    if kind in (tuple, set, frozenset):
        items = [_enc(v, depth + 1) for v in value]
        return _tagged(kind.__name__, sorted(items, key=json.dumps) if kind is not tuple else items)
    if kind is dict:
        return _tagged("dict", [[_enc(k, depth + 1), _enc(v, depth + 1)] for k, v in value.items()])
    if kind is bytes:
        return _tagged("bytes", base64.b64encode(value).decode("ascii"))
    if kind is complex:
        return _tagged("complex", [repr(value.real), repr(value.imag)])
    raise NotPlain(
        f"a {kind.__name__} is not plain data (None, bool, int, float, str, bytes, complex, list, "
        "tuple, set, frozenset, dict)"
    )


def encode(value, max_bytes):
    """JSON text of ``value``; raises NotPlain when it is not plain data or longer than ``max_bytes``."""
    text = json.dumps(_enc(value, 0), separators=(",", ":"), allow_nan=False)
    if len(text) > max_bytes:
        raise NotPlain(f"the value takes {len(text)} bytes, more than {max_bytes}")
    return text


def _dec(data):  # noqa: PLR0911
    if data is None or type(data) in (bool, int, float, str):
        return data
    if type(data) is list:
        return [_dec(v) for v in data]
    if type(data) is not dict or len(data) != 1:
        raise NotPlain("malformed plain value")
    ((tag, body),) = data.items()
    if tag == "float":
        return float(body)
    if tag in ("tuple", "set", "frozenset"):
        return {"tuple": tuple, "set": set, "frozenset": frozenset}[tag](_dec(v) for v in body)
    if tag == "dict":
        return {_dec(k): _dec(v) for k, v in body}
    if tag == "bytes":
        return base64.b64decode(body.encode("ascii"))
    if tag == "complex":
        return complex(float(body[0]), float(body[1]))
    raise NotPlain(f"unknown plain-value tag {tag!r}")


def decode(text):
    """The plain value of ``text`` (JSON from :func:`encode`)."""
    return _dec(json.loads(text))
