"""A TLS-terminating TCP relay (what a TLS listener in front of a broker does): clients speak TLS
to it, and it relays the plaintext to the broker. Lets TLS toward the brokers be tested with
brokers that have no TLS listener of their own."""

from __future__ import annotations

import socket
import ssl
import threading


class TlsRelay:
    def __init__(self, port: int, target: tuple[str, int], context: ssl.SSLContext) -> None:
        self.target = target
        self.context = context
        self.connections = 0
        self.listener = socket.create_server(("127.0.0.1", port))
        self._stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                raw, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(raw,), daemon=True).start()

    def _serve(self, raw: socket.socket) -> None:
        try:
            client = self.context.wrap_socket(raw, server_side=True)
        except (ssl.SSLError, OSError):
            raw.close()  # not TLS: refused, as a TLS listener would
            return
        self.connections += 1
        broker = socket.create_connection(self.target)

        def pump(source: socket.socket, sink: socket.socket) -> None:
            try:
                while data := source.recv(65536):
                    sink.sendall(data)
            except OSError:
                pass
            finally:
                for s in (source, sink):
                    try:
                        s.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass

        threading.Thread(target=pump, args=(broker, client), daemon=True).start()
        pump(client, broker)

    def close(self) -> None:
        self._stop.set()
        self.listener.close()
