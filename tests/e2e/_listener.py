"""A stand-in for an attacker's endpoint in the end-to-end tests: it records what reaches it and answers nothing."""

from __future__ import annotations

import socket
import threading


class Listener:
    """A TCP listener on 127.0.0.1 that records every connection and what was sent on it (an attacker's endpoint)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.received: list[bytes] = []
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(2)
                try:
                    self.received.append(conn.recv(65536))
                except OSError:
                    self.received.append(b"")

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()
