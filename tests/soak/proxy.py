"""A TCP proxy between lockrun and Redis that can drop, delay and blackhole the traffic.

It runs an asyncio loop in a thread of the soak harness. Every control method
may be called from any thread. The faults are what a real network does to a
long-lived client connection:

* ``drop()``: reset every connection at once (a NAT table flushed, a peer rebooted);
* ``delay(seconds)``: every chunk waits that long before it is forwarded;
* ``blackhole(True)``: bytes in both directions vanish; when the blackhole ends, the
  connections it touched are reset (their byte streams have holes, as after a TCP
  timeout), new ones work again;
* ``gate(False)``: new connections are refused (used while Redis restarts, so that
  the harness's MONITOR is attached before any lockrun command reaches the new server);
* ``stall_replication(True)``: on replication connections (a replica's, recognised by its
  ``REPLCONF``/``PSYNC``), the master's bytes vanish while the replica's acknowledgements still
  pass; when the stall ends those connections are reset. What a replica never received, a
  failover during the stall loses.
"""

from __future__ import annotations

import asyncio
import threading


class _Pair:
    def __init__(self, client: asyncio.StreamWriter, upstream: asyncio.StreamWriter) -> None:
        self.writers = (client, upstream)
        self.tainted = False  # some bytes were swallowed by a blackhole
        self.replying = True  # the last bytes went server -> client (so the next client bytes are a new request)
        self.replication = False  # a replica's link to its master
        self.stalled = False  # some of the master's bytes to that replica were swallowed

    def abort(self) -> None:
        for writer in self.writers:
            writer.transport.abort()  # RST, not a polite FIN: the peer learns it the hard way


class FaultyProxy:
    def __init__(self, upstream_port: int, upstream_host: str = "127.0.0.1") -> None:
        self.upstream = (upstream_host, upstream_port)
        self.port = 0
        self._delay = 0.0
        self._blackhole = False
        self._stall = False
        self._open = True
        self._pairs: set[_Pair] = set()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="soak-proxy", daemon=True)
        self._server: asyncio.base_events.Server | None = None
        self.connections = 0
        #: Round trips: bursts of client bytes that open a connection or follow a reply. A
        #: pipeline (commands sent together, replies read after) is one.
        self.requests = 0

    # -- life cycle -----------------------------------------------------------------

    def start(self) -> FaultyProxy:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the proxy did not start")
        return self

    def close(self) -> None:
        def shut():
            if self._server:
                self._server.close()
            for pair in list(self._pairs):
                pair.abort()
            self._loop.stop()

        self._loop.call_soon_threadsafe(shut)
        self._thread.join(10)

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)

        async def listen():
            self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
            self.port = self._server.sockets[0].getsockname()[1]

        self._loop.run_until_complete(listen())
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            pending = asyncio.all_tasks(self._loop)
            for task in pending:
                task.cancel()
            self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self._loop.close()

    # -- faults (thread-safe) -------------------------------------------------------

    def _call(self, fn, *args) -> None:
        done = threading.Event()

        def run():
            try:
                fn(*args)
            finally:
                done.set()

        self._loop.call_soon_threadsafe(run)
        done.wait(10)

    def drop(self) -> None:
        self._call(self._drop_all)

    def delay(self, seconds: float) -> None:
        self._delay = seconds

    def blackhole(self, on: bool) -> None:
        self._blackhole = on
        if not on:
            self._call(self._drop_tainted)

    def gate(self, open_: bool) -> None:
        self._open = open_

    def stall_replication(self, on: bool) -> None:
        self._stall = on
        if not on:
            self._call(self._drop_stalled)

    def _drop_stalled(self) -> None:
        for pair in list(self._pairs):
            if pair.stalled:
                pair.abort()

    def _drop_all(self) -> None:
        for pair in list(self._pairs):
            pair.abort()

    def _drop_tainted(self) -> None:
        for pair in list(self._pairs):
            if pair.tainted:
                pair.abort()

    # -- forwarding -----------------------------------------------------------------

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self._open:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.transport.abort()  # Redis is down: the client sees its connection reset
            return
        self.connections += 1
        pair = _Pair(writer, up_writer)
        self._pairs.add(pair)
        try:
            await asyncio.gather(self._pump(reader, up_writer, pair, True), self._pump(up_reader, writer, pair, False))
        except asyncio.CancelledError:
            pass  # close() with connections still open (Python 3.11 logs a cancelled handler as an error)
        finally:
            self._pairs.discard(pair)
            pair.abort()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, pair: _Pair,
                    upstream: bool) -> None:
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                if upstream and pair.replying:
                    self.requests += 1
                pair.replying = not upstream
                if upstream and (b"REPLCONF" in data or b"PSYNC" in data):
                    pair.replication = True
                if not upstream and pair.replication and self._stall:
                    pair.stalled = True
                    continue
                if self._blackhole:
                    pair.tainted = True
                    continue
                if self._delay:
                    await asyncio.sleep(self._delay)
                if pair.tainted:
                    break
                writer.write(data)
                await writer.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            pair.abort()
